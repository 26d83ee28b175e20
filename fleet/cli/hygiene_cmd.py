"""`fleet hygiene run`: the weekly job (drift audit, trends, quarantine, benchmarks, reports).

Exit codes: 0 clean; 1 problems found (a non-conformant or unreachable host, a failing or
quarantine-worthy trend, a tripped circuit breaker, a failed drain, a benchmark regression);
2 bad input; 3 the job itself could not run (history, inventory or backend unusable).
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from fleet.cli.output import console, emit_json, esc, stdout
from fleet.cli.selection import Limit, PoolAlias
from fleet.cli.table import Grid, OutputOpt, show, wants_json
from fleet.errors import BadInput, Problem, ProblemsFound

app = typer.Typer(help="The weekly hygiene job: drift audit, error trends, quarantine, reports.",
                  no_args_is_help=True)

JsonFlag = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]
SCHEDULERS = ("none", "slurm", "kubernetes")


def make_scheduler(name: str, sim: Any = None) -> Any:
    from fleet.schedulers import make_scheduler as make

    if sim is not None:
        return make("sim", fleet=sim)
    if name not in SCHEDULERS:
        raise BadInput.single(f"unknown scheduler {name!r} (expected one of: "
                              f"{', '.join(SCHEDULERS)})", field="--scheduler")
    return make(name)


@app.command()
def run(
    ctx: typer.Context,
    matrix: Annotated[Path, typer.Option("--matrix", "-m", help="Version matrix.",
                                         envvar="FLEET_MATRIX")],
    inventory: Annotated[Path | None, typer.Option(
        "--inventory", "-i", help="pyinfra inventory file.", envvar="FLEET_INVENTORY")] = None,
    limit: Limit = None,
    pool: PoolAlias = None,
    apply_quarantine: Annotated[bool, typer.Option(
        "--apply-quarantine", help="Drain proposed hosts through the scheduler and record the "
        "quarantine (never past the circuit breaker).")] = False,
    scheduler: Annotated[Literal["none", "slurm", "kubernetes"], typer.Option(
        "--scheduler", help="Workload manager to drain through.")
    ] = "none",
    report_dir: Annotated[Path | None, typer.Option(
        "--report-dir", help="Write Markdown, HTML, JSON and the Prometheus textfile here.")
    ] = None,
    prom_file: Annotated[Path | None, typer.Option(
        "--prom-file", help="Prometheus textfile path (node_exporter textfile collector "
        "directory); default REPORT_DIR/fleet_hygiene.prom.")] = None,
    benchmark: Annotated[bool, typer.Option(
        "--benchmark/--no-benchmark", help="Run the small synthetic benchmark per pool.")
    ] = True,
    bench_samples: Annotated[int | None, typer.Option(
        "--bench-samples", help="Benchmark samples per side for each judged check, instead of "
        "the matrix's hygiene.benchmark.samples (default auto: what the judge needs).")
    ] = None,
    diag_level: Annotated[int | None, typer.Option(
        "--diag-level", help="dcgmi diag level 1-4 when the benchmark runs through DCGM, "
        "instead of the matrix's hygiene.dcgm_diag_level (1: seconds; 3: ~15 min per host).")
    ] = None,
    sim: Annotated[int | None, typer.Option(
        "--sim", min=1, help="Run against a simulated fleet of N hosts instead of SSH.")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the simulated fleet.")] = 0,
    via: Annotated[Literal["ssh", "slurm"], typer.Option(
        "--via", help="Probe over ssh, or with one srun on the nodes of --partition (slurm); "
        "benchmarks stay on SSH.")] = "ssh",
    partition: Annotated[str | None, typer.Option(
        "--partition", help="Slurm partition to probe with --via slurm.")] = None,
    prometheus: Annotated[str | None, typer.Option(
        "--prometheus", metavar="URL", help="Prometheus of the serving section (else "
        "FLEET_PROMETHEUS_URL, else the inventory's prometheus_url data).")] = None,
    json_out: JsonFlag = False,
    output: OutputOpt = None,
) -> None:
    """Probe every host, audit drift (fails closed), read error trends, propose (or apply)
    quarantine behind a circuit breaker, benchmark each pool, and write the reports."""
    from fleet.cli.app import settings
    from fleet.domain.matrix.loader import load_matrix
    from fleet.history import open_history
    from fleet.jobs.hygiene import run_hygiene
    from fleet.reports import render_json, write_reports

    limit = [*(limit or []), *(pool or [])] or None  # --pool/-p: an alias of --limit
    if sim is None and inventory is None:
        raise BadInput.single("--inventory is required (or --sim N for a simulated fleet)",
                              field="--inventory")
    if sim is not None and inventory is not None:
        raise BadInput.single("give --inventory or --sim N, not both", field="--inventory/--sim")
    if via not in ("ssh", "slurm") or (via == "slurm") != (partition is not None):
        raise BadInput.single("--via is ssh, or slurm with --partition", field="--via")
    if sim is not None and via != "ssh":
        raise BadInput.single("--via slurm probes the nodes of an inventory, not --sim",
                              field="--via")
    if scheduler not in SCHEDULERS:
        raise BadInput.single(f"unknown scheduler {scheduler!r} (expected one of: "
                              f"{', '.join(SCHEDULERS)})", field="--scheduler")
    _check_bench_options(bench_samples, diag_level)
    if sim is not None and scheduler != "none":
        raise BadInput.single("a simulated fleet drains through its own scheduler; "
                              "--scheduler goes with --inventory", field="--scheduler")
    _check_report_paths(report_dir, prom_file)
    loaded = load_matrix(matrix, today=date.today())
    hosts: list[str] | None = None
    if sim is not None:
        from fleet.sim import SimFleet

        backend: Any = SimFleet.build(loaded.matrix, n_hosts=sim, seed=seed)
        hosts = _selected(limit, backend)
        sched = make_scheduler(scheduler, sim=backend)
    else:
        from fleet.remote.backend import SshBackend
        from fleet.remote.session import patch_gevent

        patch_gevent()
        assert inventory is not None
        if partition is not None:
            from fleet.errors import CouldNotComplete
            from fleet.remote.srun_probe import SlurmInputError, SlurmUnavailable, SrunBackend

            try:
                backend = SrunBackend(inventory, limit=limit, partition=partition)
            except SlurmInputError as exc:
                raise BadInput.single(str(exc), field="--partition") from exc
            except SlurmUnavailable as exc:
                raise CouldNotComplete(str(exc)) from exc
        else:  # the whole inventory: pool sizes and open quarantines count every host of a
            # pool; --limit selects the hosts audited (and the only ones quarantine may drain)
            backend = SshBackend(inventory)
            hosts = _selected(limit, backend)
        sched = make_scheduler(scheduler)
    now = datetime.now(UTC)
    serving = None
    try:
        from fleet.prometheus import PrometheusSource, resolve

        target = resolve(prometheus, [r.data for r in backend.hosts()])
        serving = PrometheusSource(target) if target is not None else None
        with open_history(settings(ctx).db) as history, console.status("hygiene") as status:
            report = run_hygiene(backend, sched, history, loaded.matrix, now=now, hosts=hosts,
                                 apply_quarantine=apply_quarantine, benchmark=benchmark,
                                 bench_samples=bench_samples, dcgm_level=diag_level,
                                 progress=lambda m: status.update(esc(m)), serving=serving,
                                 serving_where=target.shown_url if target else None)
    finally:
        backend.close()
        if serving is not None:
            serving.close()
    data = report.as_dict()
    import json

    data = json.loads(render_json(data))
    if report_dir is not None or prom_file is not None:
        paths = write_reports(data, report_dir or prom_file.parent,  # type: ignore[union-attr]
                              prom_path=prom_file)
        console.print("reports: " + ", ".join(str(p) for p in paths.values()), markup=False)
    if wants_json(json_out, output):
        emit_json(data)
    else:
        _print_human(data, output)
    problems = report.problems()
    if problems:
        raise ProblemsFound(f"{len(problems)} problem(s): " + "; ".join(problems[:5])
                            + (" ..." if len(problems) > 5 else ""))


def _selected(limit: list[str] | None, backend: Any) -> list[str] | None:
    """The names --limit selects (pools, groups or host-name globs), None without one; a value
    that selects nothing is bad input, never silently dropped."""
    if not limit:
        return None
    from fleet.domain.selection import limit_problems, select

    refs = backend.hosts()
    wrong = limit_problems(limit, refs)
    if wrong:
        raise BadInput([Problem(None, None, "--limit", why) for why in wrong])
    return [r.name for r in select(limit, refs)]


def _check_report_paths(report_dir: Path | None, prom_file: Path | None) -> None:
    """Where the reports go is checked before any host is probed: a weekly run that audits the
    whole fleet and then cannot write its report has lost the week's figures."""
    import os

    if report_dir is not None:
        if report_dir.exists() and not report_dir.is_dir():
            raise BadInput.single(f"{report_dir} is not a directory", field="--report-dir")
        try:
            report_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadInput.single(f"cannot create {report_dir}: {exc.strerror}",
                                  field="--report-dir") from None
        if not os.access(report_dir, os.W_OK | os.X_OK):
            raise BadInput.single(f"{report_dir} is not writable", field="--report-dir")
    if prom_file is not None:
        if prom_file.is_dir():
            raise BadInput.single(f"{prom_file} is a directory; name the textfile itself "
                                  "(e.g. DIR/fleet_hygiene.prom)", field="--prom-file")
        if not prom_file.parent.is_dir():
            raise BadInput.single(f"{prom_file.parent} is not a directory", field="--prom-file")


def _check_bench_options(bench_samples: int | None, diag_level: int | None) -> None:
    """Option values checked before anything runs (exit 2, naming the option)."""
    from fleet.domain.matrix.hygiene_settings import DCGM_LEVELS, MAX_SAMPLES

    if diag_level is not None and diag_level not in DCGM_LEVELS:
        raise BadInput.single(f"dcgmi diag levels are 1 to 4, got {diag_level}",
                              field="--diag-level")
    if bench_samples is not None and not 1 <= bench_samples <= MAX_SAMPLES:
        raise BadInput.single(f"expected 1 to {MAX_SAMPLES} samples per side, got "
                              f"{bench_samples}", field="--bench-samples")


def _print_human(data: dict[str, Any], output: str | None = None) -> None:
    s = data["summary"]
    d = s["drift"]
    stdout.print(f"hosts {d['hosts']}: conformant {d['conformant']}, non-conformant "
                  f"{d['non_conformant']} (unreachable {d['unreachable']})")
    bad = [x for x in data["drift"] if not x["conformant"]]
    if bad:
        t = Grid(("host", "pool", "differences"), title="drift", prose=("differences",))
        for x in bad:
            t.add_row(esc(x["host"]), esc(x["pool"] or ""),
                      esc("\n".join(y["text"] for y in x["differences"])))
        show(t, output)
    flagged = data["trends"]["flagged"]
    if flagged:
        t = Grid(("host", "gpu", "severity", "flags"), title="trends", prose=("flags",))
        for g in flagged[:30]:
            t.add_row(esc(g["host"]), str(g["gpu_index"]), esc(g["severity"]),
                      esc("\n".join(f["message"] for f in g["flags"])))
        show(t, output)
    q = data["quarantine"]
    for p in q["proposals"]:
        stdout.print(f"quarantine {p['decision']}: {p['host']} ({p['pool']}): "
                      + "; ".join(p["reasons"]), markup=False)
    for a in q["alerts"]:
        stdout.print(f"[red]ALERT[/red]: {esc(a)}")
    for b in data["benchmarks"]:
        stdout.print(f"benchmark {b['pool']}: {b['verdict']}{_samples_text(b)} {b['reason']}",
                      markup=False)
    sv = data.get("serving") or {}
    if sv.get("status") != "measured":
        stdout.print(f"serving: {sv.get('reason') or 'not run'}", markup=False)
    for p in sv.get("pools", []):
        for m in p["models"]:
            lat = m["latency_ms"]["this_week"]
            stdout.print(f"serving {p['pool']} {m['model']}: " + (
                f"p50 {lat['p50']} p95 {lat['p95']} p99 {lat['p99']} ms"
                if m["status"] == "measured" else m["reason"]), markup=False)


def _samples_text(bench: dict[str, Any]) -> str:
    """` (samples per side: had 1918 this week, 3836 baseline; needed 1917)`, or nothing."""
    s = bench.get("samples")
    if not s:
        return ""
    return (f" (samples per side: had {s['had']} this week, {s['baseline']} baseline; "
            f"needed {s['needed']})")
