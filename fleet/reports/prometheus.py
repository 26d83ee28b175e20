"""The hygiene report as a Prometheus textfile for node_exporter's textfile collector.

Exposition format 0.0.4: one HELP and TYPE line per metric family, label values escaped
(backslash, double quote, newline), every sample a gauge. Per-host conformance for every host;
per-GPU gauges only for flagged GPUs (80,000 healthy GPUs would swamp the collector); per-pool
weekly totals. Write it with `fleet.reports.write_atomic` (the collector must never read half
a file).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

PREFIX = "fleet_hygiene"


def _esc(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Mapping[str, object]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items()) + "}"


def _num(v: float) -> str:
    if float(v).is_integer():
        return str(int(v))
    return repr(float(v))


class _Families:
    def __init__(self) -> None:
        self.order: list[str] = []
        self.help: dict[str, str] = {}
        self.samples: dict[str, list[str]] = {}

    def add(self, name: str, help_text: str, value: float,
            labels: Mapping[str, object] | None = None) -> None:
        full = f"{PREFIX}_{name}"
        if full not in self.help:
            self.order.append(full)
            self.help[full] = help_text
            self.samples[full] = []
        self.samples[full].append(f"{full}{_labels(labels or {})} {_num(value)}")

    def text(self) -> str:
        lines: list[str] = []
        for name in self.order:
            lines.append(f"# HELP {name} {self.help[name]}")
            lines.append(f"# TYPE {name} gauge")
            lines.extend(self.samples[name])
        return "\n".join(lines) + "\n"


def render_prometheus(report: Mapping[str, Any]) -> str:
    f = _Families()
    s = report["summary"]
    generated = report["generated_at"]
    ts = datetime.fromisoformat(generated).timestamp() if isinstance(generated, str) else 0
    f.add("last_run_timestamp_seconds", "When the hygiene job last ran (Unix time).", ts)
    f.add("problems", "Problems found by the last run (0 means clean).", s["problems"])
    f.add("exit_code", "Exit code of the last run (0 ok, 1 problems).", s["exit_code"])
    for d in report["drift"]:
        lab = {"host": d["host"], "pool": d["pool"] or ""}
        f.add("host_conformant", "1 when the host is on an allowed release, pinned and "
              "reachable (fails closed).", 1 if d["conformant"] else 0, lab)
    for d in report["drift"]:
        lab = {"host": d["host"], "pool": d["pool"] or ""}
        f.add("host_reachable", "1 when the last probe reached the host.",
              1 if d["reachable"] else 0, lab)
    for d in report["drift"]:
        f.add("host_differences", "Number of drift differences of the host.",
              len(d["differences"]), {"host": d["host"], "pool": d["pool"] or ""})
    node = report.get("node_state") or {}
    for h in node.get("hosts", []):
        if h["conformant"] is not None:
            f.add("node_conformant", "1 when the host matches its pool's node profile (an "
                  "unreadable value counts as not conformant).", 1 if h["conformant"] else 0,
                  {"host": h["host"], "pool": h["pool"] or "", "profile": h["profile"] or ""})
    for check, counts in node.get("fields", {}).items():
        for kind in ("differ", "unreadable"):
            f.add("node_field_findings", "Node-profile findings across the fleet per check "
                  "(kind: differ or unreadable).", counts[kind], {"check": check, "kind": kind})
    for pool, v in report["trends"]["pools"].items():
        f.add("pool_ecc_corrected_last_week", "Corrected ECC errors in the pool last week.",
              round(v["ecc_corrected"][-1], 3) if v["ecc_corrected"] else 0, {"pool": pool})
    for pool, v in report["trends"]["pools"].items():
        f.add("pool_aer_corrected_last_week", "Correctable PCIe AER errors in the pool last "
              "week.", round(v["aer_corrected"][-1], 3) if v["aer_corrected"] else 0,
              {"pool": pool})
    for pool, v in report["trends"]["pools"].items():
        f.add("pool_xid_last_week", "Xid events in the pool last week.",
              v["xid"][-1] if v["xid"] else 0, {"pool": pool})
    for g in report["trends"]["flagged"]:
        lab = {"host": g["host"], "pool": g["pool"], "gpu": g["gpu_index"]}
        f.add("gpu_ecc_corrected_last_week", "Corrected ECC errors last week (flagged GPUs).",
              round(g["ecc_corrected_weekly"][-1], 3), lab)
    for g in report["trends"]["flagged"]:
        lab = {"host": g["host"], "pool": g["pool"], "gpu": g["gpu_index"]}
        f.add("gpu_ecc_corrected_slope", "Least-squares slope of weekly corrected ECC "
              "(errors/week per week, flagged GPUs).", g["ecc_corrected_slope"], lab)
    for g in report["trends"]["flagged"]:
        for flag in g["flags"]:
            f.add("gpu_flag", "1 per trend flag on a GPU (kind, severity).", 1,
                  {"host": g["host"], "pool": g["pool"], "gpu": g["gpu_index"],
                   "kind": flag["kind"], "severity": flag["severity"]})
    q = report["quarantine"]
    # every pool of the run, also on a clean run: a pool without a breaker entry has nothing
    # proposed and nothing in quarantine (an absent series would read as "no data" in alerts)
    judged = {b["pool"]: b for b in q["breakers"]}
    pools = sorted({*judged, *(d["pool"] for d in report["drift"] if d["pool"]),
                    *report["trends"]["pools"]})
    for pool in pools:
        f.add("breaker_tripped", "1 when the quarantine circuit breaker tripped for the pool.",
              1 if judged.get(pool, {}).get("tripped") else 0, {"pool": pool})
    for pool in pools:
        f.add("breaker_utilization", "Share of the pool proposed or already in quarantine.",
              judged.get(pool, {}).get("utilization", 0), {"pool": pool})
    for b in q["breakers"]:
        f.add("quarantine_proposed", "Hosts proposed for quarantine in the pool this run.",
              b["proposed"], {"pool": b["pool"]})
    f.add("quarantine_open", "Hosts in quarantine (open rows) after the run.", len(q["open"]))
    for b in report["benchmarks"]:
        f.add("benchmark_regression", "1 when the pool's synthetic benchmark regressed "
              "against its trailing baseline.", 1 if b["verdict"] == "fail" else 0,
              {"pool": b["pool"], "verdict": b["verdict"]})
    for b in report["benchmarks"]:
        s = b.get("samples")
        if s:
            for side, key in (("this_week", "had"), ("baseline", "baseline"),
                              ("needed", "needed")):
                f.add("benchmark_samples", "Benchmark samples per side of the pool's weekly "
                      "judgement: this week's, the baseline's, and what the judge needs.",
                      s[key], {"pool": b["pool"], "side": side})
    return f.text()
