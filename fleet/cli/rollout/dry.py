"""`fleet rollout start --dry`: the plan and what the first wave would do, acting on nothing
(see `fleet.jobs.rollout.preview` for what is read)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from fleet.cli.output import emit_json
from fleet.cli.output import stdout as console
from fleet.cli.rollout.common import check_pools, from_history, now
from fleet.cli.rollout.wiring import Saving, wiring

if TYPE_CHECKING:  # pydantic models: imported by the commands that load a matrix
    from fleet.domain.matrix.models import Matrix


def start_dry(ctx: typer.Context, m: Matrix, source: dict[str, Any],
              build: dict[str, Any] | None, *, pools: list[tuple[str, str]], release: str | None,
              json_out: bool) -> None:
    """Print the preview, then exit as the start would have to: 3 when a host could not be
    read or would be left out unreachable, or another rollout holds a pool; 1 when nothing can
    move because `max_unavailable` is used up; else 0."""
    from fleet.cli.app import settings
    from fleet.jobs.rollout.preview import preview_start

    backend, sched, _ = wiring(m, source, create=True, build=build)  # a sim fleet: not saved
    refs = backend.hosts()
    check_pools(pools, refs, m)
    fleet = backend._target if isinstance(backend, Saving) else None
    if fleet is not None:
        releases, unreachable = fleet.releases_by_host(), fleet.unreachable_hosts()
    else:
        seen = from_history(settings(ctx).db, [r.name for r in refs])
        releases, unreachable = seen.releases, seen.unreachable
    with _read_only(settings(ctx).db) as history:
        preview = preview_start(backend, sched, m, history, now=now,
                                pools=list(dict.fromkeys(p for _, p in pools)) or None,
                                release=release, releases=releases, unreachable=unreachable)
    if json_out:
        emit_json({**preview.as_dict(), "source": source})
    else:
        _print(preview)
    _exit(preview)


def _read_only(db: str) -> Any:
    from contextlib import nullcontext

    from fleet.history import open_history

    if "://" not in db and not Path(db).exists():
        return nullcontext(None)
    return open_history(db, create=False)


def _print(preview: Any) -> None:
    from fleet.cli.rollout.plan import print_plan

    print_plan(preview.plan)
    fw = preview.first_wave
    if fw is not None:
        drain = (f"drained through {fw.drain_through} first (timeout "
                 f"{fw.drain_timeout_minutes:g} min)" if fw.drain_through
                 else "not drained (no scheduler)")
        console.print(f"\nfirst wave: {fw.pool} wave {fw.index} -> {fw.release}: "
                      f"{len(fw.hosts)} host(s), {drain}, rebooted via {fw.reboot_via} "
                      "where the kernel module changes", markup=False, highlight=False)
        for h in fw.hosts:
            head = f"  {h.host}: {h.from_release or 'unknown release'} -> {h.to_release}: "
            if h.change is None or h.outcome in ("unreachable", "failed", "refused"):
                console.print(head + f"{h.outcome}: {h.error}", markup=False, highlight=False)
                continue
            console.print(head + ("changes" if h.change.changed else "nothing to change"),
                          markup=False, highlight=False)
            for line in h.change.lines():
                console.print(f"    {line}", markup=False, highlight=False)
    console.print(f"\ndry run: {preview.status.replace('_', ' ')}: {preview.reason}; no "
                  "rollout recorded, no lock taken, nothing drained or changed",
                  markup=False, highlight=False)


def _exit(preview: Any) -> None:
    from fleet.domain.selection import known
    from fleet.errors import CouldNotComplete, ProblemsFound

    unread = preview.first_wave.unread if preview.first_wave else []
    lost = preview.plan.unreachable
    if preview.held_by:
        raise CouldNotComplete(f"dry run: a start would be refused: {preview.reason}")
    if unread or lost:
        parts = ([f"could not read {known(unread)} (first wave)"] if unread else []) + (
            [f"{len(lost)} host(s) unreachable, left out of the plan: {known(lost)}"]
            if lost else [])
        raise CouldNotComplete("dry run: " + "; ".join(parts))
    if preview.status == "refused":
        raise ProblemsFound(f"dry run: {preview.reason}")
