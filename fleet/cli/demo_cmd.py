"""`fleet demo`: the whole mission in one command, on an embedded simulated fleet.

Exit codes: 0 the story ran as told; 1 it did not (the differences are listed); 2 bad input
(`--keep` names a folder that holds something else; `--lab` without root); 3 `--lab` could not
run (another lab is up, the lab failed).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from fleet.cli.output import console, emit_json, esc
from fleet.errors import BadInput, ProblemsFound

MARKER = ".fleet-demo"
"""Written into the working folder: `--keep` reuses only a folder that has it (or is empty)."""


def write_hygiene_reports(data: Mapping[str, Any], directory: Path) -> Mapping[str, Path]:
    """The hygiene reports (HTML, Markdown, JSON, Prometheus), as `fleet hygiene run
    --report-dir` writes them."""
    from fleet.reports import render_json, write_reports

    directory.mkdir(parents=True, exist_ok=True)
    return write_reports(json.loads(render_json(data)), directory)


def _folder(keep: Path | None) -> Path:
    if keep is None:
        return Path(tempfile.mkdtemp(prefix="fleet-demo-"))
    if keep.exists() and not keep.is_dir():
        raise BadInput.single("not a folder", file=str(keep), field="--keep")
    if keep.is_dir() and any(keep.iterdir()) and not (keep / MARKER).exists():
        raise BadInput.single("the folder is not empty and was not made by `fleet demo`; "
                              "give a new or empty folder", file=str(keep), field="--keep")
    keep.mkdir(parents=True, exist_ok=True)
    return keep


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
        "reused) instead of a new temporary folder.")] = None,
    json_out: Annotated[bool, typer.Option(
        "--json", help="A summary on stdout: rollouts and their outcomes, quarantined and "
        "drifted hosts, the report and the database.")] = False,
    lab: Annotated[bool, typer.Option(
        "--lab", help="Tell the story on the lab of real SSH hosts (root): a lab of 8 hosts "
        "brought up in a run directory of its own and always torn down (a few minutes). "
        "Exits 3 when another lab is up.")] = False,
) -> None:
    """Run the whole mission on a simulated fleet of 64 hosts, with the real engine.

    A baseline probe and hygiene run; candidate A, 25% slower, stopped by the canary's
    benchmark gate and rolled back automatically; candidate B promoted through every wave;
    the weekly hygiene run quarantining two hosts with rising corrected ECC and flagging a
    drifted one; an incident rollback of a pool, verified. No root, no setup; deterministic.
    Leaves its folder (matrix, history database, HTML report) for you to look at.
    """
    if lab:
        _lab_preflight()
    from fleet.jobs.demo import Step, run_demo

    folder = _folder(keep)
    (folder / MARKER).write_text("made by `fleet demo`; `fleet demo --keep` may reuse it\n")
    what = ("the lab: 8 real SSH hosts in network namespaces (root), brought up and torn down"
            if lab else "a simulated fleet of 64 GPU hosts")
    console.print(f"[bold]fleet demo[/bold]: {what}, the real engine, a logical clock; "
                  f"working in {esc(folder)}")

    def on_step(step: Step) -> None:
        mark = "[green]ok[/green]" if step.ok else "[red]NOT AS EXPECTED[/red]"
        console.print(f"\n[bold]{step.number}. {step.title}[/bold]  {mark}")
        for line in step.lines:
            console.print(f"   {line}", soft_wrap=False, markup=False, highlight=False)
        if step.commands:
            console.print("   [dim]on a real fleet:[/dim]")
        for cmd in step.commands:
            console.print(f"   [cyan]$ {esc(cmd)}[/cyan]", markup=True, highlight=False)

    started = time.monotonic()
    with console.status("starting") as status:
        result = run_demo(folder, reporter=write_hygiene_reports, on_step=on_step,
                          on_progress=lambda m: status.update(m), lab=lab)
    took = time.monotonic() - started
    db = result.db
    console.print(f"\n[bold]done[/bold] in {took:.1f} s ({result.started:%Y-%m-%d} to "
                  f"{result.ended:%Y-%m-%d} on the logical clock)")
    if result.lab_run is not None:
        console.print(f"   the lab ({result.lab_run}) is down again; the database keeps "
                      "what it did", markup=False)
    console.print(f"   HTML report: {result.report}", markup=False)
    console.print(f"   database:    {db}", markup=False)
    console.print(f"   matrix:      {result.matrix}", markup=False)
    console.print("   look around:")
    for cmd in (f"fleet --db {db} rollout history",
                f"fleet --db {db} rollout status 1 --hosts",
                f"fleet --db {db} quarantine list",
                f"fleet --db {db} history events",
                f"fleet --db {db} check --pool {result.cast.incident_pool}",
                f"fleet matrix check {result.matrix}"):
        console.print(f"   [cyan]$ {esc(cmd)}[/cyan]", highlight=False)
    if keep is None:
        console.print("   [dim](a temporary folder: remove it when done, or choose one with "
                      "--keep DIR)[/dim]")
    if json_out:
        emit_json(result.summary())
    if not result.ok:
        for problem in result.problems:
            console.print(f"[red]not as expected[/red]: {esc(problem)}", soft_wrap=True)
        raise ProblemsFound(f"the demo did not go as told: {len(result.problems)} difference(s)")


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
