"""Run a benchmark suite on an inventory's hosts over SSH and record every run in the history.

A host that cannot be reached, or whose run could not measure, is recorded as an "error" run
and reported, never dropped: the history never offers a failed run as a baseline.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from fleet.domain.judge.utilization import UTILIZATION
from fleet.history import History, record_benchmark


@dataclass
class BenchResult:
    host: str
    pool: str | None
    ok: bool
    reachable: bool = True
    error: str | None = None
    samples: dict[str, list[float]] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    run_id: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "pool": self.pool, "ok": self.ok,
                "reachable": self.reachable, "error": self.error, "run_id": self.run_id,
                "summary": self.summary,
                "samples": {k: len(v) for k, v in self.samples.items()}}


def summary_of(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The headline numbers of a host's document: replay metrics, or the synthetic medians;
    with the GPU utilization seen during the run (`fleet/bench/gpu_util.py`) under
    "gpu_utilization" (its source, mean per metric, or why it was not measured)."""
    util = doc.get("gpu_utilization")
    out: dict[str, Any]
    if doc.get("suite") == "replay":
        out = dict(doc.get("metrics") or {})
    else:
        out = {"source": doc.get("source"), "verdict": doc.get("verdict")}
        for k, v in (doc.get("samples") or {}).items():
            if v and k not in UTILIZATION:
                vs = sorted(v)
                out[k] = vs[len(vs) // 2]
    if isinstance(util, Mapping):
        out["gpu_utilization"] = {k: util[k] for k in ("source", "gpus", "mean", "error")
                                  if k in util}
    return out


def bench_inventory(
    inventory_path: str | Path,
    limit: Sequence[str] | None,
    history: History,
    suite: str,
    params: Mapping[str, Any],
    *,
    now: Callable[[], datetime],
    name: str | None = None,
    release: str | None = None,
    connect_timeout: int = 10,
) -> list[BenchResult]:
    from fleet.jobs.probe import pool_of
    from fleet.remote.bench import run_benchmark_docs, to_samples
    from fleet.remote.session import connected, load_inventory, select_hosts

    inventory = load_inventory(inventory_path)
    hosts = select_hosts(inventory, limit)
    pools = {h.name: pool_of(h, None) for h in hosts}
    label = name or suite
    started = now()
    with connected(inventory, hosts, connect_timeout=connect_timeout) as conn:
        docs = run_benchmark_docs(conn, None, suite, params)
    ended = now()
    results = []
    for h in hosts:
        res = docs.get(h.name)
        doc = res.value if res is not None and res.ok and res.value else {}
        samples = to_samples(h.name, doc) if doc else None
        ok = bool(samples and samples.ok)
        error = (samples.error if samples is not None else None) or (
            res.error if res is not None else "no result")
        out = BenchResult(h.name, pools[h.name], ok, reachable=res.reachable if res else False,
                          error=None if ok else error,
                          samples=dict(samples.value or {}) if samples and samples.ok else {},
                          summary=summary_of(doc) if doc else {})
        out.run_id = record_benchmark(
            history, h.name, kind=suite, name=label, started_at=started, ended_at=ended,
            samples=out.samples, release=release, status="done" if ok else "error")
        results.append(out)
    return results
