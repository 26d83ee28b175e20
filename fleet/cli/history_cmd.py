"""`fleet history ...`: migrate the history database and read its events and hosts."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from fleet.cli.output import console, emit_json, esc
from fleet.cli.selection import Limit, PoolAlias
from fleet.cli.selection import check as check_selectors
from fleet.domain.ports import HostRef
from fleet.history import History, list_events, list_hosts, open_history
from fleet.history.migrate import current_revision, head_revision, upgrade
from fleet.history.models import Event, Host

app = typer.Typer(help="The history database: migrate it, read events and hosts.",
                  no_args_is_help=True)

def _db(ctx: typer.Context) -> str:
    """The global --db / FLEET_DB (imported late: fleet.cli.app imports this module)."""
    from fleet.cli.app import settings

    return settings(ctx).db


JsonFlag = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]
LastOpt = Annotated[int, typer.Option(
    "--last", "-n", min=1, help="How many, newest first (-l/--limit selects hosts elsewhere).")]
OldLimit = Annotated[int | None, typer.Option(
    "--limit", min=1, hidden=True, help="Old spelling of --last (kept for existing scripts).")]


def _open_existing(ctx: typer.Context) -> History:
    """Reports never create a database: a typo in --db should say so, not show an empty one."""
    return open_history(_db(ctx), create=False)


@app.command()
def migrate(ctx: typer.Context, json: JsonFlag = False) -> None:
    """Create the database if needed and upgrade its schema to the latest revision."""
    with open_history(_db(ctx), migrate=False) as h:
        before = current_revision(h)
        changed = upgrade(h)
        after = current_revision(h)
        where = h.display_url
    if json:
        emit_json({"db": where, "before": before, "after": after, "changed": changed,
                   "head": head_revision()})
    elif changed:
        console.print(f"history {where}: upgraded {before or 'empty'} -> {after}",
                      markup=False)
    else:
        console.print(f"history {where}: already at {after} (latest {head_revision()})",
                      markup=False)


def event_dict(e: Event) -> dict[str, Any]:
    return {"id": e.id, "at": e.at, "actor": e.actor, "kind": e.kind, "subject": e.subject,
            "message": e.message, "data": e.data}


def host_dict(h: Host) -> dict[str, Any]:
    return {"name": h.name, "pool": h.pool, "gpu_model": h.gpu_model, "gpu_count": h.gpu_count,
            "labels": h.labels, "first_seen": h.first_seen, "last_seen": h.last_seen}


@app.command()
def events(
    ctx: typer.Context,
    last: LastOpt = 50,
    kind: Annotated[str | None, typer.Option("--kind", help="Only events of this kind.")] = None,
    json: JsonFlag = False,
    old_limit: OldLimit = None,
) -> None:
    """The event log, newest first: who did what, when and why."""
    with _open_existing(ctx) as h:
        rows = list_events(h, limit=old_limit or last, kind=kind)
    if json:
        emit_json({"events": [event_dict(e) for e in rows]})
        return
    if not rows:
        console.print("no events")
        return
    table = Table("at (UTC)", "actor", "kind", "subject", "message", box=None)
    for e in rows:
        table.add_row(e.at.strftime("%Y-%m-%d %H:%M:%S"), esc(e.actor), esc(e.kind),
                      esc(e.subject), esc(e.message))
    console.print(table)


@app.command()
def hosts(
    ctx: typer.Context,
    limit: Limit = None,
    pool: PoolAlias = None,
    json: JsonFlag = False,
) -> None:
    """Every host the history knows, by pool (exit 2 when a --limit value matches none)."""
    from fleet.cli.selection import given, values
    from fleet.domain.selection import select

    selectors = given(limit, pool)
    with _open_existing(ctx) as h:
        rows = list_hosts(h)
    refs = [HostRef(name=x.name, pool=x.pool) for x in rows]
    check_selectors(selectors, refs)
    chosen = {r.name for r in select(values(selectors), refs)}
    rows = [x for x in rows if x.name in chosen]
    if json:
        emit_json({"hosts": [host_dict(x) for x in rows]})
        return
    if not rows:
        console.print("no hosts")
        return
    table = Table("host", "pool", "gpus", "model", "last seen (UTC)", box=None)
    for x in rows:
        table.add_row(esc(x.name), esc(x.pool), str(x.gpu_count), esc(x.gpu_model or "-"),
                      x.last_seen.strftime("%Y-%m-%d %H:%M:%S"))
    console.print(table)
