"""`fleet quarantine list|release`: hosts the hygiene job took out of service, and back.

Release undrains only a host fleet itself drained (its quarantine record says so and the
scheduler's reason carries fleet's marker); a host someone else drained stays drained, only the
quarantine is closed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from fleet.cli.output import console, emit_json, esc
from fleet.errors import BadInput, CouldNotComplete

app = typer.Typer(help="Hosts in quarantine: list them, release one.", no_args_is_help=True)

JsonFlag = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]


def _db(ctx: typer.Context) -> str:
    from fleet.cli.app import settings

    return settings(ctx).db


@app.command("list")
def list_cmd(
    ctx: typer.Context,
    all_: Annotated[bool, typer.Option("--all", help="Closed quarantines too.")] = False,
    json_out: JsonFlag = False,
) -> None:
    """Hosts in quarantine (open ones unless --all): why, since when, by whom."""
    from fleet.history import list_quarantines, open_history

    with open_history(_db(ctx), create=False) as history:
        rows = list_quarantines(history, open_only=not all_)
    items: list[dict[str, Any]] = [
        {"host": h.name, "pool": h.pool, "reason": q.reason, "opened_at": q.opened_at,
         "opened_by": q.opened_by, "closed_at": q.closed_at, "closed_by": q.closed_by,
         "close_reason": q.close_reason} for q, h in rows]
    if json_out:
        emit_json({"quarantines": items})
        return
    if not items:
        console.print("no host in quarantine")
        return
    t = Table("host", "pool", "since", "by", "reason", box=None)
    for i in items:
        t.add_row(esc(i["host"]), esc(i["pool"]), i["opened_at"].isoformat(timespec="minutes"),
                  esc(i["opened_by"]), esc(i["reason"]))
    console.print(t)


@app.command()
def release(
    ctx: typer.Context,
    host: Annotated[str, typer.Argument(help="The host to take out of quarantine.")],
    reason: Annotated[str, typer.Option("--reason", help="Why (recorded with your name).")],
    scheduler: Annotated[str, typer.Option(
        "--scheduler", help="Workload manager: none, slurm, kubernetes.")] = "none",
    json_out: JsonFlag = False,
) -> None:
    """Close HOST's quarantine; undrain it only if fleet drained it."""
    from fleet.cli.hygiene_cmd import make_scheduler
    from fleet.history import (
        close_quarantine,
        list_events,
        list_quarantines,
        open_history,
        os_actor,
    )

    if not reason.strip():
        raise BadInput.single("a reason is required", field="--reason")
    sched = make_scheduler(scheduler)
    now = datetime.now(UTC)
    with open_history(_db(ctx), create=False) as history:
        if not any(h.name == host for _q, h in list_quarantines(history)):
            raise BadInput.single(f"{host} is not in quarantine (fleet quarantine list)",
                                  field="HOST")
        opened = list_events(history, limit=1, kind="quarantine.open", subject=host)
        by_fleet = bool(opened and opened[0].data.get("drained_by_fleet"))
        state = sched.state(host)
        action = "none"
        if state.state in ("drained", "draining"):
            if by_fleet and state.by_fleet:
                res = sched.undrain(host)
                if not res.ok:
                    raise CouldNotComplete(f"undrain {host} failed: {res.error}; the quarantine "
                                           "stays open")
                action = "undrained"
            else:
                action = f"left {state.state}: drained by someone else ({state.reason or '-'})"
        close_quarantine(history, host, closed_by=os_actor(), reason=reason, at=now,
                         data={"scheduler": sched.name, "action": action})
    if json_out:
        emit_json({"host": host, "released": True, "action": action})
    else:
        console.print(f"{host}: quarantine closed ({action})", markup=False)
