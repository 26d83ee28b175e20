"""Selectors that match nothing and option values out of range are refused (exit 2, naming the
option and the names that exist) before anything runs; unreachable or never probed hosts are
never counted as fine or as "on their target already" (exit 3). See docs/exit-codes.md."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fleet.cli.app import run
from fleet.errors import ExitCode
from fleet.history import add_snapshot, open_history, upsert_host
from fleet.history.rollouts import create_rollout, list_rollouts
from tests.conftest import run_fleet

ROOT = Path(__file__).resolve().parents[2]
MATRIX = str(ROOT / "matrices" / "example.yaml")
INVENTORY = """\
h100 = [("gpu-01", {"pool": "h100"}), ("gpu-02", {"pool": "h100"})]
a100 = [("gpu-03", {"pool": "a100"})]
"""


class Result:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def fleet_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """`fleet ARGV` run in this process (the real entry point, `fleet.cli.app.run`)."""
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.chdir(ROOT)

    def call(*argv: str) -> Result:
        capsys.readouterr()
        with pytest.raises(SystemExit) as info:
            run(list(argv))
            raise SystemExit(0)
        out, err = capsys.readouterr()
        code = info.value.code
        return Result(code if isinstance(code, int) else 0, out, err)

    return call


def _nothing_ran(tmp_path: Path) -> None:
    """No rollout recorded, no simulated fleet saved."""
    db = tmp_path / "h.db"
    if db.exists():
        with open_history(str(db)) as h:
            assert list_rollouts(h) == []
    assert not (tmp_path / "h.db.sim.json").exists()


# ------------------------------------------------------------------ rollout: pools, releases
@pytest.mark.parametrize("verb", ["start", "plan"])
def test_rollout_unknown_pool_lists_the_pools(fleet_cli, tmp_path: Path, verb: str) -> None:
    r = fleet_cli("--db", str(tmp_path / "h.db"), "rollout", verb, "-m", MATRIX, "--sim", "20",
                  "--pool", "h100", "--pool", "no-such-pool")
    assert r.returncode == ExitCode.BAD_INPUT, r.stderr
    assert "--pool" in r.stderr and "no-such-pool" in r.stderr
    assert "a100, h100, h100-canary, l40s" in r.stderr
    _nothing_ran(tmp_path)


def test_rollout_plan_pool_without_hosts_in_the_inventory(fleet_cli, tmp_path: Path) -> None:
    inv = tmp_path / "inv.py"
    inv.write_text(INVENTORY)
    r = fleet_cli("--db", str(tmp_path / "h.db"), "rollout", "plan", "-m", MATRIX, "-i",
                  str(inv), "--pool", "l40s")
    assert r.returncode == ExitCode.BAD_INPUT, r.stderr
    assert "'l40s' has no host" in r.stderr and "a100, h100" in r.stderr


def test_rollout_unknown_release_lists_the_releases(fleet_cli, tmp_path: Path) -> None:
    r = fleet_cli("--db", str(tmp_path / "h.db"), "rollout", "start", "-m", MATRIX, "--sim",
                  "20", "--pool", "h100", "--release", "r999")
    assert r.returncode == ExitCode.BAD_INPUT, r.stderr
    assert "--release" in r.stderr and "r570-cuda12.8, r580-cuda13.0, r595-cuda13.2" in r.stderr
    _nothing_ran(tmp_path)


# ------------------------------------------------------------------ rollout: option values
@pytest.mark.parametrize("value,says", [
    ("apply_fail=2", "apply_fail=2"),
    ("no_such_fault=0.1", "unknown fault 'no_such_fault'"),
    ("apply_fail=nan", "finite"),
    ("unreachable=inf", "finite"),
    ("slow=-0.5", "slow=-0.5"),
    ("apply_fail", "NAME=RATE"),
    ("slow_factor=0", "slow_factor=0"),
])
def test_sim_faults_are_checked(fleet_cli, tmp_path: Path, value: str, says: str) -> None:
    r = fleet_cli("--db", str(tmp_path / "h.db"), "rollout", "start", "-m", MATRIX, "--sim",
                  "20", "--pool", "h100-canary", "--sim-faults", value)
    assert r.returncode == ExitCode.BAD_INPUT, r.stderr
    assert "--sim-faults" in r.stderr and says in r.stderr
    assert "internal error" not in r.stderr
    _nothing_ran(tmp_path)


@pytest.mark.parametrize("value,says", [
    ("r595-cuda13.2=0", "between 0.01 and 100"),
    ("r595-cuda13.2=inf", "between 0.01 and 100"),
    ("r595-cuda13.2=nan", "between 0.01 and 100"),
    ("r595-cuda13.2=-1", "between 0.01 and 100"),
    ("r999=0.8", "no release 'r999'"),
    ("r595-cuda13.2", "RELEASE=FACTOR"),
])
def test_sim_slow_is_checked(fleet_cli, tmp_path: Path, value: str, says: str) -> None:
    r = fleet_cli("--db", str(tmp_path / "h.db"), "rollout", "start", "-m", MATRIX, "--sim",
                  "20", "--pool", "h100-canary", "--sim-slow", value)
    assert r.returncode == ExitCode.BAD_INPUT, r.stderr
    assert "--sim-slow" in r.stderr and says in r.stderr
    _nothing_ran(tmp_path)


def test_sim_spec_release_perf_is_checked(fleet_cli, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("hosts: 20\nrelease_perf:\n  r595-cuda13.2: 0\n  r999: 0.9\n")
    r = fleet_cli("--db", str(tmp_path / "h.db"), "rollout", "start", "-m", MATRIX,
                  "--sim-spec", str(spec), "--pool", "h100-canary")
    assert r.returncode == ExitCode.BAD_INPUT, r.stderr
    assert "release_perf.r595-cuda13.2" in r.stderr
    _nothing_ran(tmp_path)


def test_scheduler_is_checked(fleet_cli, tmp_path: Path) -> None:
    for value in ("nosuch", "slurm"):  # slurm: the simulated fleet has its own
        r = fleet_cli("--db", str(tmp_path / "h.db"), "rollout", "start", "-m", MATRIX,
                      "--sim", "20", "--scheduler", value)
        assert r.returncode == ExitCode.BAD_INPUT, r.stderr
        assert "--scheduler" in r.stderr
    _nothing_ran(tmp_path)


# ------------------------------------------------------------------ rollout ids
@pytest.mark.parametrize("argv", [["resume", "99"], ["abort", "99", "--force"],
                                  ["promote", "99"], ["keep-waiting", "99"],
                                  ["status", "99"]])
def test_unknown_rollout_id_lists_the_ids(fleet_cli, tmp_path: Path, argv: list[str]) -> None:
    db = tmp_path / "h.db"
    with open_history(str(db)) as h:
        for _ in range(2):
            create_rollout(h, matrix_path=MATRIX, release="r595-cuda13.2", pools=[],
                           waves=[], started_by="t", owner="t@x", pid=1,
                           at=datetime.now(UTC), wall=datetime.now(UTC))
    r = fleet_cli("--db", str(db), "rollout", *argv)
    assert r.returncode == ExitCode.BAD_INPUT, r.stderr
    assert "no rollout 99" in r.stderr and "newest first: 2, 1" in r.stderr


# ------------------------------------------------------------------ unreachable hosts
def test_rollout_with_every_host_unreachable_is_not_on_target(fleet_cli,
                                                              tmp_path: Path) -> None:
    r = fleet_cli("--db", str(tmp_path / "h.db"), "rollout", "start", "-m", MATRIX, "--sim",
                  "20", "--pool", "h100-canary", "--sim-faults", "unreachable=1", "--json")
    assert r.returncode == ExitCode.INCOMPLETE, r.stderr
    assert "on its target" not in r.stderr
    assert "could not be reached" in r.stderr and "h100-canary-00001" in r.stderr


def test_rollout_that_skipped_unreachable_hosts_is_incomplete(fleet_cli,
                                                              tmp_path: Path) -> None:
    """One host of the pool unreachable, the others move: completed, and exit 3 naming it."""
    text = Path(MATRIX).read_text()
    at = text.index('max_unavailable: "10%"', text.index("\n  h100:\n"))
    matrix = tmp_path / "m.yaml"  # room for waves of several hosts beside the unreachable one
    matrix.write_text(text[:at] + 'max_unavailable: "50%"' + text[at + 22:])
    spec = tmp_path / "spec.yaml"
    spec.write_text("pools:\n  h100: {hosts: 10}\nfaults:\n  h100-00003: {unreachable: true}\n")
    r = fleet_cli("--db", str(tmp_path / "h.db"), "rollout", "start", "-m", str(matrix),
                  "--sim-spec", str(spec), "--json")
    assert r.returncode == ExitCode.INCOMPLETE, r.stderr
    doc = json.loads(r.stdout)
    assert doc["status"] == "completed" and doc["unreachable"] == ["h100-00003"]
    assert "h100-00003" in r.stderr


# ------------------------------------------------------------------ fleet check
def _history(db: Path) -> None:
    now = datetime.now(UTC)
    with open_history(str(db)) as h:
        for name, pool in (("gpu-01", "h100"), ("gpu-02", "h100"), ("gpu-03", "a100")):
            upsert_host(h, name, pool=pool)
        add_snapshot(h, "gpu-01", taken_at=now, source="nvml", facts={})
        add_snapshot(h, "gpu-03", taken_at=now, source="nvml", facts={})


@pytest.mark.parametrize("argv,says", [
    (["--pool", "no-such-pool"], "pools: a100, h100"),
    (["--host", "gpu-01", "--host", "no-such-host"], "hosts: gpu-01, gpu-02, gpu-03"),
])
def test_check_unknown_selector(fleet_cli, tmp_path: Path, argv: list[str], says: str) -> None:
    db = tmp_path / "h.db"
    _history(db)
    r = fleet_cli("--db", str(db), "check", *argv)
    assert r.returncode == ExitCode.BAD_INPUT, r.stderr
    assert argv[-2] in r.stderr and argv[-1] in r.stderr and says in r.stderr
    assert "no findings" not in r.stdout + r.stderr


def test_check_never_probed_host_is_not_fine(fleet_cli, tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    _history(db)
    ok = fleet_cli("--db", str(db), "check", "--pool", "a100")
    assert ok.returncode == 0, ok.stderr
    r = fleet_cli("--db", str(db), "check", "--pool", "h100", "--json")
    assert r.returncode == ExitCode.INCOMPLETE, r.stderr
    assert json.loads(r.stdout)["unprobed"] == ["gpu-02"]
    assert "never probed" in r.stderr and "gpu-02" in r.stderr


# ------------------------------------------------------------------ hygiene --limit with --sim
def test_hygiene_sim_limit_applies(fleet_cli, tmp_path: Path) -> None:
    r = fleet_cli("--db", str(tmp_path / "h.db"), "hygiene", "run", "-m", MATRIX, "--sim", "12",
                  "--limit", "h100", "--no-benchmark", "--json")
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    assert doc["drift"] and {d["pool"] for d in doc["drift"]} == {"h100"}


def test_hygiene_sim_unknown_limit_is_refused(fleet_cli, tmp_path: Path) -> None:
    r = fleet_cli("--db", str(tmp_path / "h.db"), "hygiene", "run", "-m", MATRIX, "--sim", "12",
                  "--limit", "h100", "--limit", "nosuchpool", "--no-benchmark")
    assert r.returncode == ExitCode.BAD_INPUT, r.stderr
    assert "--limit" in r.stderr and "nosuchpool" in r.stderr
    assert "a100, h100, h100-canary, l40s" in r.stderr
    assert not (tmp_path / "h.db").exists()


@pytest.mark.parametrize("argv", [["--scheduler", "nosuch"], ["--via", "pigeon"],
                                  ["--via", "slurm", "--partition", "gpu"]])
def test_hygiene_sim_options_are_checked(fleet_cli, tmp_path: Path, argv: list[str]) -> None:
    r = fleet_cli("--db", str(tmp_path / "h.db"), "hygiene", "run", "-m", MATRIX, "--sim", "12",
                  "--no-benchmark", *argv)
    assert r.returncode == ExitCode.BAD_INPUT, r.stderr
    assert argv[0] in r.stderr


# ------------------------------------------------------------------ bench run, rollback
@pytest.mark.parametrize("argv,option", [
    (["--source", "gpu-magic"], "--source"),
    (["--suite", "replay", "--rate-scale", "0"], "--rate-scale"),
    (["--suite", "replay", "--rate-scale", "nan"], "--rate-scale"),
    (["--suite", "replay", "--warmup", "-1"], "--warmup"),
    (["--suite", "replay", "--slo-ms", "inf"], "--slo-ms"),
])
def test_bench_run_options_are_checked(fleet_cli, tmp_path: Path, argv: list[str],
                                       option: str) -> None:
    inv = tmp_path / "inv.py"
    inv.write_text(INVENTORY)
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"t": 0, "method": "GET", "path": "/"}\n')
    # in a process of its own: were an option let through, bench run would patch the process
    # for gevent and reach for the hosts
    r = run_fleet("--db", str(tmp_path / "h.db"), "bench", "run", "-i", str(inv), "--trace",
                  str(trace), *argv)
    assert r.returncode == ExitCode.BAD_INPUT, r.stderr
    assert option in r.stderr
    assert not (tmp_path / "h.db").exists()


@pytest.mark.parametrize("argv,says", [
    (["--pool", "no-such-pool"], "pools: a100, h100"),
    (["--host", "gpu-01", "--host", "no-such-host"], "hosts: gpu-01, gpu-02, gpu-03"),
    (["--pool", "h100", "--to", "r999"], "releases: r570-cuda12.8"),
])
def test_rollback_unknown_selector(fleet_cli, tmp_path: Path, argv: list[str],
                                   says: str) -> None:
    inv = tmp_path / "inv.py"
    inv.write_text(INVENTORY)
    # in a process of its own: rollback patches the process for gevent before it reads the
    # inventory
    r = run_fleet("--db", str(tmp_path / "h.db"), "rollback", "-i", str(inv), "-m", MATRIX,
                  "--reason", "incident", "--yes", *argv)
    assert r.returncode == ExitCode.BAD_INPUT, r.stderr
    assert says in r.stderr and argv[-2] in r.stderr
    assert not (tmp_path / "h.db").exists()
