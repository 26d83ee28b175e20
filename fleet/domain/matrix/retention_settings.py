"""How long the history keeps GPU counter samples (`hygiene.retention:` in the matrix).

    hygiene:
      retention:
        raw_weeks: 13        # raw samples, whole weeks; older ones become weekly rollups
        rollup_weeks: 104    # weekly rollups; 'forever' keeps them
        prune_after_hygiene: true

The weekly hygiene job prunes after its run; `fleet history prune` does it by hand. The trend
window (4 weeks) plus its baseline week must stay inside `raw_weeks` for the weekly audit to read
raw samples only; longer trends read rollups (fleet.domain.retention).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, PlainValidator, model_validator

from fleet.domain.matrix.base import Model as _Model

MAX_WEEKS = 52 * 50


def _weeks_or_forever(value: object) -> int | Literal["forever"]:
    if value == "forever":
        return "forever"
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_WEEKS:
        return value
    raise ValueError(f"expected 'forever' or a whole number of weeks from 1 to {MAX_WEEKS}, "
                     f"got {value!r}")


WeeksOrForever = Annotated[int | Literal["forever"], PlainValidator(_weeks_or_forever)]
MIN_RAW_WEEKS = 6
"""The weekly audit's trend reads 4 weeks plus a baseline week: keep those raw."""


class RetentionSettings(_Model):
    """Retention of GPU counter samples in the history."""

    raw_weeks: int = Field(
        default=13, ge=MIN_RAW_WEEKS, le=MAX_WEEKS,
        description="Whole weeks of raw samples kept; older weeks are folded into weekly "
        "rollups. At least 6: the weekly audit's trend window reads raw samples.")
    rollup_weeks: WeeksOrForever = Field(
        default=104, description="Weeks of weekly rollups kept, or 'forever'.")
    prune_after_hygiene: bool = Field(
        default=True, description="Whether `fleet hygiene run` prunes after its run.")

    @model_validator(mode="after")
    def _rollups_outlive_raw(self) -> RetentionSettings:
        if self.rollup_weeks != "forever" and self.rollup_weeks < self.raw_weeks:
            raise ValueError(f"rollup_weeks ({self.rollup_weeks}) must be at least raw_weeks "
                             f"({self.raw_weeks}): rollups replace raw samples")
        return self

    @property
    def rollup_weeks_or_none(self) -> int | None:
        return None if self.rollup_weeks == "forever" else self.rollup_weeks
