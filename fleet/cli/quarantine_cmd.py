"""`fleet quarantine list|release`: hosts the hygiene job took out of service, and back.

Release undrains only a host fleet itself drained (its quarantine record says so and the
scheduler's reason carries fleet's marker), through the scheduler the quarantine recorded; any
other scheduler is refused, so a release never frees the pool's budget while the node stays
drained. A host someone else drained stays drained, only the quarantine is closed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from fleet.cli.output import emit_json, esc, stdout
from fleet.cli.selection import HostAlias, Limit, PoolAlias
from fleet.cli.table import Grid, OutputOpt, show, wants_json
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
    limit: Limit = None,
    pool: PoolAlias = None,
    host: HostAlias = None,
    json_out: JsonFlag = False,
    output: OutputOpt = None,
) -> None:
    """Hosts in quarantine (open ones unless --all): why, since when, by whom (-l: of these
    pools or hosts only)."""
    from fleet.cli.selection import choose, given
    from fleet.domain.ports import HostRef
    from fleet.history import list_hosts, list_quarantines, open_history

    selectors = given(limit, pool, host)
    with open_history(_db(ctx), create=False) as history:
        rows = list_quarantines(history, open_only=not all_)
        if selectors:  # a value that matches no host the history knows is exit 2
            known = [HostRef(name=x.name, pool=x.pool) for x in list_hosts(history)]
            chosen = {r.name for r in choose(selectors, known)}
            rows = [(q, h) for q, h in rows if h.name in chosen]
    items: list[dict[str, Any]] = [
        {"host": h.name, "pool": h.pool, "reason": q.reason, "opened_at": q.opened_at,
         "opened_by": q.opened_by, "closed_at": q.closed_at, "closed_by": q.closed_by,
         "close_reason": q.close_reason} for q, h in rows]
    if wants_json(json_out, output):
        emit_json({"quarantines": items})
        return
    if not items:
        stdout.print("no host in quarantine")
        return
    t = Grid(("host", "pool", "since", "by", "reason"), prose=("reason",))
    for i in items:
        t.add_row(esc(i["host"]), esc(i["pool"]), i["opened_at"].isoformat(timespec="minutes"),
                  esc(i["opened_by"]), esc(i["reason"]))
    show(t, output)


@app.command()
def release(
    ctx: typer.Context,
    host: Annotated[str, typer.Argument(help="The host to take out of quarantine.")],
    reason: Annotated[str, typer.Option("--reason", help="Why (recorded with your name).")],
    scheduler: Annotated[str | None, typer.Option(
        "--scheduler", metavar="none|slurm|kubernetes", help="Workload manager. Default: the "
        "one the "
        "quarantine drained through (recorded); another one is refused.")] = None,
    json_out: JsonFlag = False,
) -> None:
    """Close HOST's quarantine; undrain it, through the scheduler that drained it, only if fleet
    drained it."""
    from fleet.cli.hygiene_cmd import SCHEDULERS, make_scheduler
    from fleet.history import close_quarantine, open_history, os_actor
    from fleet.history.quarantines import open_record

    if not reason.strip():
        raise BadInput.single("a reason is required", field="--reason")
    if scheduler is not None and scheduler not in SCHEDULERS:
        make_scheduler(scheduler)  # names the choices (exit 2)
    now = datetime.now(UTC)
    with open_history(_db(ctx), create=False) as history:
        q = open_record(history, host)
        if q is None:
            raise BadInput.single(f"{host} is not in quarantine (fleet quarantine list)",
                                  field="HOST")
        name = _release_scheduler(q.host, q.scheduler, q.drained_by_fleet, scheduler)
        action = "none"
        if name is not None:
            sched = make_scheduler(name)
            state = sched.state(host)
            if state.state == "unknown":
                raise CouldNotComplete(f"{host}: {name} cannot say its state "
                                       f"({state.reason or '-'}); the quarantine stays open")
            if state.state in ("drained", "draining", "down") and state.by_fleet:
                res = sched.undrain(host)
                if not res.ok:
                    raise CouldNotComplete(f"undrain {host} failed: {res.error}; the quarantine "
                                           "stays open")
                action = f"undrained through {name}"
            elif state.state in ("drained", "draining", "down"):
                action = f"left {state.state}: drained by someone else ({state.reason or '-'})"
            else:
                action = f"already {state.state} in {name}"
        close_quarantine(history, host, closed_by=os_actor(), reason=reason, at=now,
                         data={"scheduler": name, "action": action, "quarantine_id": q.id})
    if json_out:
        emit_json({"host": host, "released": True, "action": action, "scheduler": name})
    else:
        stdout.print(f"{host}: quarantine closed ({action})", markup=False)


def _release_scheduler(host: str, recorded: str | None, drained_by_fleet: bool,
                       asked: str | None) -> str | None:
    """The scheduler a release goes through: the one that drained the host. None when fleet
    drained nothing (the quarantine is closed, no scheduler is asked). Refused (exit 2) when it
    cannot be the one that drained it: freeing the budget while the node stays drained would let
    the next run drain more of the pool."""
    from fleet.cli.hygiene_cmd import SCHEDULERS

    if not drained_by_fleet:
        return asked
    if recorded is None:
        if asked is None:
            raise BadInput.single(f"{host}: its quarantine does not record which scheduler "
                                  "drained it; name it with --scheduler", field="--scheduler")
        return asked
    if asked is not None and asked != recorded:
        raise BadInput.single(f"{host} was drained through {recorded}, not {asked}: release it "
                              f"through {recorded}", field="--scheduler")
    if recorded not in SCHEDULERS:
        raise BadInput.single(f"{host} was drained through {recorded!r}, which this command "
                              f"cannot reach (it knows {', '.join(SCHEDULERS)}); undrain it "
                              "there, then release it with the scheduler that is left",
                              field="--scheduler")
    return recorded
