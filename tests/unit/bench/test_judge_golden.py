"""Judge golden files (black style): each tests/data/judge/*.judge holds its input, the verdicts it
must reach, and below `# output` the exact report lines. A new regression is a new file.

Input samples are either literal lists or generator specs drawn with the stdlib's `random`, whose
streams are stable across Python versions:

    {"gen": "lognormal", "median": M, "sigma": S, "n": N, "seed": K,
     "tail": {"fraction": F, "factor": X}}      # optional: F of the samples X times slower
    {"gen": "ones", "ones": K, "n": N}           # K ones then N-K zeros (error outcomes)

Regenerate the output sections with FLEET_REGEN=1; the `expect` verdicts are never regenerated.
"""

from __future__ import annotations

import json
import math
import os
import random
from pathlib import Path
from typing import Any

import pytest

from fleet.domain.judge import judge, parse_metric_flag

DATA = Path(__file__).resolve().parents[2] / "data" / "judge"
CASES = sorted(DATA.glob("*.judge"))
MARK = "# output"


def samples(spec: Any) -> list[float]:
    if isinstance(spec, list):
        return [float(v) for v in spec]
    if spec["gen"] == "ones":
        return [1.0] * spec["ones"] + [0.0] * (spec["n"] - spec["ones"])
    if spec["gen"] == "lognormal":
        rnd = random.Random(spec["seed"])
        out = [rnd.lognormvariate(math.log(spec["median"]), spec["sigma"])
               for _ in range(spec["n"])]
        tail = spec.get("tail")
        if tail:
            k = round(tail["fraction"] * len(out))
            for i in rnd.sample(range(len(out)), k):
                out[i] *= tail["factor"]
        return out
    raise ValueError(f"unknown generator {spec['gen']!r}")


def read_case(path: Path) -> tuple[dict[str, Any], list[str], str]:
    text = path.read_text()
    head, sep, tail = text.partition(MARK + "\n")
    assert sep, f"{path.name}: no '{MARK}' line"
    body = "\n".join(line for line in head.splitlines() if not line.startswith("#"))
    return json.loads(body), tail.splitlines(), head


def report(case: dict[str, Any]) -> tuple[Any, list[str]]:
    canary = {k: samples(v) for k, v in case["canary"].items()}
    baseline = {k: samples(v) for k, v in case["baseline"].items()}
    specs = [parse_metric_flag(m) for m in case.get("metrics", [])]
    j = judge(canary, baseline, specs, baseline_source=case.get("baseline_source", "same-time"))
    lines = [f"verdict: {j.verdict} (baseline: {j.baseline_source})"]
    lines += [m.reason for m in j.metrics]
    return j, lines


@pytest.mark.parametrize("path", CASES, ids=[c.stem for c in CASES])
def test_golden(path: Path) -> None:
    case, expected, head = read_case(path)
    j, got = report(case)
    expect = case["expect"]
    assert j.verdict == expect["verdict"], "\n".join(got)
    by_metric = {m.metric: m.verdict for m in j.metrics}
    for metric, verdict in expect.items():
        if metric != "verdict":
            assert by_metric.get(metric) == verdict, f"{metric}: " + "\n".join(got)
    if os.environ.get("FLEET_REGEN"):
        path.write_text(head + MARK + "\n" + "\n".join(got) + "\n")
        expected = got
    assert got == expected


def test_the_kayenta_failure_modes_have_cases() -> None:
    stems = {c.stem for c in CASES}
    assert {"wide_interval_never_passes", "tail_only_change", "sparse_zero_heavy_errors",
            "nodata_critical"} <= stems
