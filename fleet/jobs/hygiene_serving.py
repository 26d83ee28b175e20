"""The serving section of the weekly hygiene run: per pool and model, from Prometheus.

Each pool's servers are described by its `rollout.gates.live` settings (family, host label,
models; used whether or not the gate is enabled). The figures and their rules are
`fleet.domain.serving_week`'s. Nothing here reads as healthy unmeasured: no Prometheus
configured, a server that does not answer, a query error or no series is "could not measure"
with the reason; a query that failed (not one that found no series: a pool may serve nothing)
and a regression are problems of the run.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from fleet.domain.drift import HostDrift
from fleet.domain.matrix.live_settings import LiveGateSettings
from fleet.domain.matrix.models import Matrix
from fleet.domain.ports import HostRef
from fleet.domain.prom_result import MetricsSource, QueryResult
from fleet.domain.promql import Family, Signal, count_query, family, models_query
from fleet.domain.serving_units import Units, serving_units
from fleet.domain.serving_week import (
    QUANTILES,
    WEEK_S,
    WEEKS,
    cache_queries,
    change,
    load_query,
    moved,
    pct,
    regression,
    week_quantile,
)

UNSET = ("could not measure: no Prometheus configured (--prometheus, FLEET_PROMETHEUS_URL or "
         "inventory data prometheus_url)")


def _one(res: QueryResult) -> float | None:
    """The value of a one-series answer (the newest point), None when unmeasured."""
    for s in res.series:
        if s.points:
            return round(s.points[-1][1], 4)
    return None


class _Asker:
    """Runs the queries, keeps the first failure (an error, not an empty answer)."""

    def __init__(self, src: MetricsSource) -> None:
        self.src = src
        self.errors: list[str] = []
        self.queries = 0

    def ask(self, query: str, at: dt.datetime) -> QueryResult:
        self.queries += 1
        res = self.src.instant(query, at)
        if res.error is not None:
            self.errors.append(res.error)
        return res

    def value(self, query: str, at: dt.datetime) -> float | None:
        return _one(self.ask(query, at))

    def per_host(self, query: str, at: dt.datetime, label: str) -> dict[str, float]:
        res = self.ask(query, at)
        return {(k.rsplit(":", 1)[0] if ":" in k else k): v[-1]  # `host` or `host:port`
                for k, v in res.by_label(label).items() if v}


def _ms(fam: Family, signal: Signal, value: float | None) -> float | None:
    return None if value is None else round(fam.to_ms(signal, value), 3)


def _quantiles(a: _Asker, fam: Family, signal: Signal, model: str | None, hosts: Sequence[str],
               label: str, at: dt.datetime) -> dict[str, float | None]:
    return {pct(q): a.value(week_quantile(fam, signal, q, model=model, hosts=hosts,
                                          host_label=label), at) for q in QUANTILES}


def _model(a: _Asker, pool: str, fam: Family, live: LiveGateSettings, model: str | None,
           hosts: Sequence[HostRef], releases: Mapping[str, list[str]], now: dt.datetime,
           rollouts: Sequence[Mapping[str, Any]], units: Mapping[str, Units | str]
           ) -> dict[str, Any]:
    label = live.host_label
    names = [h.name for h in hosts]
    week = dt.timedelta(seconds=WEEK_S)
    name = model or fam.name
    lat = {"this_week": _quantiles(a, fam, "latency", model, names, label, now),
           "last_week": _quantiles(a, fam, "latency", model, names, label, now - week)}
    lat["change"] = {k: change(v, lat["last_week"][k]) for k, v in lat["this_week"].items()}
    queue = {"this_week": _quantiles(a, fam, "queue", model, names, label, now),
             "last_week": _quantiles(a, fam, "queue", model, names, label, now - week)}
    queue["change"] = {k: change(v, queue["last_week"][k]) for k, v in queue["this_week"].items()}
    by_release: dict[str, dict[str, Any]] = {}
    if len(releases) > 1:  # the pool runs two releases this week: each one's latency
        by_release = {rel: {"hosts": hs, "latency_ms": _quantiles(a, fam, "latency", model, hs,
                                                                  label, now)}
                      for rel, hs in sorted(releases.items())}
    weekly = [a.value(week_quantile(fam, "latency", 0.99, model=model, hosts=names,
                                    host_label=label), now - week * k)
              for k in range(WEEKS - 1, 1, -1)] + [lat["last_week"]["p99"],
                                                   lat["this_week"]["p99"]]
    load_q = load_query(fam, model=model, hosts=names, host_label=label)
    loads = a.per_host(load_q, now, label) if load_q else {}
    cache = cache_queries(fam, model=model, hosts=names, host_label=label)
    hits = misses = None
    if cache:
        hits, misses = a.value(cache[0], now), a.value(cache[1], now)
    p99s = a.per_host(week_quantile(fam, "latency", 0.99, model=model, hosts=names,
                                    host_label=label, by_host=True), now, label)
    counts_q = count_query(fam, "requests", model=model, hosts=names, host_label=label,
                           window_s=WEEK_S)
    counts = a.per_host(counts_q, now, label) if counts_q else {}
    density = []
    for h in hosts:
        if h.name not in counts:
            continue
        u = units.get(h.name) or serving_units(h.gpu_count, None)
        per = None if isinstance(u, str) else round(counts[h.name] / u.count, 1)
        density.append({
            "host": h.name, "gpus": h.gpu_count, "requests": round(counts[h.name]),
            "requests_per_gpu": per, "per": u if isinstance(u, str) else u.describe(),
            "p99_ms": round(fam.to_ms("latency", p99s[h.name]), 3) if h.name in p99s else None})
    for side in ("this_week", "last_week"):
        lat[side] = {k: _ms(fam, "latency", v) for k, v in lat[side].items()}
        queue[side] = {k: _ms(fam, "queue", v) for k, v in queue[side].items()}
    for r in by_release.values():
        r["latency_ms"] = {k: _ms(fam, "latency", v) for k, v in r["latency_ms"].items()}
    weekly_ms = [_ms(fam, "latency", v) for v in weekly]
    measured = lat["this_week"]["p99"] is not None
    doc: dict[str, Any] = {
        "model": name, "status": "measured" if measured else "could_not_measure",
        "reason": "" if measured else "could not measure: no p99 latency this week",
        "latency_ms": lat, "queue_ms": queue, "by_release": by_release,
        "load_s": ({"max": round(max(loads.values()), 3), "hosts": len(loads)} if loads
                   else None),
        "load": ("measured" if loads else "could not measure: no series") if load_q
        else f"not exported by {fam.name}",
        "cache_hit_rate": (round(hits / (hits + misses), 4)
                           if hits is not None and misses is not None and hits + misses > 0
                           else None),
        "cache": ("measured" if hits is not None and misses is not None else
                  "could not measure: no series") if cache else f"not exported by {fam.name}",
        "density": density, "weekly_p99_ms": weekly_ms, "moved": moved(weekly_ms),
    }
    doc["regression"] = regression(pool, name, lat["this_week"]["p99"], lat["last_week"]["p99"],
                                   {rel: r["latency_ms"]["p99"] for rel, r in by_release.items()},
                                   rollouts) if measured else None
    return doc


def serving_section(src: MetricsSource | None, matrix: Matrix, refs: Sequence[HostRef],
                    drift: Sequence[HostDrift], *, now: dt.datetime,
                    rollouts: Sequence[Mapping[str, Any]] = (),
                    where: str | None = None,
                    units: Mapping[str, Units | str] | None = None) -> dict[str, Any]:
    """The `serving` key of the report. `rollouts`: {id, release, scope, started_at} of the
    week's rollouts (the release changes a regression may coincide with); `units`: each host's
    GPUs or MIG instances from this run's facts (`fleet.domain.serving_units`; a host without
    is counted by the inventory's `gpu_count`, or not at all)."""
    units = units or {}
    if src is None:
        return {"status": "could_not_measure", "reason": UNSET, "prometheus": None,
                "pools": [], "problems": [], "queries": 0}
    a = _Asker(src)
    release = {d.host: d.release for d in drift}
    pools: list[dict[str, Any]] = []
    problems: list[str] = []
    for pool in sorted({r.pool or "" for r in refs}):
        hosts = [r for r in refs if (r.pool or "") == pool]
        p = matrix.pools.get(pool)
        live = p.rollout.gates.live if p is not None else LiveGateSettings()
        fam = family(live.family)
        names = [h.name for h in hosts]
        before = len(a.errors)
        models: list[str | None]
        if live.models:
            models = list(live.models)
        elif (mq := models_query(fam, hosts=names, host_label=live.host_label)) is None:
            models = [None]
        else:
            assert fam.model_label is not None
            models = [*sorted(a.ask(mq, now).by_label(fam.model_label))]
        releases: dict[str, list[str]] = {}
        for h in names:
            if release.get(h):
                releases.setdefault(str(release[h]), []).append(h)
        mine = [r for r in rollouts if pool in str(r.get("scope", "")).split(",")]
        docs = [_model(a, pool, fam, live, m, hosts, releases, now, mine, units)
                for m in models]
        failed = a.errors[before:]
        entry = {"pool": pool, "family": fam.name, "host_label": live.host_label,
                 "hosts": len(hosts), "models": docs,
                 "status": "measured" if any(d["status"] == "measured" for d in docs)
                 else "could_not_measure",
                 "reason": (f"could not measure: {failed[0]}" if failed else
                            "" if docs else "could not measure: no serving series of the "
                                            f"pool's hosts (label {live.host_label})")}
        if failed:
            problems.append(f"serving: pool {pool}: {entry['reason']}")
        problems += [f"serving regression: {d['regression']}" for d in docs if d["regression"]]
        pools.append(entry)
    measured = any(p["status"] == "measured" for p in pools)
    return {"status": "measured" if measured else "could_not_measure",
            "reason": "" if measured else
            (f"could not measure: {a.errors[0]}" if a.errors else "could not measure: no "
             "serving series of any audited host"),
            "prometheus": where, "pools": pools, "problems": problems, "queries": a.queries}
