"""`fleet node-check`: this node's probe and checks, for Slurm's HealthCheckProgram.

Kept light: slurmd runs it every HealthCheckInterval on every node, so only what the check needs
is imported (no history, no pyinfra).
"""

from __future__ import annotations

import os
import re
import socket
import time
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fleet.cli.output import emit_json, esc, stdout
from fleet.errors import BadInput, CouldNotComplete, ProblemsFound

if TYPE_CHECKING:
    from fleet.jobs.node_check import NodeCheckResult

NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
_STYLE = {"fail": "red", "warn": "yellow", "ok": "green"}


def default_node() -> str:
    """`$SLURMD_NODENAME` (slurmd sets it for its HealthCheckProgram), else the short hostname."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def node_check(
    node: Annotated[str | None, typer.Option(
        "--node", help="Slurm node name; default $SLURMD_NODENAME, else the short hostname.")
    ] = None,
    matrix: Annotated[Path | None, typer.Option(
        "--matrix", "-m", envvar="FLEET_MATRIX",
        help="Version matrix (expected release, thresholds). Without one, health checks only "
        "with default thresholds.")] = None,
    release: Annotated[str | None, typer.Option(
        "--release", help="Expected release; default the matrix's golden release of --pool, "
        "else of the node's first partition the matrix names.")] = None,
    pool: Annotated[str | None, typer.Option(
        "--pool", "-p", help="The node's pool in the matrix (default: from its Slurm partitions).")
    ] = None,
    drain: Annotated[bool | None, typer.Option(
        "--drain/--no-drain", help="Drain this node on a failing finding. Default: drain when "
        "run by slurmd ($SLURMD_NODENAME set). Never resumes, never replaces another drain.")
    ] = None,
    timeout: Annotated[float, typer.Option(
        "--timeout", min=2.0, help="Total time budget in seconds (keep it well inside "
        "HealthCheckInterval).")] = 20.0,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")
    ] = False,
) -> None:
    """Probe this node, run the checks and, on a failing finding, drain it in Slurm with a
    `fleet:` reason (for slurm.conf's HealthCheckProgram; see docs/real-fleet.md).

    Exit 0 when nothing fails, 1 when a check fails (the node is drained unless it was already
    drained or down by someone else), 2 on bad input, 3 when the probe itself could not run
    (nothing is drained then).
    """
    from fleet.jobs.node_check import check_node, read_node_info, run_plain, within

    name = node or default_node()
    if not NODE_RE.fullmatch(name):
        raise BadInput.single(f"refusing node name {name!r}: not a plain host name",
                              field="--node")
    loaded = None
    if matrix is not None:
        from fleet.domain.matrix.loader import load_matrix

        loaded = load_matrix(matrix, today=date.today()).matrix
    rel = None
    if release is not None:
        if loaded is None:
            raise BadInput.single("--release needs --matrix (or FLEET_MATRIX)", field="--release")
        try:
            rel = loaded.release(release)
        except KeyError:
            raise BadInput.single(f"the matrix has no release {release!r}", file=str(matrix),
                                  field="--release") from None
    if pool is not None and loaded is not None and pool not in (
            set(loaded.pools) | set(loaded.policy.golden.pools)):
        raise BadInput.single(f"the matrix has no pool {pool!r}", file=str(matrix), field="--pool")
    do_drain = drain if drain is not None else bool(os.environ.get("SLURMD_NODENAME"))
    run = within(run_plain, time.monotonic() + timeout)
    scheduler = None
    if do_drain:
        from fleet.schedulers.slurm import SlurmScheduler

        scheduler = SlurmScheduler(run, timeout_s=2.0)
    result = check_node(name, matrix=loaded, release=rel, pool=pool, scheduler=scheduler,
                        drain=do_drain, timeout_s=timeout,
                        node_info=lambda n, t: read_node_info(n, run, t))
    if json_out:
        emit_json(result.as_dict())
    else:
        _print_human(result)
    if result.failing:
        raise ProblemsFound(f"{name}: {len(result.failing)} failing check(s); drain: "
                            f"{result.drain.action} ({result.drain.detail})")
    if result.error is not None:
        raise CouldNotComplete(f"{name}: {result.error}")


def _print_human(r: NodeCheckResult) -> None:
    stdout.print(f"{r.node}: {r.expect_note or 'no facts'}; "
                  f"source {r.facts.source if r.facts else '-'}, "
                  f"{len(r.facts.gpus) if r.facts else '-'} GPU(s), {r.seconds:.2f} s",
                  markup=False)
    for f in r.findings:
        if f.severity.value == "ok":
            continue
        sev = f.severity.value
        stdout.print(f"  [{_STYLE[sev]}]{sev}[/] {esc(f.check)}: {esc(f.message)}",
                      soft_wrap=True)
    if r.drain.action != "none":
        stdout.print(f"  drain: {r.drain.action}: {r.drain.detail}"
                      + (f" [{r.drain.reason}]" if r.drain.reason else ""), soft_wrap=True,
                      markup=False)
    if not r.failing and r.error is None:
        stdout.print("  [green]ok[/]")


def register(app: typer.Typer) -> None:
    app.command("node-check")(node_check)
