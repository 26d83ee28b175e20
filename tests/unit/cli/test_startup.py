"""Start-up stays cheap (issue 17, point 3): building the app for `--help` imports no heavy library.

Every `fleet` command builds the typer app before it runs, so a module-level import of the
history (SQLAlchemy, sqlmodel, Alembic), pyinfra, fabric, numpy/scipy or pydantic in any command
module slows every command, `--help` included (0.7 s before, about 0.15 s after on the 2-core
machine: benchmarks/startup.py, docs/benchmarks.md). Each case runs `fleet.cli.app.run` in a
fresh interpreter and reads `sys.modules` when it is done; a new module-level import of one of
these fails here, naming the command line and the module.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]

# what a command imports when it runs, never to build the app or print help
HEAVY = ("sqlalchemy", "sqlmodel", "alembic", "pyinfra", "fabric", "paramiko", "invoke",
         "gevent", "numpy", "scipy", "pydantic", "yaml")

# runs fleet's entry point as the console script does, then reports what was imported
PROBE = textwrap.dedent("""
    import json, sys
    extra, args = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    for name in extra:
        __import__(name)
    from fleet.cli.app import run
    try:
        run(args)
    except SystemExit as exc:
        code = exc.code
    heavy = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.argv[3])))
    print("\\n" + json.dumps({"code": code, "heavy": heavy}), file=sys.stderr)
""")


def _start(args: list[str], extra: tuple[str, ...] = ()) -> tuple[int, list[str], str]:
    """(exit code, heavy top-level packages imported, stdout) of `fleet ARGS`."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(list(extra)), json.dumps(args),
         json.dumps(HEAVY)],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "100", "HOME": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["code"], report["heavy"], done.stdout


@pytest.mark.parametrize("args", [
    ["--help"],
    ["--version"],
    ["probe", "--help"],
    ["check", "--help"],
    ["apply", "--help"],
    ["matrix", "check", "--help"],
    ["history", "--help"],
    ["history", "events", "--help"],
    ["rollout", "start", "--help"],
    ["hygiene", "--help"],
    ["lab", "up", "--help"],
    ["bench", "--help"],
    ["facts", "parse", "--help"],
    ["logs", "parse", "--help"],
    ["preflight", "--help"],
    ["diagnose", "--help"],
], ids=" ".join)
def test_help_and_version_import_no_heavy_library(args: list[str]) -> None:
    code, heavy, out = _start(args)
    assert code == 0, out
    assert ("Usage:" in out) if "--help" in args else out.startswith("fleet ")
    assert heavy == [], (f"`fleet {' '.join(args)}` imported {', '.join(heavy)} while building "
                         "the app: import it inside the command that uses it (fleet/cli/lazy.py)")


def test_the_check_sees_a_heavy_import() -> None:
    """The same harness, with the history's engine imported as a command module used to: it is
    seen."""
    code, heavy, _ = _start(["probe", "--help"], extra=("fleet.history.engine",))
    assert code == 0
    assert {"sqlalchemy", "sqlmodel", "pydantic"} <= set(heavy)


def test_a_command_still_loads_what_it_uses(tmp_path: Path) -> None:
    """Deferred imports happen: `matrix check` on a real matrix loads pydantic and yaml; the
    `--db` string (answered without typer's pydantic coercion) reaches the command unchanged;
    a bad value of an option typer coerces (an int) is still refused with exit 2."""
    code, heavy, out = _start(["matrix", "check", str(ROOT / "matrices" / "example.yaml")])
    assert code == 0, out
    assert {"pydantic", "yaml"} <= set(heavy)
    db = tmp_path / "h story.db"
    code, _, out = _start(["--db", str(db), "history", "migrate", "--json"])
    assert code == 0, out
    assert db.is_file() and str(db) in json.loads(out)["db"]
    code, _, out = _start(["--db", str(db), "history", "events", "--last", "zero"])
    assert code == 2, out


PATHS_APP = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from typing import Annotated
    import typer
    from fleet.cli.lazy import defer_typer_coercion
    if sys.argv[1] == "deferred":
        defer_typer_coercion()
    app = typer.Typer()
    got = {}

    @app.command()
    def cmd(p: Annotated[Path, typer.Option()], q: Annotated[Path | None, typer.Option()] = None,
            e: Annotated[Path | None, typer.Option(exists=True)] = None,
            f: Annotated[Path | None, typer.Option(dir_okay=False, resolve_path=True)] = None,
            ) -> None:
        got.update({k: [type(v).__name__, str(v)] for k, v in dict(p=p, q=q, e=e, f=f).items()})

    try:
        app(json.loads(sys.argv[2]))
    except SystemExit as exc:
        got["code"] = exc.code
    got["pydantic"] = "pydantic" in sys.modules
    print(json.dumps(got))
""")


@pytest.mark.parametrize("args", [
    ["--p", "inv.py"], ["--p", "a b/./c", "--q", "../m.yaml"], ["--p", "", "--q", "~"],
    ["--p", "x", "--e", "/nonexistent"], ["--p", "x", "--e", "/"], ["--p", "x", "--f", "/"],
    ["--p", "x", "--f", "/etc/../etc/hostname"],
], ids=str)
def test_deferred_path_values_are_typers_own(args: list[str]) -> None:
    """A `Path` option given a plain string is answered as typer's pydantic coercion answers it
    (`fleet probe -i` no longer loads pydantic before connecting); click's checks (`exists`)
    still refuse a bad one."""
    def run(mode: str) -> dict[str, object]:
        done = subprocess.run([sys.executable, "-c", PATHS_APP, mode, json.dumps(args)],
                              capture_output=True, text=True, cwd=ROOT, timeout=120)
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))

    own, deferred = run("typer"), run("deferred")
    assert own.pop("pydantic") is True
    assert deferred.pop("pydantic") is False
    assert deferred == own


def test_a_json_probe_loads_no_rich(tmp_path: Path) -> None:
    """`fleet probe --json` off a terminal prints through neither rich console nor spinner:
    rich (~20 ms of start-up) stays unloaded; a human run still prints its table with it."""
    from tests.unit.jobs.test_probe_job import local_probe_lines, write_inventory

    inv = write_inventory(tmp_path, local_probe_lines())
    args = ["--db", str(tmp_path / "h.db"), "probe", "-i", str(inv), "--limit", "h100",
            "--no-frameworks"]

    def run(extra: list[str]) -> tuple[dict[str, Any], str, str]:
        done = subprocess.run(
            [sys.executable, "-c", PROBE, "[]", json.dumps([*args, *extra]),
             json.dumps(["rich"])], capture_output=True, text=True, cwd=ROOT, timeout=120)
        report = json.loads(done.stderr.strip().splitlines()[-1])
        assert report["code"] in (0, 1), done.stderr
        return report, done.stdout, done.stderr

    report, out, _ = run(["--json"])
    assert report["heavy"] == []
    assert len(json.loads(out)["hosts"]) == 2
    report, out, _ = run([])
    assert report["heavy"] == ["rich"] and "@fake/gpu-01" in out  # the table: a result
