"""The hygiene report's serving section as table rows and weekly p99 series (pure; the HTML and
Markdown renderers lay them out)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

HEADER = ("pool", "model", "p50 / p95 / p99 ms (this week)", "p99 last week", "p99 change",
          "queue p95 ms", "other release", "load s", "cache hit", "p99 vs requests/GPU")


def _n(v: Any, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def rows(report: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """One row per pool and model; an unmeasured one says why instead of figures."""
    out: list[tuple[str, ...]] = []
    for p in (report.get("serving") or {}).get("pools", []):
        if not p["models"]:
            out.append((p["pool"], "-", p["reason"], "", "", "", "", "", "", ""))
        for m in p["models"]:
            if m["status"] != "measured":
                out.append((p["pool"], m["model"], m["reason"], "", "", "", "", "", "", ""))
                continue
            lat, queue = m["latency_ms"], m["queue_ms"]
            this = lat["this_week"]
            change = lat["change"]["p99"]
            releases = "; ".join(f"{rel}: p99 {_n(r['latency_ms']['p99'])}"
                                 for rel, r in m["by_release"].items()) or "-"
            density = ", ".join(
                f"{d['host']} {_n(d['p99_ms'])} ms @ " + (
                    f"{d['requests_per_gpu']}" + (" /MIG" if "MIG" in d.get("per", "") else "")
                    if d["requests_per_gpu"] is not None else "? (GPU count unknown)")
                for d in m["density"]) or "-"
            out.append((p["pool"], m["model"],
                        f"{_n(this['p50'])} / {_n(this['p95'])} / {_n(this['p99'])}",
                        _n(lat["last_week"]["p99"]),
                        "-" if change is None else f"{change:+.0%}",
                        _n(queue["this_week"]["p95"]), releases,
                        _n((m["load_s"] or {}).get("max"), "{:.2f}") if m["load_s"]
                        else m["load"],
                        _n(m["cache_hit_rate"], "{:.0%}") if m["cache_hit_rate"] is not None
                        else m["cache"], density))
    return out


def weekly(report: Mapping[str, Any]) -> dict[str, dict[str, list[float | None]]]:
    """Pool -> model -> p99 per week (oldest first), for the pools where a model's p99 moved
    (a chart is drawn only there)."""
    out: dict[str, dict[str, list[float | None]]] = {}
    for p in (report.get("serving") or {}).get("pools", []):
        if any(m.get("moved") or m.get("regression") for m in p["models"]):
            out[p["pool"]] = {m["model"]: list(m["weekly_p99_ms"]) for m in p["models"]}
    return out
