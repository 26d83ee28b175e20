"""The weekly hygiene job's settings in the matrix (`hygiene:`): benchmark sizing, dcgmi level.

    hygiene:
      benchmark:
        samples: auto        # per side; auto: what the judge needs (fleet.domain.sample_size)
        max_samples: 4000    # auto never asks for more than this per side
        hosts_per_pool: 2
        baseline_weeks: 4
        power: 0.9
      dcgm_diag_level: 1     # dcgmi diag -r N when the benchmark runs through DCGM

`dcgm_diag_level` trades time for depth: NVIDIA gives level 1 as seconds, 2 as about two
minutes, 3 as about 15 minutes and 4 as longer still (docs/hygiene.md, with the sources).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, PlainValidator

from fleet.domain.matrix.base import Model as _Model
from fleet.domain.matrix.retention_settings import RetentionSettings

DCGM_LEVELS = (1, 2, 3, 4)
MAX_SAMPLES = 1_000_000


def _samples(value: object) -> Literal["auto"] | int:
    """'auto' or a whole number of samples (one error, not one per member of a union)."""
    if value == "auto":
        return "auto"
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_SAMPLES:
        return value
    raise ValueError(f"expected 'auto' or a whole number from 1 to {MAX_SAMPLES}, "
                     f"got {value!r}")


Samples = Annotated[Literal["auto"] | int, PlainValidator(_samples)]


class HygieneBenchmark(_Model):
    """How many samples the weekly benchmark collects per pool, and on how many hosts."""

    samples: Samples = Field(
        default="auto",
        description="Samples per side for each judged check: 'auto' sizes the run from the "
        "judge's own rules and the baseline's noise; a number fixes it.")
    max_samples: int = Field(
        default=4000, ge=1, le=MAX_SAMPLES,
        description="The most samples per side 'auto' asks for (a check that needs more stays "
        "inconclusive and the report says how many it needed).")
    hosts_per_pool: int = Field(default=2, ge=1, le=64)
    baseline_weeks: int = Field(default=4, ge=1, le=52)
    power: float = Field(
        default=0.9, ge=0.5, le=0.999,
        description="Chance that a pool with no real change passes, which 'auto' sizes for.")


class HygieneSettings(_Model):
    """The weekly hygiene job (`fleet hygiene run`)."""

    benchmark: HygieneBenchmark = HygieneBenchmark()
    retention: RetentionSettings = RetentionSettings()
    dcgm_diag_level: int = Field(
        default=1, ge=1, le=4,
        description="`dcgmi diag -r N` level when the synthetic benchmark runs through DCGM: "
        "1 quick (seconds), 2 medium (~2 min), 3 long (~15 min), 4 extended (longer).")
