"""PromQL for the serving metrics of inference servers, per metric family (pure).

Each family names what its server exports (`reference/node-state-anchors.md`, "Serving
metrics"):

    triton  quantiles only as summaries, exported with `--metrics-config summary_latencies=true`
            (`nv_inference_request_summary_us{quantile=...}`, `nv_inference_queue_summary_us`);
            requests and errors from `nv_inference_request_success` / `_failure`; label `model`
    vllm    histograms `vllm:e2e_request_latency_seconds`, `vllm:request_queue_time_seconds`;
            requests from the latency histogram's `_count`; no error counter; label `model_name`
    tgi     histograms `tgi_request_duration`, `tgi_request_queue_duration`; requests
            `tgi_request_count`, errors `tgi_request_failure`; one model per server, no label

A histogram's quantile is `histogram_quantile` over the per-host sum of its bucket rates; a
summary's is read as exported (quantiles of different hosts cannot be combined, so every value
stays per host). Every query keeps the host label (`host_label`, `instance` by default) so the
caller can tell canary from baseline hosts. Values are converted to milliseconds by the caller
with `Family.to_ms`. No I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

FamilyName = Literal["triton", "vllm", "tgi"]
Signal = Literal["latency", "queue"]
Counter = Literal["requests", "errors"]
FAMILIES: tuple[FamilyName, ...] = ("triton", "vllm", "tgi")

_LABEL_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Timing:
    """Where one timing signal lives: a histogram (`base` + `_bucket`) or a summary (`base`
    with a `quantile` label), and the unit its values are in."""

    shape: Literal["histogram", "summary"]
    base: str
    unit: Literal["s", "us"]


@dataclass(frozen=True)
class Family:
    name: FamilyName
    model_label: str | None  # None: one model per server (TGI)
    latency: Timing
    queue: Timing
    requests: tuple[str, ...]  # counters whose sum is the number of requests
    errors: str | None  # the failed-request counter, None where the server exports none
    load: str | None = None  # the model load time gauge (seconds), where exported
    cache: tuple[str, str] | None = None  # response-cache hit and miss counters, where exported

    def to_ms(self, signal: Signal, value: float) -> float:
        unit = (self.latency if signal == "latency" else self.queue).unit
        return value * 1000.0 if unit == "s" else value / 1000.0


FAMILY: dict[FamilyName, Family] = {
    "triton": Family("triton", "model",
                     Timing("summary", "nv_inference_request_summary_us", "us"),
                     Timing("summary", "nv_inference_queue_summary_us", "us"),
                     ("nv_inference_request_success", "nv_inference_request_failure"),
                     "nv_inference_request_failure", "nv_model_load_duration_secs",
                     ("nv_cache_num_hits_per_model", "nv_cache_num_misses_per_model")),
    "vllm": Family("vllm", "model_name",
                   Timing("histogram", "vllm:e2e_request_latency_seconds", "s"),
                   Timing("histogram", "vllm:request_queue_time_seconds", "s"),
                   ("vllm:e2e_request_latency_seconds_count",), None),
    "tgi": Family("tgi", None,
                  Timing("histogram", "tgi_request_duration", "s"),
                  Timing("histogram", "tgi_request_queue_duration", "s"),
                  ("tgi_request_count",), "tgi_request_failure"),
}


def family(name: str) -> Family:
    if name not in FAMILY:
        raise ValueError(f"unknown metric family {name!r} (known: {', '.join(FAMILIES)})")
    return FAMILY[name]


def string(value: str) -> str:
    """A PromQL string literal (Go's escapes, which JSON's are a subset of)."""
    return json.dumps(value)


def check_label(name: str) -> str:
    if not _LABEL_RE.match(name):
        raise ValueError(f"{name!r} is not a Prometheus label name")
    return name


def host_regex(hosts: Iterable[str]) -> str:
    """An RE2 pattern matching each host's name alone or as `name:port` (the `instance` label
    of a scrape target is `host:port`). Prometheus anchors label regexes at both ends."""
    names = sorted(set(hosts))
    if not names:
        raise ValueError("no hosts to select")
    alternatives = "|".join(re.escape(h) for h in names)
    return f"({alternatives})(:[0-9]+)?"


def selector(metric: str, *, host_label: str, hosts: Iterable[str], model_label: str | None,
             model: str | None, extra: str = "") -> str:
    """`metric{host_label=~"...", model="...", extra}`."""
    matchers = [f"{check_label(host_label)}=~{string(host_regex(hosts))}"]
    if model_label is not None and model is not None:
        matchers.append(f"{check_label(model_label)}={string(model)}")
    if extra:
        matchers.append(extra)
    return f"{metric}{{{','.join(matchers)}}}"


def duration(seconds: float) -> str:
    """A PromQL range duration in whole seconds (at least 1 s)."""
    return f"{max(1, round(seconds))}s"


def quantile_query(fam: Family, signal: Signal, q: float, *, model: str | None,
                   hosts: Iterable[str], host_label: str, rate_window_s: float) -> str:
    """The `q` quantile of `signal` per host: over `rate_window_s` for a histogram, as the
    server exported it for a summary (its own sliding window)."""
    if not 0 < q < 1:
        raise ValueError(f"quantile {q} not in (0, 1)")
    timing = fam.latency if signal == "latency" else fam.queue
    label = check_label(host_label)
    if timing.shape == "histogram":
        sel = selector(f"{timing.base}_bucket", host_label=label, hosts=hosts,
                       model_label=fam.model_label, model=model)
        return (f"histogram_quantile({q:g}, sum by (le, {label}) "
                f"(rate({sel}[{duration(rate_window_s)}])))")
    # a summary's quantile label is written by the client library ("0.99", "0.990000"):
    # match the value with any trailing zeros
    qtext = re.escape(f"{q:g}") + "0*"
    sel = selector(timing.base, host_label=label, hosts=hosts, model_label=fam.model_label,
                   model=model, extra=f"quantile=~{string(qtext)}")
    return f"max by ({label}) ({sel})"


def count_query(fam: Family, counter: Counter, *, model: str | None, hosts: Iterable[str],
                host_label: str, window_s: float) -> str | None:
    """How many requests (or failed ones) each host served in the window, or None where the
    family exports no such counter."""
    names = fam.requests if counter == "requests" else ((fam.errors,) if fam.errors else ())
    return _per_host_sum(fam, names, "increase", model=model, hosts=hosts,
                         host_label=host_label, window_s=window_s)


def rate_query(fam: Family, *, model: str | None, hosts: Iterable[str], host_label: str,
               rate_window_s: float) -> str:
    """Requests per second each host served (every request, as `count_query` counts them),
    over `rate_window_s` at each step of a range query: the throughput before it is divided by
    the host's GPUs."""
    query = _per_host_sum(fam, fam.requests, "rate", model=model, hosts=hosts,
                          host_label=host_label, window_s=rate_window_s)
    assert query is not None  # every family names its request counters
    return query


def _per_host_sum(fam: Family, names: tuple[str, ...], fn: Literal["increase", "rate"], *,
                  model: str | None, hosts: Iterable[str], host_label: str,
                  window_s: float) -> str | None:
    if not names:
        return None
    label = check_label(host_label)
    hosts = list(hosts)
    sels = [selector(n, host_label=label, hosts=hosts, model_label=fam.model_label, model=model)
            for n in names]
    sums = [f"sum by ({label}) ({fn}({sel}[{duration(window_s)}]))" for sel in sels]
    if len(sums) == 1:
        return sums[0]
    # one sum per counter, added; `or` keeps a host lacking one of them. Not one selector over
    # both names: increase() drops the name, and a success and a failure series with the same
    # labels (Triton before the failure counter's `reason` label) are then one label set twice,
    # which Prometheus refuses ("vector cannot contain metrics with the same labelset")
    return " or ".join([" + ".join(sums), *sums])


def models_query(fam: Family, *, hosts: Iterable[str], host_label: str) -> str | None:
    """The models the hosts serve (one series per model), or None for a one-model family."""
    if fam.model_label is None:
        return None
    timing = fam.latency
    base = f"{timing.base}_count" if timing.shape == "histogram" else fam.requests[0]
    sel = selector(base, host_label=host_label, hosts=hosts, model_label=None, model=None)
    return f"count by ({check_label(fam.model_label)}) ({sel})"
