"""Edges of the questions: what must not be a finding, and the verdict's ranking."""

from __future__ import annotations

from fleet.domain.diagnose.model import Answer, Evidence, Finding, GpuProcess, GpuState, SmiSnapshot
from fleet.domain.diagnose.questions import diagnose, verdict


def _ev(**gpu: object) -> Evidence:
    g = GpuState(index=0, **gpu)  # type: ignore[arg-type]
    return Evidence(smi=SmiSnapshot(source="test", gpus=[g]))


def _classes(ev: Evidence) -> list[str]:
    return [f.cls for f in diagnose(ev).findings]


def test_idle_gpu_without_work_is_not_starved() -> None:
    assert _classes(_ev(util_gpu=0, util_mem=0)) == []
    ev = _ev(util_gpu=0, util_mem=0, processes=[GpuProcess(7, "python", 100, "C")])
    assert _classes(ev) == ["gpu_idle"]


def test_a_graphics_process_is_not_work() -> None:
    ev = _ev(util_gpu=0, processes=[GpuProcess(7, "Xorg", 10, "G")])
    assert _classes(ev) == []


def test_pcie_generation_below_max_only_counts_under_load() -> None:
    idle = dict(pcie_gen=1, pcie_gen_max=4, pcie_width=16, pcie_width_max=16)
    assert _classes(_ev(util_gpu=0, **idle)) == []
    assert _classes(_ev(util_gpu=80, **idle)) == ["pcie"]
    assert _classes(_ev(util_gpu=0, pcie_gen=4, pcie_gen_max=4, pcie_width=8,
                        pcie_width_max=16)) == ["pcie"]


def test_power_draw_at_the_cap_under_load_is_throttled_without_a_reason_bit() -> None:
    ev = _ev(util_gpu=90, reasons=[], power_draw_w=399.0, power_limit_w=400.0)
    assert _classes(ev) == ["throttled"]
    assert _classes(_ev(util_gpu=5, reasons=[], power_draw_w=399.0, power_limit_w=400.0)) == []


def test_thermal_slowdown_is_critical() -> None:
    d = diagnose(_ev(util_gpu=90, reasons=["hw_thermal_slowdown"], temperature_c=92))
    assert [(f.cls, f.severity) for f in d.findings] == [("throttled", "critical")]


def test_uncorrected_ecc_and_pending_remap() -> None:
    d = diagnose(_ev(ecc_volatile_uncorrected=2, remap_pending=True))
    assert [(f.cls, f.severity) for f in d.findings] == [("hardware", "critical"),
                                                          ("hardware", "warning")]


def _f(cls: str, sev: str) -> Finding:
    return Finding(cls, sev, "", {}, "", "")  # type: ignore[arg-type]


def test_verdict_prefers_severity_then_question_order() -> None:
    assert verdict([_f("disk", "critical"), _f("throttled", "warning")]) == "disk"
    assert verdict([_f("disk", "warning"), _f("throttled", "warning")]) == "throttled"
    assert verdict([_f("hardware", "info")]) == "healthy"
    assert verdict([], [Answer("gpu_idle", "could_not_judge")]) == "could_not_judge"
