"""Benchmarks over SSH: the runner and the replay client shipped inline, run on every host.

Like the probe, nothing is installed: `fleet/bench/runner.py` or `fleet/bench/replay.py` travels
in the command line (`fleet.remote.inline`) and runs with the host's python3, so the replay's
latency is measured on the host, not across the controller's network. A replay trace up to
`INLINE_TRACE_BYTES` (compressed) travels inline too; a larger one is uploaded to a temporary
file first and removed afterwards.

`run_benchmarks` is what the SSH backend's `benchmark()` calls; `run_benchmark_docs` keeps each
host's whole JSON document (summary metrics, errors) for the CLI and the history.
"""

from __future__ import annotations

import base64
import io
import json
import math
import uuid
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pyinfra.api import FactBase  # type: ignore[attr-defined]

from fleet.domain.bench_samples import check_samples
from fleet.domain.endpoint import endpoint_problem
from fleet.domain.ports import HostResult, Samples
from fleet.remote.inline import inline_python_command

BENCH_DIR = Path(__file__).resolve().parent.parent / "bench"
RUNNER = BENCH_DIR / "runner.py"
REPLAY = BENCH_DIR / "replay.py"
GPU_UTIL = BENCH_DIR / "gpu_util.py"  # wraps either: NVML utilization sampled during the run
INLINE_TRACE_BYTES = 96 * 1024
SUITES = ("synthetic", "replay")

_SOURCES = ("auto", "command", "dcgm", "cuda")


def _number(params: Mapping[str, Any], key: str, default: float | None, lo: float,
            hi: float) -> float | None:
    v = params.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) \
            or not lo <= v <= hi:
        raise ValueError(f"{key}: expected a number in [{lo:g}, {hi:g}], got {v!r}")
    return float(v)


def synthetic_args(params: Mapping[str, Any]) -> list[str]:
    """Runner arguments from validated params (command, source, repeats, dcgm_level, size)."""
    args: list[str] = []
    source = params.get("source", "auto")
    if source not in _SOURCES:
        raise ValueError(f"source: expected one of {', '.join(_SOURCES)}, got {source!r}")
    args += ["--source", str(source)]
    command = params.get("command")
    if command is not None:
        if not isinstance(command, str) or not command.strip() or "\n" in command:
            raise ValueError("command: expected one line of text")
        args += ["--command", command]  # quoted here, split on the host without a shell
    args += ["--repeats", str(int(_number(params, "repeats", 3, 1, 1000) or 3))]
    args += ["--dcgm-level", str(int(_number(params, "dcgm_level", 1, 1, 4) or 1))]
    args += ["--size", str(int(_number(params, "size", 8192, 256, 65536) or 8192))]
    return args


def replay_args(params: Mapping[str, Any]) -> list[str]:
    """Replay arguments from validated params (endpoint or command, rate_scale, warmup, ...)."""
    args: list[str] = []
    if params.get("command"):
        command = params["command"]
        if not isinstance(command, str) or "\n" in command:
            raise ValueError("command: expected one line of text")
        args += ["--command", command]
    else:
        endpoint = params.get("endpoint", "http://127.0.0.1:8000")
        why = endpoint_problem(endpoint)
        if why:
            raise ValueError(f"endpoint: {why}")
        args += ["--endpoint", endpoint]
    for key, flag, default, lo, hi in (
        ("rate_scale", "--rate-scale", 1.0, 1e-3, 1e3),
        ("warmup", "--warmup", 0.0, 0, 3600),
        ("duration", "--duration", None, 0, 86400),
        ("slo_ms", "--slo-ms", None, 0, 1e7),
        ("timeout", "--timeout", 30.0, 0.01, 3600),
    ):
        v = _number(params, key, default, lo, hi)
        if v is not None:
            args += [flag, repr(v)]
    conns = _number(params, "max_connections", 256, 1, 900)  # replay.SELECT_FD_LIMIT
    if conns is None or conns != int(conns):
        raise ValueError(f"max_connections: expected a whole number, got {conns!r}")
    return [*args, "--max-connections", str(int(conns))]


def sampled(script: Path, args: Sequence[str]) -> str:
    """`script` with `args` run under the GPU utilization sampler (`fleet/bench/gpu_util.py`)."""
    return (inline_python_command(GPU_UTIL, ["--interval", "0.2", "--"]) + " "
            + inline_python_command(script, args))


def trace_payload(trace: bytes) -> str:
    return base64.b64encode(zlib.compress(trace, 9)).decode()


def parse_result(lines: Sequence[str]) -> dict[str, Any]:
    """The last JSON object a runner or replay printed."""
    for line in reversed(lines):
        text = line.strip()
        if text.startswith("{"):
            try:
                doc = json.loads(text)
            except ValueError:
                continue
            if isinstance(doc, dict):
                return doc
    raise ValueError("the benchmark printed no JSON document")


class BenchmarkResult(FactBase[dict[str, Any]]):
    """The JSON document of one benchmark run on the host (the command is built by the caller)."""

    def requires_command(self, command: str) -> str:
        return "python3"

    def command(self, command: str) -> str:
        return command

    @staticmethod
    def default() -> dict[str, Any]:
        return {}

    def process(self, output: list[str]) -> dict[str, Any]:
        return parse_result(output)


def to_samples(host: str, doc: Mapping[str, Any]) -> HostResult[Samples]:
    """A host's document as the judge's samples, or a failed result saying why not."""
    if not doc:
        return HostResult.failed(host, "the benchmark printed nothing")
    errors = "; ".join(str(e) for e in doc.get("errors") or [])
    if doc.get("suite") == "replay":
        if doc.get("error"):
            return HostResult.failed(host, f"replay could not run: {doc['error']}")
        if not doc.get("valid"):
            return HostResult.failed(host, f"invalid replay: {doc.get('invalid_reason')}")
    else:
        verdict = doc.get("verdict")
        if verdict == "could not measure":
            return HostResult.failed(host, f"could not measure: {errors or 'no source'}")
        if verdict == "fail":
            return HostResult.failed(host, f"benchmark failed: {errors}")
    samples = doc.get("samples") or {}
    if not isinstance(samples, dict):
        return HostResult.failed(host, "could not measure: samples are not an object")
    lists = {str(k): vs for k, vs in samples.items() if isinstance(vs, list)}
    nonsense = check_samples(lists)  # never judge a negative latency or throughput, or a NaN
    if nonsense:
        return HostResult.failed(host, "could not measure: samples that make no physical "
                                       "sense: " + "; ".join(nonsense[:5]))
    clean: Samples = {k: [float(v) for v in vs] for k, vs in lists.items()}
    return HostResult(host, clean)


Doc = dict[str, Any]

BENCH_TIMEOUT_S = 3600.0
"""Deadline of one benchmark run on one host (a replay of a long trace takes minutes); past it
the host's result is a timeout, the others' are kept."""


def run_benchmark_docs(conn: Any, hosts: Sequence[str] | None, suite: str,
                       params: Mapping[str, Any] | None = None) -> dict[str, HostResult[Doc]]:
    """Run `suite` on `hosts` (default: every host of the connection) in parallel.

    For "replay", `params` holds `trace` (bytes of the JSON-lines trace) and the replay options.
    ValueError on bad params, before anything runs.
    """
    from fleet.remote.session import Connected, gather

    params = dict(params or {})
    if suite not in SUITES:
        raise ValueError(f"suite: expected one of {', '.join(SUITES)}, got {suite!r}")
    upload: tuple[bytes, str] | None = None
    if suite == "synthetic":
        command = sampled(RUNNER, synthetic_args(params)) + " || true"
    else:
        trace = params.get("trace")
        if not isinstance(trace, bytes | bytearray) or not trace.strip():
            raise ValueError("trace: the replay suite needs a non-empty trace")
        payload = trace_payload(bytes(trace))
        if len(payload) <= INLINE_TRACE_BYTES:
            args = ["--trace-data", payload, *replay_args(params)]
            command = sampled(REPLAY, args) + " || true"
        else:
            remote = f"/tmp/fleet-trace-{uuid.uuid4().hex}.jsonl"
            upload = (bytes(trace), remote)
            command = (sampled(REPLAY, ["--trace", remote, *replay_args(params)])
                       + f" || true; rm -f {remote}")

    wanted = set(hosts) if hosts is not None else None
    results: dict[str, HostResult[Doc]] = {}
    for name, why in conn.unreachable.items():
        if wanted is None or name in wanted:
            results[name] = HostResult.unreachable(name, why)
    if upload is not None:
        for h in conn.active:
            if wanted is not None and h.name not in wanted:
                continue
            try:
                if not h.put_file(io.BytesIO(upload[0]), upload[1]):
                    results[h.name] = HostResult.failed(h.name, "could not upload the trace")
            except Exception as exc:
                results[h.name] = HostResult.failed(h.name, f"could not upload the trace: {exc}")

    subset = Connected(conn.state, [h for h in conn.active if h.name not in results
                                    and (wanted is None or h.name in wanted)], {})
    got = gather(subset, BenchmarkResult, timeout=BENCH_TIMEOUT_S, command=command)
    for name, value in got.items():
        if isinstance(value, Exception):
            results[name] = HostResult.failed(name, f"{type(value).__name__}: {value}")
        elif not value:
            results[name] = HostResult.failed(name, "the benchmark printed no JSON document")
        else:
            results[name] = HostResult(name, value)
    return results


def run_benchmarks(conn: Any, hosts: Sequence[str] | None, suite: str,
                   params: Mapping[str, Any] | None = None) -> dict[str, HostResult[Samples]]:
    """The Backend's `benchmark()`: samples per host, or why a host has none."""
    out: dict[str, HostResult[Samples]] = {}
    for name, res in run_benchmark_docs(conn, hosts, suite, params).items():
        if not res.ok or res.value is None:
            out[name] = HostResult(name, None, ok=False, reachable=res.reachable,
                                   error=res.error)
        else:
            out[name] = to_samples(name, res.value)
    return out
