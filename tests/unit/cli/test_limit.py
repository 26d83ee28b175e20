"""`-l/--limit` everywhere (issue 13, point 6): a pool (group) or a host-name glob, repeatable,
with `--pool`/`--host` as aliases; a value that matches nothing is exit 2 naming it, also when
valid values come with it (a union would silently drop the typo)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fleet.cli.app import run
from fleet.cli.selection import LIMIT_HELP
from fleet.domain.ports import HostRef
from fleet.domain.selection import limit_problem, select, unmatched
from fleet.errors import BadInput, ExitCode
from fleet.history import add_snapshot, open_history, upsert_host
from tests.conftest import run_fleet

ROOT = Path(__file__).resolve().parents[3]
MATRIX = str(ROOT / "matrices" / "example.yaml")
INVENTORY = """\
h100 = [("gpu-01", {"pool": "h100"}), ("gpu-02", {"pool": "h100"})]
a100 = [("gpu-03", {"pool": "a100"})]
spare = [("gpu-09", {"pool": "l40s", "ssh_port": 1})]
"""
REFS = [HostRef("gpu-01", "h100", groups=("h100", "rack1")), HostRef("gpu-02", "h100"),
        HostRef("gpu-03", "a100")]


class Result:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def fleet(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """`fleet ARGV` in this process, through the real entry point."""
    monkeypatch.setenv("COLUMNS", "200")

    def call(*argv: str) -> Result:
        capsys.readouterr()
        with pytest.raises(SystemExit) as info:
            run(list(argv))
        out, err = capsys.readouterr()
        code = info.value.code
        return Result(code if isinstance(code, int) else 0, out, err)

    return call


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    inv = tmp_path / "inv.py"
    inv.write_text(INVENTORY)
    return inv


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "h.db"
    now = datetime.now(UTC)
    with open_history(str(path)) as h:
        for name, pool in (("gpu-01", "h100"), ("gpu-02", "h100"), ("gpu-03", "a100")):
            upsert_host(h, name, pool=pool)
            add_snapshot(h, name, taken_at=now, source="nvml", facts={},
                         reachable=name != "gpu-02")  # what `check` shows of the selection
    return path


# ------------------------------------------------------------------ the domain
def test_values_are_pools_groups_or_globs() -> None:
    assert [h.name for h in select(["a100"], REFS)] == ["gpu-03"]
    assert [h.name for h in select(["rack1"], REFS)] == ["gpu-01"]
    assert [h.name for h in select(["gpu-0[12]"], REFS)] == ["gpu-01", "gpu-02"]
    assert [h.name for h in select(["a100", "gpu-01"], REFS)] == ["gpu-01", "gpu-03"]
    assert select(None, REFS) == REFS


def test_a_typo_beside_valid_values_is_found() -> None:
    assert unmatched(["h100", "h10O", "gpu-*", "GPU-*"], REFS) == ["h10O", "GPU-*"]
    why = limit_problem("h10O", REFS)
    assert "'h10O'" in why and "pools: a100, h100" in why and "other groups: rack1" in why
    assert "hosts: gpu-01, gpu-02, gpu-03" in why


def test_select_hosts_refuses_a_typo_beside_valid_names(inventory: Path) -> None:
    from fleet.remote.session import load_inventory, select_hosts

    inv = load_inventory(inventory)
    assert [h.name for h in select_hosts(inv, ["h100", "gpu-09"])] == ["gpu-01", "gpu-02",
                                                                      "gpu-09"]
    assert [h.name for h in select_hosts(inv, ["l40s"])] == ["gpu-09"]  # a pool given as data
    with pytest.raises(BadInput) as err:
        select_hosts(inv, ["h100", "nosuchpool", "gpu-0*"])
    assert [p.field for p in err.value.problems] == ["--limit"]
    assert "'nosuchpool'" in str(err.value) and "pools: a100, h100, l40s" in str(err.value)


# ------------------------------------------------------------------ commands on the history
@pytest.mark.parametrize("argv,hosts", [
    (["-l", "h100"], ["gpu-01", "gpu-02"]),
    (["--limit", "gpu-0[13]"], ["gpu-01", "gpu-03"]),
    (["-l", "a100", "--host", "gpu-02"], ["gpu-02", "gpu-03"]),
    (["--pool", "a100"], ["gpu-03"]),
    (["-l", "gpu-01", "--pool", "a100"], ["gpu-01", "gpu-03"]),
    ([], ["gpu-01", "gpu-02", "gpu-03"]),
])
def test_check_selects_with_limit(fleet, db: Path, argv: list[str], hosts: list[str]) -> None:
    r = fleet("--db", str(db), "check", "--all", "--json", *argv)
    doc = json.loads(r.stdout)
    assert doc["unprobed"] == []
    if "gpu-02" in hosts:
        assert r.returncode == ExitCode.INCOMPLETE and doc["unreachable"] == ["gpu-02"]
    else:
        assert r.returncode == ExitCode.OK and doc["unreachable"] == [], r.stderr
    if "--host" not in argv:  # history hosts has --limit and --pool
        r = fleet("--db", str(db), "history", "hosts", "--json", *argv)
        assert r.returncode == ExitCode.OK, r.stderr
        assert sorted(h["name"] for h in json.loads(r.stdout)["hosts"]) == hosts


@pytest.mark.parametrize("argv,option,typo", [
    (["-l", "h100", "-l", "h10O"], "--limit", "h10O"),
    (["-l", "h100", "--pool", "nosuchpool"], "--pool", "nosuchpool"),
    (["--host", "gpu-01", "--host", "gpu-99"], "--host", "gpu-99"),
])
def test_check_refuses_a_typo_among_valid_values(fleet, db: Path, argv: list[str],
                                                 option: str, typo: str) -> None:
    r = fleet("--db", str(db), "check", "--json", *argv)
    assert r.returncode == ExitCode.BAD_INPUT, r.stderr
    assert f"{option}: '{typo}' matches no pool, group or host name" in r.stderr
    assert "pools: a100, h100" in r.stderr and "hosts: gpu-01, gpu-02, gpu-03" in r.stderr
    assert json.loads(r.stdout)["error"]["where"]["field"] == option
    assert "no findings" not in r.stdout + r.stderr


def test_history_hosts_refuses_a_typo(fleet, db: Path) -> None:
    r = fleet("--db", str(db), "history", "hosts", "-l", "a100", "-l", "nosuch")
    assert r.returncode == ExitCode.BAD_INPUT, r.stderr
    assert "--limit: 'nosuch' matches no pool" in r.stderr


# ------------------------------------------------------------------ commands on an inventory
# in processes of their own: probe, bench and hygiene patch the process for gevent first
@pytest.mark.parametrize("argv", [
    ["probe", "-i", "{inv}", "-l", "h100", "-l", "nosuchpool"],
    ["exec", "-i", "{inv}", "-l", "h100", "-l", "nosuchpool", "--", "true"],
    ["bench", "run", "-i", "{inv}", "-l", "h100", "-l", "nosuchpool"],
    ["hygiene", "run", "-m", MATRIX, "-i", "{inv}", "-l", "h100", "-l", "nosuchpool",
     "--no-benchmark"],
], ids=["probe", "exec", "bench-run", "hygiene-run"])
def test_inventory_commands_refuse_a_typo_among_valid_values(inventory: Path, tmp_path: Path,
                                                             argv: list[str]) -> None:
    db = tmp_path / "fresh.db"
    r = run_fleet("--db", str(db), *[str(inventory) if a == "{inv}" else a for a in argv])
    assert r.returncode == ExitCode.BAD_INPUT, r.stderr
    assert "--limit: 'nosuchpool' matches no pool, group or host name" in r.stderr
    assert "pools: a100, h100, l40s" in r.stderr
    assert "unreachable" not in r.stderr  # refused before any connection
    assert not db.exists()  # nor recorded anything


# ------------------------------------------------------------------ rollouts, rollback
@pytest.mark.parametrize("verb", ["plan", "start"])
def test_rollout_limit_selects_pools(fleet, tmp_path: Path, verb: str) -> None:
    argv = ["--db", str(tmp_path / "h.db"), "rollout", verb, "-m", MATRIX, "--sim", "40",
            "-l", "h100-canary", "-p", "a100", "--json"]
    r = fleet(*argv, *(["--dry"] if verb == "start" else []))
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    plan = doc if verb == "plan" else doc.get("plan", doc)
    assert sorted(p["pool"] for p in plan["pools"]) == ["a100", "h100-canary"]


@pytest.mark.parametrize("argv,option", [
    (["-l", "h100", "-l", "nosuchpool"], "--limit"),
    (["-l", "h100", "--pool", "nosuchpool"], "--pool"),
    (["-p", "nosuchpool"], "--pool"),
    (["-l", "h100-*"], "--limit"),  # a rollout moves whole pools: a glob is no pool
])
@pytest.mark.parametrize("verb", ["plan", "start"])
def test_rollout_refuses_what_names_no_pool(fleet, tmp_path: Path, verb: str,
                                            argv: list[str], option: str) -> None:
    r = fleet("--db", str(tmp_path / "h.db"), "rollout", verb, "-m", MATRIX, "--sim", "40",
              *argv)
    assert r.returncode == ExitCode.BAD_INPUT, r.stderr
    assert f"{option}: no pool {argv[-1]!r}" in r.stderr
    assert "a100, h100, h100-canary, l40s" in r.stderr
    assert not (tmp_path / "h.db").exists() and not (tmp_path / "h.db.sim.json").exists()


def test_rollout_history_counts_with_n(fleet, tmp_path: Path) -> None:
    db = str(tmp_path / "h.db")
    for seed in ("0", "1"):  # another seed, another fleet: the same would go on with the first
        r = fleet("--db", db, "rollout", "start", "-m", MATRIX, "--sim", "40", "--seed", seed,
                  "-l", "h100-canary", "--json")
        assert r.returncode in (0, 1, 3), r.stderr
    for argv in (["-n", "1"], ["--last", "1"], ["--limit", "1"]):  # --limit: the old spelling
        r = fleet("--db", db, "rollout", "history", "--json", *argv)
        assert r.returncode == 0 and len(json.loads(r.stdout)["rollouts"]) == 1, r.stderr
    r = fleet("--db", db, "rollout", "history", "--json")
    assert len(json.loads(r.stdout)["rollouts"]) == 2


@pytest.mark.parametrize("argv,option,typo", [
    (["-l", "h100", "-l", "nosuchpool"], "--limit", "nosuchpool"),
    (["--pool", "h100", "--host", "gpu-99"], "--host", "gpu-99"),
    (["-l", "gpu-0*", "--pool", "h10O"], "--pool", "h10O"),
])
def test_rollback_refuses_a_typo_among_valid_values(inventory: Path, tmp_path: Path,
                                                    argv: list[str], option: str,
                                                    typo: str) -> None:
    db = tmp_path / "fresh.db"
    r = run_fleet("--db", str(db), "rollback", "-i", str(inventory), "-m", MATRIX, "--reason",
                  "incident", "--yes", *argv)
    assert r.returncode == ExitCode.BAD_INPUT, r.stderr
    assert f"{option}: '{typo}' matches no pool, group or host name" in r.stderr
    assert not db.exists()


def test_rollback_needs_a_selection(inventory: Path, tmp_path: Path) -> None:
    r = run_fleet("--db", str(tmp_path / "h.db"), "rollback", "-i", str(inventory), "-m",
                  MATRIX, "--reason", "incident", "--yes")
    assert r.returncode == ExitCode.BAD_INPUT, r.stderr
    assert "--limit" in r.stderr and "say what to roll back" in r.stderr


def test_every_selecting_command_has_limit_and_documents_aliases() -> None:
    """`-l/--limit` on every command that selects hosts or pools; `--pool`/`--host` there
    only as aliases that say so."""
    import typer
    from typer.core import TyperGroup

    from fleet.cli.app import build_app

    def walk(cmd: object, path: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
        yield path, cmd
        if isinstance(cmd, TyperGroup):
            for name, sub in cmd.commands.items():
                yield from walk(sub, (*path, name))

    selecting = {("probe",), ("check",), ("apply",), ("rollback",), ("exec",), ("bench", "run"),
                 ("hygiene", "run"), ("history", "hosts"), ("hosts",), ("rollout", "plan"),
                 ("rollout", "start"), ("quarantine", "list"), ("history", "events")}
    # --pool/--host that are not selections: the pool a capture or this node belongs to
    assigning = {("facts", "import"), ("node-check",)}
    for path, cmd in walk(typer.main.get_command(build_app())):
        opts = {o: p for p in getattr(cmd, "params", []) for o in getattr(p, "opts", [])}
        if path in selecting:
            assert "-l" in opts and "--limit" in opts and opts["-l"] is opts["--limit"], path
            assert opts["--limit"].multiple, path
            if path[0] != "rollout" and path != ("history", "events"):
                # the same words everywhere; rollouts take pool names, and on history events a
                # plain number is the old spelling of --last (its help says so)
                assert opts["--limit"].help == LIMIT_HELP, path
        for alias in ("--pool", "--host"):
            if alias in opts and path not in assigning:
                assert path in selecting and "Alias of --limit" in (opts[alias].help or ""), \
                    (path, alias)
