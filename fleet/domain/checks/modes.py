"""Clock and thermal checks: slowdown reasons, temperature. (Persistence and MIG mode moved to
the node-profile checks: `node_settings`, `node_mig`.)
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
