"""The live gate: once a wave's hosts serve again, their traffic against the old release's.

Runs after the undrain when the pool's matrix enables `rollout.gates.live`: it waits out the
window (`window_minutes`, default the bake time), then asks Prometheus, per model, for the
canary hosts' p95/p99 latency, queue time and requests/s at each step (the requests/s divided
by each host's GPUs, or MIG instances, from its newest facts or the inventory) and their request
and error counts, and the same of the baseline: the pool's hosts of the same GPU model still
on the old release (planned in this rollout), in the same window. Without such hosts the
baseline is the canary hosts themselves over an equal window before the wave started (lower
confidence). The verdict
is `fleet.domain.live_gate`'s: fail rolls the wave back, inconclusive pauses it, and "could
not measure" (no Prometheus configured, unreachable, a query error, no series) is retried
(`max_retries`) and then pauses. `fleet rollout promote` passes a paused live gate by hand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from fleet.domain.gates import GateVerdict, after_retries
from fleet.domain.live_gate import LiveSide, ModelVerdict, judge_model, live_verdict
from fleet.domain.matrix.live_settings import LiveGateSettings
from fleet.domain.matrix.models import RolloutSettings
from fleet.domain.prom_result import MetricsSource, QueryResult
from fleet.domain.promql import (
    Family,
    count_query,
    family,
    models_query,
    quantile_query,
    rate_query,
)
from fleet.domain.serving_units import Units, serving_units
from fleet.history import latest_snapshots
from fleet.history.rollouts import StepRow, WaveRow
from fleet.jobs.rollout.core import EngineCore
from fleet.jobs.rollout.model import _UNLOCK, _most_common, _Stop

QUEUE_Q = 0.95


def _flat(res: QueryResult, label: str, hosts: Sequence[str]) -> list[float]:
    """Every finite value of the hosts' series (a host label may carry `:port`)."""
    wanted = set(hosts)
    return [v for key, vals in res.by_label(label).items()
            if key in wanted or key.rsplit(":", 1)[0] in wanted for v in vals]


def _by_host(res: QueryResult, label: str, hosts: Sequence[str]) -> dict[str, list[float]]:
    """The finite values of each of the hosts' series (a host label may carry `:port`)."""
    wanted = set(hosts)
    out: dict[str, list[float]] = {}
    for key, vals in res.by_label(label).items():
        host = key if key in wanted else key.rsplit(":", 1)[0]
        if host in wanted:
            out.setdefault(host, []).extend(vals)
    return out


def per_unit(rates: Mapping[str, Sequence[float]], units: Mapping[str, Units | str]
             ) -> tuple[list[float], frozenset[str], list[str]]:
    """Each host's requests/s at each step divided by its GPUs or MIG instances, the kinds of
    unit counted, and why a host that served could not be counted (its units unknown)."""
    values: list[float] = []
    kinds: set[str] = set()
    unknown: list[str] = []
    for host, rs in sorted(rates.items()):
        u = units.get(host, "not in the inventory")
        if isinstance(u, str):
            unknown.append(f"{host}: {u}")
            continue
        kinds.add(u.kind)
        values += [r / u.count for r in rs]
    return values, frozenset(kinds), unknown


def measure_side(src: MetricsSource, fam: Family, live: LiveGateSettings, model: str | None,
                 hosts: Sequence[str], start: datetime, end: datetime,
                 units: Mapping[str, Units | str]) -> LiveSide:
    """One side's signals of one model over [start, end]; each one that could not be
    measured is named in `missing`. `units` gives each host's GPUs (or MIG instances), or
    why they are unknown."""
    label, step = live.host_label, float(live.step_seconds)
    # the first value is one step in: a value at `start` is a rate (or summary) over the step
    # before it, which for the canaries is their reboot (a third fewer requests on the lab)
    first = start + timedelta(seconds=step) if end - start > timedelta(seconds=step) else start
    missing: list[str] = []
    latency: dict[float, list[float]] = {}
    for q in live.quantiles:
        res = src.range(quantile_query(fam, "latency", q, model=model, hosts=hosts,
                                       host_label=label, rate_window_s=step), first, end, step)
        values = _flat(res, label, hosts)
        if not values:
            missing.append(f"latency p{q * 100:g}: {res.why_not() or 'no series of these hosts'}")
        latency[q] = [fam.to_ms("latency", v) for v in values]
    res = src.range(quantile_query(fam, "queue", QUEUE_Q, model=model, hosts=hosts,
                                   host_label=label, rate_window_s=step), first, end, step)
    queue = [fam.to_ms("queue", v) for v in _flat(res, label, hosts)]
    res = src.range(rate_query(fam, model=model, hosts=hosts, host_label=label,
                               rate_window_s=step), first, end, step)
    throughput, kinds, unknown = per_unit(_by_host(res, label, hosts), units)
    if unknown:
        missing.append(f"throughput per GPU: {'; '.join(unknown)}")
    elif not throughput:
        missing.append(f"throughput: {res.why_not() or 'no series of these hosts'}")
    window = (end - start).total_seconds()
    counts: dict[str, float | None] = {}
    for counter in ("requests", "errors"):
        query = count_query(fam, counter, model=model, hosts=hosts, host_label=label,
                            window_s=window)
        if query is None:
            counts[counter] = None
            continue
        res = src.instant(query, end)
        values = _flat(res, label, hosts)
        counts[counter] = sum(values) if res.ok and values else None
        if counts[counter] is None:
            missing.append(f"{counter}: {res.why_not() or 'no series of these hosts'}")
    return LiveSide(tuple(hosts), latency, queue, counts["requests"], counts["errors"],
                    tuple(missing), throughput, kinds)


def models_to_judge(src: MetricsSource, fam: Family, live: LiveGateSettings,
                    hosts: Sequence[str], at: datetime) -> tuple[list[str | None], str]:
    """The matrix's models, else those the canary hosts serve; ([], why) when none is known."""
    if live.models:
        return list(live.models), ""
    query = models_query(fam, hosts=hosts, host_label=live.host_label)
    if query is None:  # one model per server
        return [None], ""
    res = src.instant(query, at)
    assert fam.model_label is not None
    seen = sorted(res.by_label(fam.model_label))
    return list(seen), (res.why_not() or "no model series on the canary hosts")


def _aware(t: datetime | None) -> datetime | None:
    """A time read back from the history (SQLite drops the zone; it is stored in UTC)."""
    return t.replace(tzinfo=UTC) if t is not None and t.tzinfo is None else t


class LiveGate(EngineCore):
    """The live gate step of a wave (see the module doc)."""

    def _live_gate(self, w: WaveRow, rows: list[StepRow], settings: RolloutSettings) -> None:
        live = settings.gates.live
        todo = [r for r in rows if r.state == "done"
                and r.detail.get("live_gate") not in ("pass", "promoted")]
        if not live.enabled or not todo:
            return
        window_s = live.window_s(settings.bake_minutes)
        for r in todo:
            r.detail = {**r.detail, "live_gate": "waiting"}
        self._write(todo, wave=(w.id, {"status": "live"}),
                    events=[self._ev("rollout.live", f"wave {w.index} ({w.pool}): live gate "
                                     f"watches {window_s / 60:g} min of traffic",
                                     wave=w.index, minutes=window_s / 60)],
                    label=f"wave{w.index}:live:begin")
        w.status = "live"
        self._wait_out(w, window_s, "live")
        attempt = 0
        while True:
            attempt += 1
            verdict, reason, detail = self._live_measure(w, todo, live, window_s)
            self.gates.setdefault(w.id, {})["live"] = {
                "verdict": verdict, "reason": reason, "attempt": attempt, **detail}
            self._write([], events=[self._ev(
                "rollout.gate", f"wave {w.index} ({w.pool}): live gate {verdict} "
                                f"(attempt {attempt}): {reason}", wave=w.index, gate="live",
                verdict=verdict, attempt=attempt, reason=reason, **detail)],
                label=f"wave{w.index}:live:attempt{attempt}")
            final = after_retries(verdict, attempt, settings.gates.max_retries)
            if final is not None:
                break
            self._wait_out(w, min(window_s, 60.0), "live")
        if verdict == "error":
            reason = (f"could not measure after {attempt} attempt(s) ({reason}): "
                      "treated as inconclusive")
        for r in todo:
            r.detail = {**r.detail, "live_gate": {"pass": "pass", "fail": "fail"}.get(
                final, "paused")}
        if final == "pass":
            self._write(todo, label=f"wave{w.index}:live:pass")
            return
        if final == "inconclusive":
            self._write(todo, events=[self._ev(
                "rollout.pause", f"wave {w.index} ({w.pool}) live gate inconclusive: {reason}; "
                                 f"paused until `fleet rollout promote {self.rid}` or `abort`",
                wave=w.index, reason=reason, gate="live")],
                wave=(w.id, {"status": "paused", "verdict": "inconclusive"}),
                rollout={"status": "paused", **_UNLOCK}, label=f"wave{w.index}:live:pause")
            w.status, w.verdict = "paused", "inconclusive"
            raise _Stop("paused", f"wave {w.index} ({w.pool}) live gate inconclusive: {reason}")
        self._write(todo, wave=(w.id, {"status": "failed", "verdict": "fail"}),
                    label=f"wave{w.index}:live:fail")
        w.status, w.verdict = "failed", "fail"
        res = self._rollback(w, f"live gate: {reason}")
        raise _Stop(res.status, res.reason)

    def _live_baseline(self, w: WaveRow, canary: Sequence[str]) -> list[str]:
        """The pool's hosts of the canaries' GPU model(s) this rollout has not touched yet
        (planned: still on the release they had, which a started host records as its
        `from_release`)."""
        models = {self.refs[h].gpu_model for h in canary if h in self.refs}
        old = _most_common([self.steps[h].from_release or "" for h in canary
                            if h in self.steps])
        return sorted(r.host for r in self._pool_rows(w.pool)
                      if r.state == "planned" and r.from_release in (None, old)
                      and (r.host not in self.refs or self.refs[r.host].gpu_model in models))

    def _serving_units(self, hosts: Sequence[str]) -> dict[str, Units | str]:
        """Each host's GPUs or MIG instances: from its newest reachable snapshot's facts (what
        the probe saw), else the inventory's `gpu_count`; why not where neither says."""
        facts = {host.name: snap.facts for host, snap in latest_snapshots(
            self.history, hosts=list(hosts), reachable_only=True)}
        return {h: serving_units(self.refs[h].gpu_count if h in self.refs else None,
                                 facts.get(h)) for h in hosts}

    def _live_measure(self, w: WaveRow, rows: Sequence[StepRow], live: LiveGateSettings,
                      window_s: float) -> tuple[GateVerdict, str, dict[str, Any]]:
        src: MetricsSource | None = self.opts.live_source
        canary = sorted(r.host for r in rows)
        baseline = self._live_baseline(w, canary)
        detail: dict[str, Any] = {"canary_hosts": canary, "baseline_hosts": baseline,
                                  "family": live.family, "models": []}
        if src is None:
            return "error", ("could not measure: no Prometheus configured (--prometheus, "
                             "FLEET_PROMETHEUS_URL or inventory data prometheus_url)"), detail
        fam = family(live.family)
        end = self.now()
        start = end - timedelta(seconds=window_s)
        low_confidence = not baseline
        if low_confidence:  # the same hosts over an equal window before the wave started
            b_hosts, b_end = canary, _aware(w.started_at) or start
        else:
            b_hosts, b_end = baseline, end
        b_start = b_end - timedelta(seconds=window_s)
        detail["baseline_source"] = "before-change" if low_confidence else "same-time"
        models, why = models_to_judge(src, fam, live, canary, end)
        if not models:
            return "error", f"could not measure: {why}", detail
        units = self._serving_units(sorted({*canary, *b_hosts}))
        detail["units"] = {h: u if isinstance(u, str) else u.describe()
                           for h, u in units.items()}
        verdicts: list[ModelVerdict] = []
        for model in models:
            c = measure_side(src, fam, live, model, canary, start, end, units)
            b = measure_side(src, fam, live, model, b_hosts, b_start, b_end, units)
            verdicts.append(judge_model(model or fam.name, c, b, live,
                                        errors_exported=fam.errors is not None,
                                        config=self.opts.judge_config))
        verdict, reason = live_verdict(verdicts, low_confidence=low_confidence)
        detail["models"] = [m.as_dict() for m in verdicts]
        detail["low_confidence"] = low_confidence
        return verdict, reason, detail
