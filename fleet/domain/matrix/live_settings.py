"""A pool's live gate in the matrix (`rollout.gates.live`): judge the canaries on the traffic
they serve, from Prometheus (`fleet.jobs.rollout.livegate`).

    rollout:
      gates:
        live:
          enabled: true
          family: vllm            # triton | vllm | tgi: which metric names the servers export
          models: [llama-3-8b]    # empty: every model the canaries serve
          host_label: instance    # the label that names the host (`host` or `host:port`)
          window_minutes: 30      # default: the pool's bake_minutes (at least 5)

The window starts when the wave's hosts are back in service; baseline hosts are the pool's
hosts of the same GPU model still on the old release, in the same window.
"""

from __future__ import annotations

import math
import re

from pydantic import Field, StrictBool, field_validator

from fleet.domain.matrix.base import Model as _Model
from fleet.domain.promql import FamilyName

LABEL_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
MODEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:/@+-]{0,127}$"
MIN_WINDOW_MINUTES = 5.0


class LiveGateSettings(_Model):
    """Which serving metrics the live gate reads and how much worse the canary may be."""

    enabled: StrictBool = False
    family: FamilyName = "vllm"
    models: list[str] = Field(default=[], max_length=64)
    host_label: str = Field(default="instance", pattern=LABEL_PATTERN,
                            description="The Prometheus label that names the host.")
    window_minutes: float | None = Field(
        default=None, ge=0.25, le=24 * 60,
        description="Traffic judged after the hosts are back in service (default: bake "
                    f"minutes, at least {MIN_WINDOW_MINUTES:g}).")
    step_seconds: int = Field(
        default=60, ge=2, le=3600,
        description="One latency value per host per step; at least twice the scrape interval "
                    "(a histogram's rate needs two scrapes in each step).")
    quantiles: list[float] = Field(default=[0.95, 0.99], min_length=1, max_length=4)
    latency_allowance: float = Field(default=0.10, gt=0, lt=10)
    queue_allowance: float = Field(default=0.25, gt=0, lt=10)
    throughput_allowance: float = Field(
        default=0.10, gt=0, lt=1,
        description="Relative: 0.10 = the canary may serve 10% fewer requests/s per GPU.")
    error_allowance: float = Field(default=0.002, gt=0, lt=1,
                                   description="Absolute: 0.002 = 0.2 percentage point.")

    @field_validator("models")
    @classmethod
    def _models(cls, value: list[str]) -> list[str]:
        bad = [m for m in value if not re.match(MODEL_PATTERN, m)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not a model name (letters, digits and _.:/@+-)")
        return value

    @field_validator("quantiles")
    @classmethod
    def _quantiles(cls, value: list[float]) -> list[float]:
        if any(not (0.5 <= q < 1) or not math.isfinite(q) for q in value):
            raise ValueError("quantiles must lie in [0.5, 1), e.g. [0.95, 0.99]")
        return sorted(set(value))

    def window_s(self, bake_minutes: float) -> float:
        minutes = self.window_minutes or max(float(bake_minutes), MIN_WINDOW_MINUTES)
        return minutes * 60.0
