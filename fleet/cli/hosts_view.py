"""`fleet hosts`: one line per host of what the history knows (the `kubectl get nodes -o wide`
of fleet): pool, release seen and pinned, driver, last probe, drained (by whom), quarantined,
the rollout it is in, findings by severity. Reads the history, and an inventory with `-i`
(its hosts never probed are listed as such); never connects to a host."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fleet.cli.output import emit_json
from fleet.cli.selection import HostAlias, Limit, PoolAlias
from fleet.cli.table import Format, OutputOpt, wants_json

if TYPE_CHECKING:
    from fleet.domain.fleet_view import HostRow

def view(
    ctx: typer.Context,
    limit: Limit = None,
    pool: PoolAlias = None,
    host: HostAlias = None,
    release: Annotated[list[str] | None, typer.Option(
        "--release", "-r", metavar="RELEASE", show_default=False,
        help="Only hosts seen on, or pinned to, this release; repeatable.")] = None,
    drained: Annotated[bool, typer.Option(
        "--drained", help="Only hosts fleet recorded as drained (a rollout, a quarantine, an "
        "apply that failed, or a drain by someone else that a rollout saw).")] = False,
    quarantined: Annotated[bool, typer.Option(
        "--quarantined", help="Only hosts with an open quarantine.")] = False,
    findings: Annotated[bool, typer.Option(
        "--findings", help="Only hosts whose latest probe has failing or warning findings.")]
    = False,
    inventory: Annotated[Path | None, typer.Option(
        "--inventory", "-i", envvar="FLEET_INVENTORY",
        help="Also list this inventory's hosts the history does not know (never probed).")]
    = None,
    output: OutputOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="JSON on stdout (-o json).")] = False,
) -> None:
    """Every host the history knows: pool, release (seen; pinned when it differs), driver,
    last probe, drained and by whom, quarantined, rollout and wave, findings.

    Reads the history only (and -i INVENTORY): run `fleet probe` for fresh facts. Drained is
    what fleet recorded, not the workload manager's word of now. Exit 2 when a --limit value
    names nothing.
    """
    if ctx.invoked_subcommand is not None:
        return
    rows = load_rows(ctx, inventory)
    from fleet.cli.selection import choose, given
    from fleet.domain.fleet_view import keep, summary
    from fleet.domain.ports import HostRef

    chosen = {h.name for h in choose(given(limit, pool, host),
                                     [HostRef(name=r.host, pool=r.pool) for r in rows])}
    rows = keep([r for r in rows if r.host in chosen], release=release or (),
                drained=drained, quarantined=quarantined, findings=findings)
    if wants_json(json_out, output):
        emit_json({"hosts": [r.as_dict() for r in rows], "summary": summary(rows)})
        return
    show(rows, output)


def load_rows(ctx: typer.Context, inventory: Path | None) -> list[HostRow]:
    from fleet.cli.app import settings
    from fleet.domain.fleet_view import host_rows
    from fleet.history import open_history
    from fleet.history.fleet_view import HostRecord, read_fleet

    with open_history(settings(ctx).db, create=False) as history:
        records = read_fleet(history)
    if inventory is not None:
        from fleet.remote.backend import SshBackend

        known = {r.name for r in records}
        records += [HostRecord(ref.name, ref.pool or "") for ref in SshBackend(inventory).hosts()
                    if ref.name not in known]
    return host_rows(records)


def show(rows: list[HostRow], output: Format | None) -> None:
    """The table on stdout (the shared renderer: names never cut), a count line on stderr."""
    from fleet.cli.output import console, esc
    from fleet.cli.table import Grid
    from fleet.cli.table import show as show_grid
    from fleet.domain.fleet_view import COLUMNS, WIDE, cells, summary

    if not rows:
        console.print("no hosts match", markup=False)
        return
    columns = WIDE if output in (Format.wide, Format.tsv) else COLUMNS
    grid = Grid(columns, prose=("drained", "rollout", "quarantine reason"))
    for r in rows:
        text = cells(r)
        grid.add_row(*(esc(text[c]) for c in columns))
    show_grid(grid, output)
    s = summary(rows)
    notes = [f"{s[k]} {k.replace('_', ' ')}" for k in ("quarantined", "drained", "unreachable",
                                                        "never_probed") if s[k]]
    console.print(f"{s['hosts']} host(s)" + (f": {', '.join(notes)}" if notes else ""),
                  markup=False)
