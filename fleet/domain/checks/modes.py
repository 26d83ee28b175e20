"""Mode and clock checks: slowdown reasons, temperature, persistence mode, MIG mode.
"""

from __future__ import annotations

from collections.abc import Iterable

from fleet.domain.checks.base import FAIL, WARN, Check, finding, registrar
from fleet.domain.checks.models import Expectations, Finding
from fleet.domain.facts import HostFacts
from fleet.domain.matrix.models import Thresholds

CHECKS: list[Check] = []
check = registrar(CHECKS)


@check("clocks.slowdown", ("gpus.clock_event_reasons",), "no thermal or power-brake slowdown")
def clocks_slowdown(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    for g in facts.gpus:
        active = sorted(set(g.clock_event_reasons or []) & set(th.clock_slowdown_reasons))
        if active:
            yield finding(
                "clocks.slowdown",
                WARN,
                "none",
                f"{g.label}: clocks held down by {', '.join(active)}",
                g,
                facts=["gpus.clock_event_reasons"],
                reasons=active,
                temperature_c=g.temperature_c,
                power_draw_w=g.power_draw_w,
            )


@check("gpu.temperature", ("gpus.temperature_c",), "GPU temperature within the matrix limit")
def temperature(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    for g in facts.gpus:
        if g.temperature_c is not None and g.temperature_c > th.gpu_temperature_max_c:
            yield finding(
                "gpu.temperature",
                FAIL,
                "drain",
                f"{g.label}: {g.temperature_c} C, above the {th.gpu_temperature_max_c} C limit; "
                "check cooling and airflow",
                g,
                facts=["gpus.temperature_c"],
                temperature_c=g.temperature_c,
                limit_c=th.gpu_temperature_max_c,
            )


@check("persistence_mode", ("gpus.persistence_mode",), "persistence mode on")
def persistence(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    if not th.require_persistence_mode:
        return
    for g in facts.gpus:
        if g.persistence_mode is False:
            yield finding(
                "persistence_mode",
                WARN,
                "none",
                f"{g.label}: persistence mode off (enable nvidia-persistenced)",
                g,
                facts=["gpus.persistence_mode"],
            )


@check("mig.mode", ("gpus.mig_mode_current", "gpus.mig_mode_pending"), "MIG mode as expected")
def mig_mode(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    for g in facts.gpus:
        if (
            exp.mig_mode is not None
            and g.mig_mode_current is not None
            and g.mig_mode_current != exp.mig_mode
        ):
            yield finding(
                "mig.mode",
                FAIL,
                "reset_gpu",
                f"{g.label}: MIG {'on' if g.mig_mode_current else 'off'}, expected "
                f"{'on' if exp.mig_mode else 'off'}",
                g,
                facts=["gpus.mig_mode_current"],
            )
        elif (
            g.mig_mode_pending is not None
            and g.mig_mode_current is not None
            and g.mig_mode_pending != g.mig_mode_current
        ):
            yield finding(
                "mig.mode",
                WARN,
                "reset_gpu",
                f"{g.label}: MIG mode change pending until the GPU is reset",
                g,
                facts=["gpus.mig_mode_pending"],
            )
