"""The weekly trend figures equal a brute-force reference on random fleets (issue 31, tests).

Random boards with counters that grow, reboots that reset the counters since boot (and climb
past the old value), NVML renumbering (a board missing from a probe shifts the ones after it),
missed weeks (probes one to three weeks apart) and captures stored out of order (through the
history, by their own time). The reference knows each board by its UUID, reads growth as the
generator made it and integrates it over time, week by week; it shares no code with
`fleet.domain.trends`.
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.domain.matrix.models import Thresholds
from fleet.domain.trends import (
    AER_C,
    BOOT,
    ECC_CA,
    ECC_UA,
    REPLAY,
    SERIES_FIELDS,
    UUID,
    WEEK_S,
    XID,
    T,
    analyze,
)

NOW = 1_800_000_000.0
K = 4  # the default window, in weeks
KEYS = {"ecc": ECC_CA, "aer": AER_C, "replay": REPLAY}


def fleet_probes(seed: int) -> tuple[list[tuple[float, str, list[tuple[str, dict[str, Any]]]]],
                                     dict[str, list[tuple[float, float, dict[str, float]]]]]:
    """Probes of one host (time, boot id, [(board, counters)] in NVML order) and, per board,
    the growth the generator made over each interval between the board's samples."""
    rnd = random.Random(seed)
    boards = [f"GPU-{i}" for i in range(rnd.randint(2, 5))]
    value = {b: {"ecc": rnd.randint(0, 10**5), "aer": rnd.randint(0, 10**4), "replay": 0}
             for b in boards}
    last_seen: dict[str, float] = {}
    pending: dict[str, dict[str, float]] = {b: dict.fromkeys(KEYS, 0.0) for b in boards}
    growth: dict[str, list[tuple[float, float, dict[str, float]]]] = {b: [] for b in boards}
    probes = []
    times = [NOW]
    while times[-1] > NOW - 7 * WEEK_S:
        times.append(times[-1] - rnd.choice([0.5, 1.0, 1.0, 1.0, 2.0, 3.0]) * WEEK_S
                     * rnd.uniform(0.9, 1.1))
    boot = 0
    for i, t in enumerate(sorted(times)):
        rebooted = i > 0 and rnd.random() < 0.3
        boot += rebooted
        present = [b for b in boards if t == NOW or rnd.random() > 0.15]
        for b in boards:
            grow = {k: float(rnd.choice([0, 0, 3, 40, 900, 60_000 if k == "aer" else 5]))
                    for k in KEYS}
            if rebooted:  # the counters since boot restart; what they gained since is read
                value[b]["aer"] = value[b]["replay"] = 0
                # what a board missing from the probes gained in the boot that ended was
                # never read by anyone: no reader can count it
                pending[b]["aer"] = pending[b]["replay"] = 0.0
            for k in KEYS:
                value[b][k] += int(grow[k])
                pending[b][k] += grow[k]
        row = []
        for b in present:
            if b in last_seen:
                growth[b].append((last_seen[b], t, pending[b]))
            pending[b] = dict.fromkeys(KEYS, 0.0)
            last_seen[b] = t
            row.append((b, dict(value[b])))
        probes.append((t, f"boot-{boot}", row))
    return probes, growth


def reference(growth: list[tuple[float, float, dict[str, float]]]) -> dict[str, list[float]]:
    """Each week's growth: the generator's growth over each interval, spread evenly over it,
    integrated one week at a time."""
    start = NOW - K * WEEK_S
    out = {k: [0.0] * K for k in KEYS}
    for t0, t1, g in growth:
        for w in range(K):
            lo, hi = max(t0, start + w * WEEK_S), min(t1, start + (w + 1) * WEEK_S)
            if hi > lo:
                for k in KEYS:
                    out[k][w] += g[k] * (hi - lo) / (t1 - t0)
    return out


def sample(t: float, boot: str, board: str, v: dict[str, Any]) -> tuple[Any, ...]:
    r: list[Any] = [None] * len(SERIES_FIELDS)
    r[T], r[UUID], r[BOOT], r[XID] = t, board, boot, "{}"
    r[ECC_CA], r[ECC_UA], r[AER_C], r[REPLAY] = v["ecc"], 0, v["aer"], v["replay"]
    return tuple(r)


def by_index(probes: list[Any]) -> list[tuple[tuple[str, str, int, str], list[Any]]]:
    """The series as the history keys them: by NVML index (renumbered when one is missing)."""
    series: dict[int, list[Any]] = {}
    for t, boot, row in probes:
        for idx, (board, v) in enumerate(row):
            series.setdefault(idx, []).append(sample(t, boot, board, v))
    return [(("h", "p", idx, "H100"), rows) for idx, rows in sorted(series.items())]


def check(report: Any, probes: list[Any], growth: dict[str, Any], tol: float = 1e-6) -> None:
    """`tol`: the history's SQLite reader rounds times to the millisecond (julianday)."""
    last = {b for b, _ in probes[-1][2]}
    got = {g.uuid: g for g in report.gpus}
    assert set(got) == last  # every board the host has now, once; none it no longer has
    for board in last:
        want = reference(growth[board])
        g = got[board]
        assert g.gpu_index == [b for b, _ in probes[-1][2]].index(board)
        assert g.ecc_corrected_weekly == pytest.approx(want["ecc"], rel=tol, abs=tol)
        assert g.aer_corrected_weekly == pytest.approx(want["aer"], rel=tol, abs=tol)
        assert g.replay_weekly == pytest.approx(want["replay"], rel=tol, abs=tol)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10**9))
def test_weekly_figures_equal_the_reference(seed: int) -> None:
    probes, growth = fleet_probes(seed)
    check(analyze(by_index(probes), now=NOW, thresholds=Thresholds()), probes, growth)


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 10**9))
def test_through_the_history_with_captures_stored_out_of_order(seed: int,
                                                             tmp_path_factory: Any) -> None:
    """The same through the history: every probe recorded as a capture, in random order, at
    its own time; the reader sorts them."""
    from fleet.history import add_snapshot, iter_gpu_series, open_history
    from fleet.history.store import GpuCounters

    probes, growth = fleet_probes(seed)
    db = str(Path(tmp_path_factory.mktemp("h")) / "h.db")
    order = list(range(len(probes)))
    random.Random(seed).shuffle(order)
    with open_history(db) as h:
        for i in order:
            t, boot, row = probes[i]
            gpus = [GpuCounters(gpu_index=idx, uuid=b, boot_id=boot,
                                ecc_corrected_aggregate=v["ecc"], ecc_uncorrected_aggregate=0,
                                aer_corrected=v["aer"], pcie_replay=v["replay"])
                    for idx, (b, v) in enumerate(row)]
            add_snapshot(h, "h", taken_at=dt.datetime.fromtimestamp(t, dt.UTC), source="import",
                         facts={}, gpus=gpus, pool="p", gpu_model="H100")
        until = dt.datetime.fromtimestamp(NOW, dt.UTC) + dt.timedelta(seconds=1)
        series = list(iter_gpu_series(h, until=until,
                                      window_start=until - dt.timedelta(weeks=K)))
    check(analyze(series, now=NOW, thresholds=Thresholds()), probes, growth, tol=1e-6)
