"""How the trend tells a counter reset from growth (issue 31, defects 9, 10, 11, 12).

A new boot id resets the counters since boot even when they climb past their old value; a
lifetime counter that drops is a stale reading, never a reset; a sum with one part unreadable
is unreadable; a board is followed across NVML renumbering."""

from __future__ import annotations

from typing import Any

from fleet.domain.matrix.models import Thresholds
from fleet.domain.trends import WEEK_S, analyze, analyze_gpu, counter_delta
from tests.unit.hygiene.test_drift_trends import NOW, row, weeks

TH = Thresholds()


def _quiet(n: int = 9) -> list[Any]:
    return [((f"q{i}", "p", 0, "H100"),
             weeks([{"aer_corrected": 10 * w, "boot_id": "b"} for w in range(5)], 4))
            for i in range(n)]


def test_a_reboot_then_a_climb_past_the_old_value_counts_fully() -> None:
    vals = [{"aer_corrected": 60_000, "boot_id": "boot-1"}] * 4 + [
        {"aer_corrected": 60_080, "boot_id": "boot-2"}]
    rep = analyze(_quiet() + [(("bad", "p", 0, "H100"), weeks(vals, 4))], now=NOW,
                  thresholds=TH)
    g = next(x for x in rep.gpus if x.host == "bad")
    assert g.aer_corrected_weekly[-1] == 60_080
    assert "aer_correctable_storm" in [f.kind for f in g.flags]


def test_a_reboot_seen_while_the_counter_was_unreadable_still_resets_it() -> None:
    vals = [{"pcie_replay": 5_000, "boot_id": "b1"}, {"pcie_replay": None, "boot_id": "b2"},
            {"pcie_replay": 5_100, "boot_id": "b2"}]
    g = analyze_gpu("h", "p", 0, weeks(vals, 2), now=NOW, thresholds=TH)
    assert sum(g.replay_weekly) == 5_100


def test_without_boot_ids_a_drop_is_still_a_reset() -> None:
    vals = [{"pcie_replay": 500}, {"pcie_replay": 40}]
    assert sum(analyze_gpu("h", "p", 0, weeks(vals, 1), now=NOW,
                           thresholds=TH).replay_weekly) == 40


def test_a_reboot_does_not_reset_a_lifetime_counter() -> None:
    vals = [{"ecc_corrected_aggregate": 100, "boot_id": "b1"},
            {"ecc_corrected_aggregate": 150, "boot_id": "b2"}]
    g = analyze_gpu("h", "p", 0, weeks(vals, 1), now=NOW, thresholds=TH)
    assert sum(g.ecc_corrected_weekly) == 50


def test_a_stale_lifetime_reading_is_no_reset() -> None:
    """A month-old capture filed among recent samples (it reads lower): before, its whole
    lifetime count became one week's growth and a quarantine proposal."""
    vals = [{"ecc_corrected_aggregate": v, "boot_id": "b"}
            for v in (50_000, 50_100, 50_200, 50_300, 49_900)]
    g = analyze_gpu("h", "p", 0, weeks(vals, 4), now=NOW, thresholds=TH)
    assert g.ecc_corrected_weekly == [100, 100, 100, 0]
    assert not any(f.quarantine for f in g.flags)
    assert counter_delta(50_300, 49_900, since_boot=False) == 0
    assert counter_delta(50_300, 49_900) == 49_900  # a counter since boot: that is a reset


def test_a_sum_with_one_part_unreadable_is_no_reset() -> None:
    vals = [{"retired_sbe": 10, "retired_dbe": 5, "aer_nonfatal": 3, "aer_fatal": 2},
            {"retired_sbe": 10, "retired_dbe": None, "aer_nonfatal": None, "aer_fatal": 2},
            {"retired_sbe": 10, "retired_dbe": 5, "aer_nonfatal": 3, "aer_fatal": 2}]
    g = analyze_gpu("h", "p", 0, weeks(vals, 2), now=NOW, thresholds=TH)
    kinds = [f.kind for f in g.flags]
    assert "retired_pages_growing" not in kinds and "aer_uncorrectable" not in kinds
    # growth while a part was unreadable is counted once both read again
    vals[2] = {"retired_sbe": 12, "retired_dbe": 6, "aer_nonfatal": 3, "aer_fatal": 2}
    g = analyze_gpu("h", "p", 0, weeks(vals, 2), now=NOW, thresholds=TH)
    assert next(f.value for f in g.flags if f.kind == "retired_pages_growing") == 3


def _board_rows(uuid: str, aggs: list[int]) -> list[tuple[object, ...]]:
    return [row(NOW - (len(aggs) - 1 - w) * WEEK_S, uuid=uuid, ecc_corrected_aggregate=a,
                ecc_uncorrected_aggregate=0) for w, a in enumerate(aggs)]


def test_a_board_is_followed_across_nvml_renumbering() -> None:
    """GPU 3 falls out of NVML: the board that was index 4 is reported as 3, 5 as 4."""
    b4 = [0, 100, 400, 1200, 3500]
    s3 = _board_rows("B3", [10] * 5)[:-1] + _board_rows("B4", b4)[-1:]
    s4 = _board_rows("B4", b4)[:-1] + _board_rows("B5", [5] * 5)[-1:]
    s5 = _board_rows("B5", [5] * 5)[:-1]
    series = [(("h1", "p", 3, "H100"), s3), (("h1", "p", 4, "H100"), s4),
              (("h1", "p", 5, "H100"), s5), (("h2", "p", 0, "H100"), _board_rows("C", [1] * 5))]
    rep = analyze(series, now=NOW, thresholds=TH)
    got = {(g.host, g.gpu_index): (g.uuid, g.ecc_corrected_weekly) for g in rep.gpus}
    assert got == {("h1", 3): ("B4", [100, 300, 800, 2300]), ("h1", 4): ("B5", [0] * 4),
                   ("h2", 0): ("C", [0] * 4)}
    flagged = next(g for g in rep.gpus if g.uuid == "B4")
    assert {"ecc_corrected_rate", "ecc_corrected_rising"} <= {f.kind for f in flagged.flags}


def test_a_board_whose_uuid_could_not_be_read_stays_with_its_index() -> None:
    s0 = _board_rows("A", [0, 10, 20, 30, 40])
    s0[2] = row(s0[2][0], uuid=None, ecc_corrected_aggregate=20, ecc_uncorrected_aggregate=0)
    s1 = _board_rows("B", [0, 0, 0, 0]) + _board_rows("A", [50])  # A also at 1: renumbered
    s1[-1] = row(NOW, uuid="B", ecc_corrected_aggregate=0, ecc_uncorrected_aggregate=0)
    s0[-1] = row(NOW, uuid="A", ecc_corrected_aggregate=40, ecc_uncorrected_aggregate=0)
    s1.insert(2, row(NOW - 2.5 * WEEK_S, uuid="A", ecc_corrected_aggregate=15,
                     ecc_uncorrected_aggregate=0))
    rep = analyze([(("h", "p", 0, ""), s0), (("h", "p", 1, ""), sorted(s1))], now=NOW,
                  thresholds=TH)
    got = {g.uuid: (g.gpu_index, sum(g.ecc_corrected_weekly)) for g in rep.gpus}
    assert got == {"A": (0, 40), "B": (1, 0)}
