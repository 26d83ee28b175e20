"""`fleet demo`: the whole mission in one command, on an embedded simulated fleet.

Exit codes: 0 the story ran as told; 1 it did not (the differences are listed); 2 bad input
(`--keep` names a folder that holds something else; `--lab` without root); 3 `--lab` could not
run (another lab is up, the lab failed).
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from fleet.cli.output import console, emit_json, esc
from fleet.errors import BadInput, ProblemsFound
from fleet.jobs.demo_folder import MARKER, working_folder

__all__ = ["MARKER", "demo", "register", "write_hygiene_reports"]


def write_hygiene_reports(data: Mapping[str, Any], directory: Path) -> Mapping[str, Path]:
    """The hygiene reports (HTML, Markdown, JSON, Prometheus), as `fleet hygiene run
    --report-dir` writes them."""
    from fleet.reports import render_json, write_reports

    directory.mkdir(parents=True, exist_ok=True)
    return write_reports(json.loads(render_json(data)), directory)


def _folder(keep: Path | None) -> Path:
    """The working folder (`fleet.jobs.demo_folder`: what `--keep` may name), marker written."""
    return working_folder(keep)


def _lab_preflight() -> None:
    import os

    from fleet.errors import CouldNotComplete
    from fleet.jobs.demo_lab import BRIDGE, bridge_exists

    if os.geteuid() != 0:
        raise BadInput.single(
            "`fleet demo --lab` needs root (it starts real SSH hosts in network namespaces): "
            "run `sudo .venv/bin/fleet demo --lab`, or `fleet demo` (simulated fleet, no root)",
            field="--lab")
    if bridge_exists():
        raise CouldNotComplete(
            f"another lab is up (bridge {BRIDGE} exists) and only one netns lab can be: "
            "`fleet lab down` it (or wait for the lab tests to finish), then run again")


def demo(
    keep: Annotated[Path | None, typer.Option(
        "--keep", metavar="DIR", help="Work in DIR (created; a folder an earlier demo made is "
        "reused) instead of a new temporary folder. DIR and the folders above it must be "
        "yours (or root's) and writable by no one else: a folder of your own, not a shared "
        "one such as /tmp itself.")] = None,
    json_out: Annotated[bool, typer.Option(
        "--json", help="A summary on stdout: rollouts and their outcomes, quarantined and "
        "drifted hosts, the report and the database.")] = False,
    lab: Annotated[bool, typer.Option(
        "--lab", help="Tell the story on the lab of real SSH hosts (root): a lab of 8 hosts "
        "brought up in a run directory of its own and always torn down (a few minutes); its "
        "l40s pool runs EL9 (dnf, rpm; needs rpmbuild and createrepo_c here, else all Debian). "
        "Exits 3 when another lab is up.")] = False,
) -> None:
    """Run the whole mission on a simulated fleet of 64 hosts, with the real engine.

    A baseline probe and hygiene run; candidate A, 25% slower, stopped by the canary's
    benchmark gate and rolled back automatically; candidate B promoted through every wave;
    the weekly hygiene run quarantining two hosts with rising corrected ECC and flagging a
    drifted one; an incident rollback of a pool, verified. No root, no setup; deterministic.
    The story goes to stdout (to stderr with --json), with the commands to type on a real
    fleet, and leaves its folder (matrix, history database, HTML report) for you to look at.
    """
    if lab:
        _lab_preflight()
    from fleet.jobs.demo import Step, run_demo

    folder = _folder(keep)
    out = story_console(json_out)
    prog = invoked_as()
    what = ("the lab: 8 real SSH hosts in network namespaces (root), brought up and torn down"
            if lab else "a simulated fleet of 64 GPU hosts")
    out.print(f"[bold]fleet demo[/bold]: {what}, the real engine, a logical clock; "
              f"working in {esc(folder)}")
    spinners: list[Any] = []

    def on_step(step: Step) -> None:
        for spinner in spinners:  # on a terminal, never draw over the story
            spinner.stop()
        mark = "[green]ok[/green]" if step.ok else "[red]NOT AS EXPECTED[/red]"
        out.print(f"\n[bold]{step.number}. {esc(step.title)}[/bold]  {mark}")
        for line in step.lines:
            out.print(f"   {line}", markup=False, highlight=False)
        if step.commands:
            out.print("   [dim]on a real fleet:[/dim]")
        for cmd in step.commands:
            out.print(f"   [cyan]$ {esc(as_typed(cmd, prog))}[/cyan]", highlight=False)
        for spinner in spinners:
            spinner.start()

    started = time.monotonic()
    with console.status("starting") as status:
        spinners.append(status)
        result = run_demo(folder, reporter=write_hygiene_reports, on_step=on_step,
                          on_progress=lambda m: status.update(m), lab=lab)
    took = time.monotonic() - started
    db = shlex.quote(str(result.db))
    out.print(f"\n[bold]done[/bold] in {took:.1f} s ({result.started:%Y-%m-%d} to "
              f"{result.ended:%Y-%m-%d} on the logical clock)")
    if result.lab_run is not None:
        out.print(f"   the lab ({result.lab_run}) is down again; the database keeps "
                  "what it did", markup=False)
    out.print(f"   HTML report: {result.report}", markup=False)
    out.print(f"   database:    {result.db}", markup=False)
    out.print(f"   matrix:      {result.matrix}", markup=False)
    out.print("   look around:")
    for cmd in look_around(prog, db, result.cast.incident_pool, shlex.quote(str(result.matrix))):
        out.print(f"   [cyan]$ {esc(cmd)}[/cyan]", highlight=False)
    if keep is None:
        out.print("   [dim](a temporary folder: remove it when done, or choose one with "
                  "--keep DIR)[/dim]")
    if json_out:
        emit_json(result.summary())
    if not result.ok:
        for problem in result.problems:
            console.print(f"[red]not as expected[/red]: {esc(problem)}", soft_wrap=True)
        raise ProblemsFound(f"the demo did not go as told: {len(result.problems)} difference(s)")


def look_around(prog: str, db: str, pool: str, matrix: str) -> list[str]:
    """Commands that read what the demo left (each exits 0 on it, tests/unit/demo)."""
    return [f"{prog} --db {db} rollout history",
            f"{prog} --db {db} rollout status 1 --hosts",
            f"{prog} --db {db} quarantine list",
            f"{prog} --db {db} history events -n 20",
            f"{prog} --db {db} check -l {shlex.quote(pool)}",
            f"{prog} matrix check {matrix}"]


def story_console(json_out: bool) -> Console:
    """Where the story goes: stdout (it is the command's output), or stderr beside `--json`
    (stdout holds the one JSON document). Never wrapped when it goes to a pipe or a file: a
    command cut in two lines cannot be pasted, and `grep` finds no line that was split."""
    from fleet.cli.safe_console import SafeConsole

    if json_out:
        return SafeConsole(stderr=True, highlight=False, emoji=False,
                           soft_wrap=not console.is_terminal)
    probe = SafeConsole(highlight=False, emoji=False)
    return SafeConsole(highlight=False, emoji=False, soft_wrap=not probe.is_terminal)


def invoked_as(argv0: str | None = None) -> str:
    """How to run fleet again, the way this process was started: `fleet` when that is what
    the shell finds on PATH; else the path as typed (`.venv/bin/fleet`, where the README's
    install leaves it, with no virtual environment activated); `python -m fleet` as a module."""
    import os
    import shutil
    import sys

    arg = sys.argv[0] if argv0 is None else argv0
    name = Path(arg).name
    if not arg or name in ("__main__.py", "-c", "-m") or name.endswith(".py"):
        return f"{shlex.quote(sys.executable)} -m fleet"
    if os.sep not in arg:
        return shlex.quote(arg)
    found = shutil.which(name)
    if found and Path(found).resolve() == Path(arg).resolve():
        return shlex.quote(name)
    return shlex.quote(arg)


def as_typed(cmd: str, prog: str) -> str:
    """A suggested `fleet ...` command with the program as the user can type it."""
    return prog + cmd[len("fleet"):] if cmd.startswith("fleet ") else cmd


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
