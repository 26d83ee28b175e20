"""The non-inferiority rule every check applies to its interval, and its wording (pure).

Public because the sample sizing (`fleet.domain.sample_size`) searches with the very rule the
judge applies."""

from __future__ import annotations

import math

from fleet.domain.judge.model import MIN_WIDTH, WIDTH_FACTOR, Direction, Verdict


def decide_shift(spec_dir: Direction, allowance: float, lo: float, hi: float,
            relative: bool = True) -> tuple[Verdict, str]:
    """Non-inferiority on an interval of the (signed, natural) shift; public because the sample
    sizing (sample_size.py) searches with the very rule the judge applies."""
    if math.isnan(lo) or math.isnan(hi):
        return "inconclusive", "no interval"
    worse_lo, worse_hi = (lo, hi) if spec_dir == "lower" else (-hi, -lo)
    limit = max(WIDTH_FACTOR * allowance, MIN_WIDTH)
    if worse_lo > allowance:
        return "fail", f"beyond {fmt_allow(allowance, relative, spec_dir)} allowance"
    if worse_hi < allowance:
        if hi - lo > limit:
            return "inconclusive", (f"interval wider than {pct(limit, signed=False)}: "
                                    "too noisy to pass")
        return "pass", f"within {fmt_allow(allowance, relative, spec_dir)} allowance"
    return "inconclusive", f"straddles {fmt_allow(allowance, relative, spec_dir)} allowance"


def pct(v: float, signed: bool = True) -> str:
    if math.isinf(v):
        return "+inf" if v > 0 else "-inf"
    s = f"{v * 100:+.1f}%" if signed else f"{v * 100:.1f}%"
    return s.replace("+0.0%", "0.0%").replace("-0.0%", "0.0%")


def fmt_allow(a: float, relative: bool, direction: Direction) -> str:
    sign = "+" if direction == "lower" else "-"
    return f"{sign}{a * 100:g}%" if relative else f"{sign}{a * 100:g} pp"

