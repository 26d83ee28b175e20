"""The spec a metric gets from its name, and the `NAME:lower|higher[:ALLOWANCE%]` flag (pure)."""

from __future__ import annotations

import re

from fleet.domain.judge.model import Kind, MetricSpec
from fleet.domain.judge.utilization import is_utilization, utilization_spec

_RATE = re.compile(r"(^|[_.-])(errors?|err|fail(ed|ures?)?|timeouts?)([_.-]|$)", re.I)
_HIGHER = re.compile(
    r"throughput|goodput|tflops|gflops|flops|bandwidth|gbps|gb_?s|tb_?s|rps|qps|"
    r"per_s(ec)?|tokens?_s|ops|speed|score", re.I)
_LOWER = re.compile(r"latency|lat_|_ms|_us|_ns|_s$|seconds|duration|time|ttft|tpot|itl|wait",
                    re.I)
_SUMMARY = re.compile(r"[_.-](p\d{1,3}(\.\d+)?|mean|median|avg|max|min)$", re.I)


def default_spec(name: str) -> MetricSpec | None:
    """The spec a metric gets from its name alone, or None when its direction is unknowable.

    Errors: per-request 0/1 outcomes, at most 0.2 percentage point more. Throughput-like: higher
    is better, run level, 5%. Latency-like: lower is better, 5% on the median and 10% on p95/p99;
    a per-run summary (`latency_ms_p99`, `_mean`) is a run-level value and gets no tail checks.
    GPU utilization and PCIe throughput (`fleet.domain.judge.utilization`): higher, run level, 50%.
    """

    if is_utilization(name):
        return utilization_spec(name)
    if _RATE.search(name):
        return MetricSpec(name, "lower", 0.002, kind="rate")
    if _HIGHER.search(name):
        return MetricSpec(name, "higher", 0.05, kind="run")
    if _LOWER.search(name):
        if _SUMMARY.search(name):
            return MetricSpec(name, "lower", 0.05, kind="run")
        return MetricSpec(name, "lower", 0.05, kind="location", tails=(0.95, 0.99))
    return None


_FLAG = re.compile(
    r"^(?P<name>[A-Za-z0-9_.-]{1,128}):(?P<dir>lower|higher)"
    r"(:(?P<allow>\d+(\.\d+)?)%)?(?P<opts>(:(critical|noncritical|notails|run|location|rate))*)$")


def parse_metric_flag(text: str) -> MetricSpec:
    """`NAME:lower|higher[:ALLOWANCE%][:noncritical][:notails][:run|location|rate]`.

    The kind and tails default from the name; for a rate metric the percentage is absolute
    (`errors:lower:0.5%` allows 0.5 percentage point more errors). ValueError when malformed.
    """
    m = _FLAG.fullmatch(text.strip())
    if not m:
        raise ValueError(
            f"expected NAME:lower|higher[:ALLOWANCE%][:noncritical][:notails], got {text!r}")
    name = m["name"]
    base = default_spec(name) or MetricSpec(name)
    opts = {o for o in (m["opts"] or "").split(":") if o}
    kind: Kind = base.kind
    for k in ("run", "location", "rate"):
        if k in opts:
            kind = k
    allowance = float(m["allow"]) / 100 if m["allow"] is not None else (
        base.allowance if kind == base.kind else (0.002 if kind == "rate" else 0.05))
    tails = base.tails if kind == "location" and "notails" not in opts else ()
    if kind == "location" and not base.tails and "notails" not in opts and m["dir"] == "lower":
        tails = (0.95, 0.99)
    return MetricSpec(name, m["dir"], allowance,  # type: ignore[arg-type]
                      critical="noncritical" not in opts, kind=kind, tails=tails,
                      tail_allowance=max(base.tail_allowance, 2 * allowance))


