"""The weekly serving figures of the hygiene report: PromQL over a week, and what the figures
say (pure; the queries run in `fleet.jobs.hygiene_serving`).

Per pool and model, over the week that ends at the report's time:

- latency and queue time p50/p95/p99 of the pool's hosts: for a histogram family the quantile
  of the week's summed bucket increases (one quantile of every request); for a summary family
  (Triton) the exported quantile averaged over the week and over the hosts (a summary's
  quantiles cannot be combined into the pool's; NaN samples of empty windows left out);
- the same for last week, and for each release the pool's hosts run this week;
- the model load time (the gauge's maximum over the week), the response-cache hit rate, where
  the family exports them;
- per host: its p99 and its week's requests per GPU (per MIG instance where it runs MIG), so
  density jitter shows;
- the p99 of each of the last `WEEKS` weeks (the report's chart).

A regression is a p99 more than `REGRESSION` above last week's, or one release's p99 more than
`REGRESSION` above the pool's other release's; it names the rollouts of the pool that started
within the week (the release change that coincides).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fleet.domain.promql import Family, Signal, check_label, duration, selector, string

WEEK_S = 7 * 24 * 3600.0
WEEKS = 4
QUANTILES = (0.5, 0.95, 0.99)
REGRESSION = 0.20
SUMMARY_STEP_S = 60.0


def _timing(fam: Family, signal: Signal) -> Any:
    return fam.latency if signal == "latency" else fam.queue


def week_quantile(fam: Family, signal: Signal, q: float, *, model: str | None,
                  hosts: Iterable[str], host_label: str, window_s: float = WEEK_S,
                  by_host: bool = False, step_s: float = SUMMARY_STEP_S) -> str:
    """The `q` quantile of `signal` over the window: the pool's (or each host's)."""
    timing = _timing(fam, signal)
    label = check_label(host_label)
    by = f"le, {label}" if by_host else "le"
    if timing.shape == "histogram":
        sel = selector(f"{timing.base}_bucket", host_label=label, hosts=hosts,
                       model_label=fam.model_label, model=model)
        return (f"histogram_quantile({q:g}, sum by ({by}) "
                f"(increase({sel}[{duration(window_s)}])))")
    qtext = re.escape(f"{q:g}") + "0*"
    sel = selector(timing.base, host_label=label, hosts=hosts, model_label=fam.model_label,
                   model=model, extra=f"quantile=~{string(qtext)}")
    group = f" by ({label})" if by_host else ""
    # an empty summary window exports NaN (a server just started): `>= 0` drops those samples
    # (one NaN would make the week's average NaN), over a subquery at SUMMARY_STEP_S
    return (f"avg{group} (avg_over_time(({sel} >= 0)[{duration(window_s)}:"
            f"{duration(step_s)}]))")


def load_query(fam: Family, *, model: str | None, hosts: Iterable[str], host_label: str,
               window_s: float = WEEK_S) -> str | None:
    if fam.load is None:
        return None
    sel = selector(fam.load, host_label=host_label, hosts=hosts, model_label=fam.model_label,
                   model=model)
    return f"max by ({check_label(host_label)}) (max_over_time({sel}[{duration(window_s)}]))"


def cache_queries(fam: Family, *, model: str | None, hosts: Iterable[str], host_label: str,
                  window_s: float = WEEK_S) -> tuple[str, str] | None:
    """(hits, misses) over the window, summed over the hosts, or None where not exported."""
    if fam.cache is None:
        return None
    hosts = list(hosts)
    hits, misses = (selector(m, host_label=host_label, hosts=hosts, model_label=fam.model_label,
                             model=model) for m in fam.cache)
    w = duration(window_s)
    return f"sum(increase({hits}[{w}]))", f"sum(increase({misses}[{w}]))"


def pct(q: float) -> str:
    return f"p{q * 100:g}"


def change(now: float | None, before: float | None) -> float | None:
    """Relative change, None where either side is unmeasured (never 0 for unknown)."""
    if now is None or before is None or before <= 0:
        return None
    return round(now / before - 1.0, 4)


def regression(pool: str, model: str, this_p99: float | None, last_p99: float | None,
               by_release: Mapping[str, float | None],
               rollouts: Sequence[Mapping[str, Any]]) -> str | None:
    """Why this model's p99 regressed in this pool this week (None: it did not, or it could
    not be told), naming the rollouts of the week."""
    why = []
    c = change(this_p99, last_p99)
    if c is not None and c > REGRESSION:
        why.append(f"p99 {this_p99:.1f} ms vs {last_p99:.1f} ms last week ({c:+.0%})")
    known = {r: v for r, v in by_release.items() if v is not None}
    if len(known) >= 2:
        fast = min(known, key=lambda r: known[r])
        slow = max(known, key=lambda r: known[r])
        c = change(known[slow], known[fast])
        if c is not None and c > REGRESSION:
            why.append(f"hosts on {slow}: p99 {known[slow]:.1f} ms vs {known[fast]:.1f} ms on "
                       f"{fast} ({c:+.0%})")
    if not why:
        return None
    coincide = "; ".join(f"rollout {r['id']} to {r['release']} started {r['started_at']}"
                         for r in rollouts)
    return (f"pool {pool} model {model}: " + "; ".join(why)
            + (f"; coincides with {coincide}" if coincide else
               "; no rollout of the pool started this week"))


def moved(weekly: Sequence[float | None], share: float = 0.10) -> bool:
    """Whether a weekly series moved by more than `share` of its smallest value (a chart is
    drawn only then)."""
    known = [v for v in weekly if v is not None]
    if len(known) < 2:
        return False
    lo = min(known)
    return lo <= 0 or max(known) / lo - 1.0 > share
