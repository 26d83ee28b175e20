"""Follow each GPU board across NVML renumbering: one trend series per board, not per index.

Pure. The history hands the trend analysis one series per (host, GPU index), the order NVML
enumerates the GPUs in. When a GPU drops out of NVML (lost after a reboot, or fallen off the
bus), NVML renumbers the ones after it: the board that was index 4 is reported as index 3, and
a series keyed by index would compare one board's counters with another's, or throw away the
board's history as a swap. `follow_boards` regroups a host's samples by the board's UUID
whenever a UUID appears at two indexes; a host whose boards kept their indexes passes through
unchanged (most hosts, most weeks), a board swapped at its index included.

Regrouped, a board's series is its samples from every index it had, in time order, reported
under the index of its newest sample; a sample that could not read its UUID belongs to the
board its index had before it (or after it, at the start). Boards absent from the host's newest
probe are left out, as a swapped board's old samples always were: a board the host no longer
has is no trend to act on (a GPU lost from NVML is the checks' finding, not a trend's).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from operator import itemgetter
from typing import Any

from fleet.domain.trend_report import CLOCK_SLACK_S, UUID, T

_uuid = itemgetter(UUID)
SeriesKey = tuple[str, str, int, str]
"""(host, pool, gpu_index, platform) of one GPU's series."""
Series = tuple[SeriesKey, Sequence[Sequence[Any]]]


def follow_boards(series: Iterable[Series], *, now: float) -> Iterator[Series]:
    """The series regrouped by board, host by host (the input comes grouped by host)."""
    group: list[Series] = []
    for item in series:
        if group and item[0][0] != group[0][0][0]:
            yield from _host_boards(group, now)
            group = []
        group.append(item)
    if group:
        yield from _host_boards(group, now)


def _renumbered(group: Sequence[Series]) -> bool:
    """Whether a UUID appears at two indexes (a board that changed index). A board swapped at
    one index is the analysis's own business (`analyze_gpu` starts a new series)."""
    if len(group) < 2:
        return False
    seen: set[Any] = set()
    total = 0
    for _, rows in group:
        boards = set(map(_uuid, rows))  # a C loop: this runs for every GPU of the fleet
        boards.discard(None)
        total += len(boards)
        seen |= boards
    return len(seen) < total


def _host_boards(group: Sequence[Series], now: float) -> Iterator[Series]:
    if not _renumbered(group):
        yield from group
        return
    host, pool, _, platform = group[0][0]
    boards: dict[Any, list[tuple[float, int, Sequence[Any]]]] = {}
    newest = None
    for (_, _, idx, _), rows in group:
        known = next((r[UUID] for r in rows if r[UUID] is not None), None)
        board: Any = known if known is not None else ("index", idx)
        for r in rows:
            if r[UUID] is not None:
                board = r[UUID]
            boards.setdefault(board, []).append((r[T], idx, r))
            if r[T] <= now + CLOCK_SLACK_S and (newest is None or r[T] > newest):
                newest = r[T]
    out: list[Series] = []
    for items in boards.values():
        items.sort(key=lambda x: x[0])
        present = [x for x in items if x[0] <= now + CLOCK_SLACK_S]
        if not present or newest is None or present[-1][0] < newest:
            continue  # not in the host's newest probe: swapped out or lost
        out.append(((host, pool, present[-1][1], platform), [x[2] for x in items]))
    out.sort(key=lambda s: s[0][2])
    yield from out
