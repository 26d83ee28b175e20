"""`fleet bench run|compare|trace-from-log`: benchmarks on hosts, and the canary judge.

Exit codes of `fleet bench compare` (the judge's verdict, for scripts and CI):

    0  pass          the canary is within every allowance
    1  fail          a critical metric is worse than allowed, or has no data: roll back
    3  inconclusive  the judge could not decide (too few samples, a noisy or straddling
                     interval, a non-critical failure): pause for a human, never a success
    3  nodata        nothing could be judged
    2  bad input     unreadable files, malformed --metric flags
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Annotated, Any, Literal

import typer

from fleet.cli.output import console, emit_json, esc, stdout
from fleet.cli.selection import Limit
from fleet.cli.table import Grid, OutputOpt, show, wants_json
from fleet.errors import BadInput, CouldNotComplete, Problem, ProblemsFound

app = typer.Typer(help="Benchmarks (synthetic and trace replay) and the canary judge.",
                  no_args_is_help=True)

JsonFlag = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]
_STYLE = {"pass": "green", "fail": "red", "inconclusive": "yellow", "nodata": "magenta"}


def load_samples(path: Path) -> dict[str, list[float]]:
    """A JSON object mapping metric name to a list of numbers that make physical sense (no
    negative or zero latency, no negative throughput, nothing non-finite: see
    fleet.domain.bench_samples); every problem reported with its line and JSON path."""
    from fleet.domain.bench_samples import read_samples

    if not path.is_file():
        raise BadInput.single("no such file", file=str(path))
    from fleet.domain.utf8 import decode_utf8

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadInput.single(f"cannot read: {exc.strerror or exc}", file=str(path)) from None
    text = decode_utf8(data, str(path))
    samples, problems = read_samples(text, str(path))
    if problems:
        raise BadInput(problems)
    return samples


def compare(
    canary: Annotated[Path, typer.Option("--canary", help="Canary samples (JSON object).")],
    baseline: Annotated[Path, typer.Option("--baseline", help="Baseline samples (JSON).")],
    metric: Annotated[list[str] | None, typer.Option(
        "--metric", metavar="SPEC",
        help="NAME:lower|higher[:ALLOWANCE%][:noncritical][:notails]; repeatable. "
        "Metrics without one get defaults by name.")] = None,
    only: Annotated[bool, typer.Option(
        "--only", help="Judge only the metrics named by --metric.")] = False,
    history_baseline: Annotated[bool, typer.Option(
        "--history-baseline", help="The baseline comes from history, not the same time: "
        "flag the verdict lower confidence.")] = False,
    confidence: Annotated[float, typer.Option(min=0.5, max=0.999)] = 0.95,
    seed: Annotated[int, typer.Option(help="Bootstrap seed (same inputs, same verdict).")] = 0,
    json_out: JsonFlag = False,
    output: OutputOpt = None,
) -> None:
    """Judge canary samples against baseline samples, metric by metric.

    Non-inferiority on a confidence interval: pass when the canary is provably no worse than the
    allowance, fail when provably worse, inconclusive otherwise. Exit 0 pass, 1 fail, 3
    inconclusive or nodata (never a success), 2 bad input.
    """
    from fleet.domain.judge import JudgeConfig, judge, parse_metric_flag

    problems, specs = [], []
    for i, text in enumerate(metric or []):
        try:
            specs.append(parse_metric_flag(text))
        except ValueError as exc:
            problems.append(Problem(None, None, f"--metric[{i}]", str(exc)))
    if problems:
        raise BadInput(problems)
    c, b = load_samples(canary), load_samples(baseline)
    result = judge(c, b, specs, baseline_source="history" if history_baseline else "same-time",
                   config=JudgeConfig(confidence=confidence, seed=seed), only_specified=only)
    if wants_json(json_out, output):
        emit_json(result.as_dict())
    else:
        t = Grid(("metric", "verdict", "crit", "reason"), prose=("reason",))
        for m in result.metrics:
            t.add_row(esc(m.metric), f"[{_STYLE[m.verdict]}]{m.verdict}[/]",
                      "yes" if m.critical else "no", esc(m.reason.split(": ", 2)[-1]))
        show(t, output)
        stdout.print(f"[{_STYLE[result.verdict]}]{result.verdict}[/]: {esc(result.reason)}",
                      soft_wrap=True)
    if result.verdict == "fail":
        raise ProblemsFound("the canary fails the judge")
    if result.verdict in ("inconclusive", "nodata"):
        raise CouldNotComplete(f"the judge could not decide: {result.verdict}")


def run(
    ctx: typer.Context,
    inventory: Annotated[Path, typer.Option("--inventory", "-i", help="pyinfra inventory file.",
                                            envvar="FLEET_INVENTORY")],
    suite: Annotated[str, typer.Option(metavar="synthetic|replay", help="The benchmark suite.")
                     ] = "synthetic",
    limit: Limit = None,
    trace: Annotated[Path | None, typer.Option(help="Replay trace (JSON lines).")] = None,
    command: Annotated[str | None, typer.Option(
        help="synthetic: the benchmark command printing JSON metrics (e.g. fleet-lab-bench); "
        "replay: a per-request command instead of an endpoint.")] = None,
    source: Annotated[str, typer.Option(metavar="auto|command|dcgm|cuda",
                                        help="synthetic: how to measure.")] = "auto",
    repeats: Annotated[int, typer.Option(min=1, max=1000)] = 3,
    endpoint: Annotated[str, typer.Option(help="replay: the endpoint on the host.")] =
        "http://127.0.0.1:8000",
    rate_scale: Annotated[float, typer.Option(help="replay: 2.0 replays twice as fast.")] = 1.0,
    warmup: Annotated[float, typer.Option(help="replay: seconds sent but not measured.")] = 0.0,
    slo_ms: Annotated[float | None, typer.Option(help="replay: latency SLO for goodput.")] = None,
    timeout: Annotated[float, typer.Option(
        min=0.01, max=3600, help="replay: seconds a request may take (then it is an error).")
    ] = 30.0,
    max_connections: Annotated[int, typer.Option(
        min=1, max=900, help="replay: requests in flight at most (raise it when the client "
        "reports connection waits: its schedule error is then the server's backlog).")] = 256,
    name: Annotated[str | None, typer.Option(help="Name recorded with the runs.")] = None,
    release: Annotated[str | None, typer.Option(help="Release recorded with the runs.")] = None,
    out: Annotated[Path | None, typer.Option(
        "--samples-out", help="Also write the pooled samples (a `compare` input) here.")] = None,
    json_out: JsonFlag = False,
    output: OutputOpt = None,
) -> None:
    """Run a benchmark suite on hosts over SSH, in parallel, and record the runs in the history.

    The runner and the replay client are shipped inline and run with the host's python3. Exit 3
    when a host is unreachable or could not measure (the others are still recorded).
    """
    from fleet.cli.app import settings
    from fleet.history import open_history
    from fleet.jobs.bench import bench_inventory
    from fleet.remote.session import patch_gevent

    _check_run_options(suite=suite, source=source, command=command, rate_scale=rate_scale,
                       warmup=warmup, slo_ms=slo_ms, endpoint=endpoint)
    params: dict[str, Any]
    if suite == "synthetic":
        params = {"source": source, "repeats": repeats}
        if command:
            params["command"] = command
    elif suite == "replay":
        if trace is None:
            raise BadInput.single("the replay suite needs --trace FILE", field="--trace")
        data = _read_trace(trace)
        params = {"trace": data, "endpoint": endpoint, "rate_scale": rate_scale,
                  "warmup": warmup, "slo_ms": slo_ms, "timeout": timeout,
                  "max_connections": max_connections}
        if command:
            params["command"] = command
    else:
        raise BadInput.single("expected synthetic or replay", field="--suite")
    patch_gevent()
    try:
        with open_history(settings(ctx).db) as history, console.status(f"running {suite}"):
            results = bench_inventory(inventory, limit, history, suite, params,
                                      now=lambda: datetime.now(UTC), name=name, release=release)
    except ValueError as exc:
        raise BadInput.single(str(exc)) from None
    pooled: dict[str, list[float]] = {}
    for r in results:
        for k, v in r.samples.items():
            pooled.setdefault(k, []).extend(v)
    if out is not None:
        out.write_text(json.dumps(pooled, sort_keys=True) + "\n")
    if wants_json(json_out, output):
        emit_json({"suite": suite, "hosts": [r.as_dict() for r in results]})
    else:
        t = Grid(("host", "pool", "ok", "summary"), prose=("ok", "summary"))
        for r in results:
            summary = ", ".join(f"{k}={_short(v)}" for k, v in list(r.summary.items())[:8])
            t.add_row(esc(r.host), esc(r.pool or ""),
                      "yes" if r.ok else f"[red]no[/]: {esc(r.error)}", esc(summary))
        show(t, output)
    failed = [r.host for r in results if not r.ok]
    if failed:
        raise CouldNotComplete(f"no usable benchmark from {len(failed)} host(s): "
                               + ", ".join(failed))


SOURCES = ("auto", "command", "dcgm", "cuda")


def _check_run_options(*, suite: str, source: str, command: str | None, rate_scale: float,
                       warmup: float, slo_ms: float | None,
                       endpoint: str = "http://127.0.0.1:8000") -> None:
    """Every option value of `bench run`, before any host is reached (each one named)."""
    from fleet.domain.endpoint import endpoint_problem

    problems = []
    why = endpoint_problem(endpoint) if suite == "replay" and not command else None
    if why:
        problems.append(Problem(None, None, "--endpoint", why))
    if suite not in ("synthetic", "replay"):
        problems.append(Problem(None, None, "--suite", f"expected synthetic or replay, got "
                                                       f"{suite!r}"))
    if source not in SOURCES:
        problems.append(Problem(None, None, "--source", f"expected one of {', '.join(SOURCES)}, "
                                                        f"got {source!r}"))
    elif source == "command" and not command:
        problems.append(Problem(None, None, "--source", "--source command needs --command"))
    if not (math.isfinite(rate_scale) and rate_scale > 0):
        problems.append(Problem(None, None, "--rate-scale",
                                f"expected a finite number above 0 (2.0 replays twice as fast), "
                                f"got {rate_scale}"))
    if not (math.isfinite(warmup) and warmup >= 0):
        problems.append(Problem(None, None, "--warmup",
                                f"expected a finite number of seconds, 0 or more, got {warmup}"))
    if slo_ms is not None and not (math.isfinite(slo_ms) and slo_ms > 0):
        problems.append(Problem(None, None, "--slo-ms",
                                f"expected a finite latency above 0 ms, got {slo_ms}"))
    if problems:
        raise BadInput(problems)


def _short(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _read_trace(path: Path) -> bytes:
    """The trace's bytes, after checking every line here (one message per bad line)."""
    from fleet.bench.replay import TraceError, parse_trace

    if not path.is_file():
        raise BadInput.single("no such file", file=str(path))
    from fleet.domain.utf8 import decode_utf8

    data = path.read_bytes()
    text = decode_utf8(data, str(path))  # never replaced: the replay would send what it made up
    try:
        reqs = parse_trace(text.splitlines(), str(path), str(path.parent))
    except TraceError as exc:
        raise BadInput([Problem(str(path), line, field, msg)
                        for line, field, msg in exc.problems]) from None
    if not reqs:
        raise BadInput.single("the trace has no requests", file=str(path))
    if any("body_file" in line for line in text.splitlines()):
        raise BadInput.single("body_file references are resolved on the controller only; "
                              "inline the bodies (fleet bench trace-from-log does)",
                              file=str(path))
    return data


def trace_from_log(
    log: Annotated[Path, typer.Argument(help="An nginx access log or a JSON-lines log.")],
    fmt: Annotated[Literal["auto", "nginx", "jsonl"], typer.Option(
        "--format", help="The log's format (auto: found from its lines).")] = "auto",
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Trace file to write (default: stdout).")] = None,
    expect_size: Annotated[bool, typer.Option(
        help="Keep each response's size as expect_bytes (a size mismatch is an error).")] = False,
    only_ok: Annotated[bool, typer.Option(help="Drop requests that failed (status >= 400).")]
        = False,
    skip_bad: Annotated[bool, typer.Option(
        help="Skip unreadable lines (counted) instead of refusing the log.")] = False,
    json_out: Annotated[bool, typer.Option(
        "--json", help="A summary on stdout (needs --output: the trace goes to the file).")
    ] = False,
) -> None:
    """Convert an access log into a replay trace (JSON lines, arrival offsets in seconds)."""
    from fleet.domain.tracelog import MAX_PROBLEMS, TraceBuilder

    if fmt not in ("auto", "nginx", "jsonl"):
        raise BadInput.single("expected auto, nginx or jsonl", field="--format")
    if json_out and output is None:
        raise BadInput.single("with --json stdout holds the summary: write the trace to a file "
                              "with --output FILE", field="--output")
    if not log.is_file():
        raise BadInput.single("no such file", file=str(log))
    with log.open("rb") as f, tempfile.TemporaryFile() as spool, \
            tempfile.TemporaryFile() as runs:
        trace = TraceBuilder(fmt=fmt, source=str(log), expect_size=expect_size,
                             only_ok=only_ok, store=_FileStore(spool), runs=_FileStore(runs))
        _read_log_lines(f, trace)
        problems, bad = trace.problems, trace.bad
        if problems and not skip_bad:
            shown = list(problems)
            if bad > len(shown):
                shown.append(Problem(str(log), None, None,
                                     f"... and {bad - len(shown)} more bad line(s)"))
            raise BadInput(shown)
        if not len(trace):
            raise BadInput.single("no requests in the log", file=str(log))
        with (contextlib.nullcontext(sys.stdout) if output is None
              else output.open("w", encoding="utf-8")) as out:
            out.writelines(trace.lines())
    requests, span = len(trace), trace.span
    if json_out:
        emit_json({"log": str(log), "output": str(output), "requests": requests,
                   "span_s": span, "skipped": bad,
                   "skipped_lines": [p.as_dict() for p in problems[:MAX_PROBLEMS]]})
        return
    console.print(f"{requests} requests over {span:.1f} s "
                  f"({requests / span if span else float('nan'):.1f}/s)"
                  + (f", {bad} unreadable line(s) skipped" if bad else ""),
                  markup=False)


class _FileStore:
    """A TraceBuilder's entries (or its sorted runs) in a temporary file: memory holds at most
    `tracelog.SPILL_EVERY` requests' 24 bytes, whatever the log's size."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f = f

    def append(self, data: bytes) -> None:
        self.f.write(data)

    def read(self, offset: int, length: int) -> bytes:
        self.f.flush()
        return os.pread(self.f.fileno(), length, offset)


def _read_log_lines(f: IO[bytes], trace: Any) -> None:
    """Every line of an access log into `trace`, one at a time, each decoded strictly: a line
    that is not UTF-8 is a bad line at its line and column (never replaced: the replay would
    send what the replacement made up)."""
    from fleet.domain.utf8 import not_utf8_problem
    from fleet.line_reader import bounded_lines

    for no, raw in enumerate(bounded_lines(f, TRACE_LINE_LIMIT), 1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            trace.problem(not_utf8_problem(exc, trace.source, line_offset=no - 1))
            continue
        trace.add(no, text)


TRACE_LINE_LIMIT = 16 * 1024 * 1024
"""Bytes of one access-log line read: a JSON-lines log may carry a request body (an image,
a long prompt); a longer line is cut, so it reads as a bad line (not JSON), never as memory."""


app.command("run")(run)
app.command("compare")(compare)
app.command("trace-from-log")(trace_from_log)
