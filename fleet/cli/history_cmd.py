"""`fleet history ...`: migrate the history database and read its events and hosts."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fleet.cli.output import emit_json, esc, stdout
from fleet.cli.selection import LIMIT_HELP, HostAlias, Limit, PoolAlias
from fleet.cli.selection import check as check_selectors
from fleet.cli.table import Grid, OutputOpt, show, wants_json
from fleet.errors import BadInput

if TYPE_CHECKING:  # the history layer (SQLAlchemy, Alembic) loads inside the commands
    from fleet.history import History
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
EventLimit = Annotated[list[str] | None, typer.Option(
    "--limit", "-l", metavar="POOL|GLOB", show_default=False, help="Only events about these "
    "hosts: " + LIMIT_HELP[0].lower() + LIMIT_HELP[1:] + " A plain number is the old spelling "
    "of --last.")]


def _open_existing(ctx: typer.Context) -> History:
    """Reports never create a database: a typo in --db should say so, not show an empty one."""
    from fleet.history import open_history

    return open_history(_db(ctx), create=False)


@app.command()
def migrate(ctx: typer.Context, json: JsonFlag = False) -> None:
    """Create the database if needed and upgrade its schema to the latest revision."""
    from fleet.history import open_history
    from fleet.history.migrate import current_revision, head_revision, upgrade

    with open_history(_db(ctx), migrate=False) as h:
        before = current_revision(h)
        changed = upgrade(h)
        after = current_revision(h)
        where = h.display_url
    if json:
        emit_json({"db": where, "before": before, "after": after, "changed": changed,
                   "head": head_revision()})
    elif changed:
        stdout.print(f"history {where}: upgraded {before or 'empty'} -> {after}",
                      markup=False)
    else:
        stdout.print(f"history {where}: already at {after} (latest {head_revision()})",
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
    limit: EventLimit = None,
    pool: PoolAlias = None,
    host: HostAlias = None,
    json: JsonFlag = False,
    output: OutputOpt = None,
) -> None:
    """The event log, newest first: who did what, when and why (-l: about these hosts, or
    their pools)."""
    from fleet.cli.selection import given
    from fleet.history import list_events

    old = [v for v in limit or () if v.isdigit()]  # `--limit 20`: the old spelling of --last
    if old:
        last = int(old[-1])
        if last < 1:
            raise BadInput.single(f"{last} is not in the range x>=1 (a number of events)",
                                  field="--limit")
        limit = [v for v in limit or () if not v.isdigit()]
    selectors = given(limit, pool, host)
    with _open_existing(ctx) as h:
        subjects = _subjects(h, selectors) if selectors else None
        rows = list_events(h, limit=last, kind=kind, subjects=subjects)
    if wants_json(json, output):
        emit_json({"events": [event_dict(e) for e in rows]})
        return
    if not rows:
        stdout.print("no events")
        return
    table = Grid(("at (UTC)", "actor", "kind", "subject", "message"), prose=("message",))
    for e in rows:
        table.add_row(e.at.strftime("%Y-%m-%d %H:%M:%S"), esc(e.actor), esc(e.kind),
                      esc(e.subject), esc(e.message))
    show(table, output)


def _subjects(h: History, selectors: list[tuple[str, str]]) -> list[str]:
    """The event subjects the selectors pick: the hosts, and the pools named as such (exit 2
    for a value that matches nothing the history knows)."""
    from fleet.cli.selection import choose
    from fleet.domain.ports import HostRef
    from fleet.history import list_hosts

    chosen = choose(selectors, [HostRef(name=x.name, pool=x.pool) for x in list_hosts(h)])
    pools = {r.pool for r in chosen if r.pool} & {v for _, v in selectors}
    return sorted({r.name for r in chosen} | pools)


@app.command()
def hosts(
    ctx: typer.Context,
    limit: Limit = None,
    pool: PoolAlias = None,
    json: JsonFlag = False,
    output: OutputOpt = None,
) -> None:
    """Every host the history knows, by pool (exit 2 when a --limit value matches none)."""
    from fleet.cli.selection import given, values
    from fleet.domain.ports import HostRef
    from fleet.domain.selection import select
    from fleet.history import list_hosts

    selectors = given(limit, pool)
    with _open_existing(ctx) as h:
        rows = list_hosts(h)
    refs = [HostRef(name=x.name, pool=x.pool) for x in rows]
    check_selectors(selectors, refs)
    chosen = {r.name for r in select(values(selectors), refs)}
    rows = [x for x in rows if x.name in chosen]
    if wants_json(json, output):
        emit_json({"hosts": [host_dict(x) for x in rows]})
        return
    if not rows:
        stdout.print("no hosts")
        return
    table = Grid(("host", "pool", "gpus", "model", "last seen (UTC)"))
    for x in rows:
        table.add_row(esc(x.name), esc(x.pool), str(x.gpu_count), esc(x.gpu_model or "-"),
                      x.last_seen.strftime("%Y-%m-%d %H:%M:%S"))
    show(table, output)


def _option_of(loc: tuple[int | str, ...]) -> str:
    """The command-line option a retention setting's error is about."""
    if loc and loc[0] in ("raw_weeks", "rollup_weeks"):
        return "--" + str(loc[0]).replace("_", "-")
    return "--raw-weeks/--rollup-weeks"


@app.command()
def prune(
    ctx: typer.Context,
    matrix: Annotated[Path | None, typer.Option(
        "--matrix", "-m", help="Version matrix whose hygiene.retention policy applies "
        "(default: 13 weeks raw, 104 weeks of rollups).", envvar="FLEET_MATRIX")] = None,
    raw_weeks: Annotated[int | None, typer.Option(
        "--raw-weeks", metavar="WEEKS", help="Whole weeks of raw samples to keep (at least 6), "
        "instead of the policy's.")] = None,
    rollup_weeks: Annotated[str | None, typer.Option(
        "--rollup-weeks", metavar="WEEKS|forever", help="Weeks of weekly rollups to keep, or "
        "'forever', instead of the policy's.")] = None,
    dry: Annotated[bool, typer.Option(
        "--dry", help="Say what would be pruned; change nothing.")] = False,
    json: JsonFlag = False,
) -> None:
    """Fold GPU samples older than the raw retention into weekly rollups, expire old rollups
    and old snapshots, in one transaction (a second run changes nothing)."""
    from datetime import UTC, date, datetime

    from pydantic import ValidationError

    from fleet.domain.matrix.retention_settings import RetentionSettings
    from fleet.domain.retention import RetentionPolicy
    from fleet.errors import BadInput, Problem
    from fleet.history.retention import prune as do_prune

    base = RetentionSettings()
    if matrix is not None:
        from fleet.domain.matrix.loader import load_matrix

        base = load_matrix(matrix, today=date.today()).matrix.hygiene.retention
    override: dict[str, Any] = {}
    if raw_weeks is not None:
        override["raw_weeks"] = raw_weeks
    if rollup_weeks is not None:
        override["rollup_weeks"] = (rollup_weeks if rollup_weeks == "forever"
                                    else int(rollup_weeks) if rollup_weeks.isdigit()
                                    else rollup_weeks)
    try:
        chosen = RetentionSettings.model_validate({**base.model_dump(), **override})
    except ValidationError as e:
        raise BadInput([Problem(None, None, _option_of(err["loc"]), err["msg"])
                        for err in e.errors()]) from None
    policy = RetentionPolicy(raw_weeks=chosen.raw_weeks,
                             rollup_weeks=chosen.rollup_weeks_or_none)
    with _open_existing(ctx) as h:
        result = do_prune(h, policy, now=datetime.now(UTC), dry=dry)
        where = h.display_url
    if json:
        emit_json({"db": where, **result.as_dict()})
        return
    verb = "would fold" if dry else "folded"
    keep = "forever" if policy.rollup_weeks is None else f"{policy.rollup_weeks} weeks"
    stdout.print(
        f"history {where}: raw samples kept {policy.raw_weeks} weeks (up to "
        f"{result.raw_cutoff:%Y-%m-%d %H:%M} UTC rolled up), weekly rollups kept {keep}",
        markup=False)
    if not result.changed:
        stdout.print("nothing to prune", markup=False)
        return
    stdout.print(
        f"{verb} {result.samples_rolled_up} sample(s) into {result.rollups_added} new and "
        f"{result.rollups_merged} existing weekly rollup(s); "
        f"{'would expire' if dry else 'expired'} {result.rollups_expired} rollup(s); "
        f"{'would delete' if dry else 'deleted'} {result.snapshots_deleted} snapshot(s) and "
        f"{result.findings_deleted} finding(s)", markup=False)
