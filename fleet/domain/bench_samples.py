"""Benchmark samples checked for physical sense before the judge sees them (pure).

The judge compares numbers; it cannot tell a latency of -3 ms or 0 ms from a fast server, and a
negative throughput shifts a mean like any other value. What a metric measures is read from its
name, the same way the judge reads its direction (`fleet.domain.judge.default_spec`):

    latency-like (lower is better: latency, _ms, _s, duration, time, ttft, ...)
        finite and > 0; 0 is allowed only where the name says the quantity can be nothing
        (wait, queue, delay, idle, stall, jitter, skew, lag, slack, overhead, backoff)
    throughput-like (higher is better: throughput, tflops, bandwidth, rps, ...)
        finite and >= 0 (a dead canary serves 0: that is a result, and fails the judge);
        a `score` may be negative
    error rates (errors, failures, timeouts: per-request outcomes)  finite and >= 0
    anything else (a name the judge cannot place)                   finite

`read_samples` reads a samples file (the JSON that `fleet bench compare` takes) and locates every
bad value by line and JSON path, so the operator can fix the file without guessing.
`check_samples` applies the same rules to what a benchmark printed on a host
(`fleet.remote.bench.to_samples`): such a host could not measure, and is never judged.
"""

from __future__ import annotations

import bisect
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fleet.domain.judge import default_spec
from fleet.domain.nesting import MAX_JSON_DEPTH, json_too_deep
from fleet.errors import Problem

MAX_PER_METRIC = 5  # bad values listed one by one per metric; the rest are counted
_MAY_BE_ZERO = re.compile(
    r"wait|queue|delay|idle|stall|jitter|skew|lag|slack|overhead|backoff", re.I)
_SIGNED = re.compile(r"score", re.I)


def value_problem(name: str, value: Any, *, zero_latency: bool = False) -> str | None:
    """Why `value` is not a sample of metric `name` that makes physical sense, or None.

    `zero_latency` lets a latency of 0 through: a benchmark tool on a host may round a short
    time to 0, which is coarse, not wrong; a file given to the judge by hand may not.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "expected a number"
    if not math.isfinite(value):
        return f"{_show(value)} is not a finite number"
    spec = default_spec(name)
    if spec is None:
        return None
    if spec.kind == "rate":
        return f"{_show(value)}: an error count cannot be negative" if value < 0 else None
    if spec.direction == "higher":
        if value < 0 and not _SIGNED.search(name):
            return f"{_show(value)}: a throughput cannot be negative"
        return None
    if value < 0:
        return f"{_show(value)}: a latency or duration cannot be negative"
    if value == 0 and not zero_latency and not _MAY_BE_ZERO.search(name):
        return (f"{_show(value)}: a latency or duration of zero is not a measurement "
                "(a timer's resolution, or a missing value written as 0?)")
    return None


def physical_problems(name: str, values: Iterable[Any], *,
                      zero_latency: bool = False) -> list[tuple[int, str]]:
    """(index, why) for every value of metric `name` that makes no physical sense."""
    out = []
    for i, v in enumerate(values):
        why = value_problem(name, v, zero_latency=zero_latency)
        if why is not None:
            out.append((i, why))
    return out


def _show(v: float) -> str:
    if isinstance(v, _Num):
        return v.text  # as written in the file
    return repr(float(v)) if isinstance(v, float) else str(v)


class _Num(float):
    """A number read from the file: its token's index (document order) and its text."""

    token: int
    text: str


_TOKEN = re.compile(
    r'"(?:[^"\\]|\\.)*"|(-?Infinity|NaN|-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?)')


def _loads_located(text: str) -> tuple[Any, list[int]]:
    """json.loads, with every number a `_Num` and the offset of each number token in the text.

    The decoder calls the number hooks in document order, and a scan over the same (valid) text
    that skips strings meets the number tokens in the same order: token k is hook call k.
    """
    count = 0

    def num(s: str) -> _Num:
        nonlocal count
        n = _Num(s)
        n.token, n.text = count, s
        count += 1
        return n

    doc = json.loads(text, parse_float=num, parse_int=num, parse_constant=num)
    offsets = [m.start(1) for m in _TOKEN.finditer(text) if m.group(1)]
    return doc, offsets if len(offsets) == count else []


def read_samples(text: str, source: str) -> tuple[dict[str, list[float]], list[Problem]]:
    """A samples document (`{"metric": [numbers]}`, or a runner's `{"samples": {...}}`) and
    every problem in it, each with the line of the bad value and its JSON path."""
    deep = json_too_deep(text)
    if deep is not None:
        return {}, [Problem(source, deep, None,
                            f"not a samples document: nested deeper than {MAX_JSON_DEPTH} levels")]
    try:
        doc, offsets = _loads_located(text)
    except ValueError as exc:
        return {}, [Problem(source, getattr(exc, "lineno", None), None, f"not JSON: {exc}")]
    newlines = [m.start() for m in re.finditer("\n", text)]

    def line_of(v: Any) -> int | None:
        if not isinstance(v, _Num) or not offsets:
            return None
        return bisect.bisect_left(newlines, offsets[v.token]) + 1

    prefix = ""
    if isinstance(doc, dict) and isinstance(doc.get("samples"), dict):
        doc, prefix = doc["samples"], "samples."  # a runner's or replay's own output works as is
    if not isinstance(doc, dict):
        return {}, [Problem(source, None, None, "expected a JSON object mapping metric name to "
                                                "a list of samples")]
    out: dict[str, list[float]] = {}
    problems: list[Problem] = []
    for name, values in doc.items():
        path = f"{prefix}{name}"
        if not isinstance(values, list):
            problems.append(Problem(source, line_of(values), path,
                                    "expected a list of numbers"))
            continue
        bad = physical_problems(str(name), values)
        for i, why in bad[:MAX_PER_METRIC]:
            problems.append(Problem(source, line_of(values[i]), f"{path}[{i}]", why))
        if len(bad) > MAX_PER_METRIC:
            problems.append(Problem(source, None, path,
                                    f"... and {len(bad) - MAX_PER_METRIC} more bad value(s) "
                                    f"({len(bad)} of {len(values)})"))
        if not bad:
            out[str(name)] = [float(v) for v in values]
    return out, problems


def check_samples(samples: Mapping[str, Sequence[Any]]) -> list[str]:
    """One line per metric with values that make no physical sense, for samples a benchmark
    printed on a host (a latency rounded to 0 passes there, see `value_problem`)."""
    out = []
    for name, values in samples.items():
        bad = physical_problems(name, values, zero_latency=True)
        if bad:
            i, why = bad[0]
            out.append(f"{name}[{i}]: {why}" + (f" ({len(bad)} bad values)" if len(bad) > 1
                                                 else ""))
    return out
