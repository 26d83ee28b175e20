"""`fleet facts ...`: read host facts from captures (nvidia-smi XML/text/CSV, probe JSON)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fleet.cli.output import emit_json, esc, stdout
from fleet.cli.table import Grid, show
from fleet.errors import BadInput, Problem, ProblemsFound

if TYPE_CHECKING:  # pydantic models: imported by the commands that parse a capture
    from fleet.domain.checks import Finding
    from fleet.domain.facts import HostFacts

app = typer.Typer(
    help="Host facts from captures: nvidia-smi -q -x / -q / --query-gpu, probe JSON.",
    no_args_is_help=True,
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]

# keyed by the severities' values (Severity is a StrEnum) so that help needs no domain import
_STYLE = {"fail": "red", "warn": "yellow", "ok": "green"}


def print_findings(findings: list[Finding]) -> None:
    if not findings:
        stdout.print("[green]no findings[/green]")
        return
    for f in findings:
        style = _STYLE[f.severity]
        gpu = f" {esc(f'[{f.gpu}]')}" if f.gpu else ""
        stdout.print(
            f"[{style}]{f.severity.value:4}[/{style}] {esc(f.check)}{gpu}: {esc(f.message)} "
            f"[dim](remediation: {esc(f.remediation)})[/dim]",
            soft_wrap=True,
        )


def print_facts(facts: HostFacts) -> None:
    v = facts.versions
    stdout.print(
        f"[bold]{esc(facts.input_file or facts.identity and facts.identity.hostname)}[/bold] "
        f"source={facts.source} driver={esc(v.driver_library or v.driver_kernel_module)} "
        f"cuda={esc(v.cuda_driver_api)} gpus={len(facts.gpus)}"
    )
    t = Grid(("idx", "name", "pci", "pcie", "temp", "power", "ecc unc (vol/agg)", "remap",
              "mig", "pm"))
    for g in facts.gpus:
        remap = (
            "-"
            if g.remapped_rows_pending is None
            else (
                "FAILED"
                if g.remapped_rows_failure
                else "pending"
                if g.remapped_rows_pending
                else "ok"
            )
        )
        t.add_row(
            str(g.index),
            esc(g.name or "?"),
            esc(g.pci_bus_id or "?"),
            f"gen{g.pcie_gen_current}/{g.pcie_gen_max} x{g.pcie_width_current}",
            f"{g.temperature_c}C",
            f"{g.power_draw_w}/{g.power_limit_w}W",
            f"{g.ecc_volatile_uncorrected}/{g.ecc_aggregate_uncorrected}",
            remap,
            str(g.mig_mode_current),
            str(g.persistence_mode),
        )
    show(t)


@app.command("parse")
def parse(
    files: Annotated[list[Path], typer.Argument(help="Capture files; the format is detected.")],
    json_out: JsonFlag = False,
) -> None:
    """Parse captures into host facts and run the health checks on each.

    Exit 1 when any check fails, 2 when a file is unreadable or of unknown format.
    """
    from fleet.domain.checks import Severity, run_checks, worst
    from fleet.facts import facts_from_file

    results = []
    problems = []
    for path in files:
        try:
            facts = facts_from_file(path)
        except BadInput as exc:
            problems.extend(exc.problems)
            continue
        results.append((facts, run_checks(facts)))
    if problems:
        raise BadInput(problems)
    if json_out:
        emit_json({"files": [
            {
                "file": f.input_file,
                "facts": f.to_json_dict(),
                "findings": [x.model_dump(mode="json") for x in fs],
            }
            for f, fs in results
        ]})
    else:
        for facts, findings in results:
            print_facts(facts)
            print_findings(findings)
    failed = [f.input_file for f, fs in results if worst(fs) is Severity.FAIL]
    if failed:
        raise ProblemsFound(f"failing checks in {', '.join(str(x) for x in failed)}")


def record_name(path: Path, claimed: str | None, host: str | None,
                force: bool) -> str | Problem:
    """The host name a capture is recorded under, or the problem with it.

    `--host` when given, else the hostname the capture names, else the file's stem; whichever
    it is must be a host name of the inventory's grammar (`fleet.domain.names`). A capture that
    names another host than `--host` is refused unless `--force`: a bundle of gpu-99 must not
    become gpu-01's latest facts by a slip of the command line."""
    from fleet.domain.names import name_problem, same_host

    if host is not None:
        if claimed is not None and not same_host(claimed, host) and not force:
            return Problem(str(path), None, "--host",
                           f"the capture is of host {claimed!r}, not {host!r}: give --host "
                           f"for the host it is of, or --force to record it under {host!r} "
                           "anyway")
        problem = name_problem("host", host)
        return Problem(None, None, "--host", f"refusing {problem}") if problem else host
    name, field = (claimed, "identity.hostname") if claimed is not None else (path.stem, None)
    problem = name_problem("host", name)
    if problem:
        how = ("give --host NAME to record it under a valid name" if claimed is not None
               else "rename the file or give --host NAME")
        return Problem(str(path), None, field, f"refusing {problem}: {how}")
    return name


FUTURE_SLACK = dt.timedelta(minutes=15)
"""A capture may say it was taken this far after the import (clocks drift), no further."""


def capture_taken_at(path: Path, facts: HostFacts, given: str | None,
                     now: dt.datetime) -> dt.datetime | Problem:
    """When the capture was taken: `--taken-at`, else the capture's own time. Never the import
    time: a month-old bundle recorded now would land after last week's probe, and its older
    counters would read as a reset (issue 31, defect 9)."""
    from fleet.facts.capture_time import capture_time, parse_time

    if given is not None:
        when = parse_time(given)
        if when is None:
            return Problem(None, None, "--taken-at",
                           f"not a time: {given!r} (ISO 8601, e.g. 2026-11-30T08:00:00+01:00)")
    else:
        when = facts.collected_at.astimezone(dt.UTC) if (
            facts.collected_at is not None and facts.collected_at.tzinfo is not None) else None
        if when is None:
            try:
                when = capture_time(path.read_text(encoding="utf-8", errors="replace"))
            except OSError as exc:
                return Problem(str(path), None, None, f"cannot read: {exc.strerror or exc}")
        if when is None:
            return Problem(str(path), None, "timestamp",
                           "the capture does not say when it was taken: give --taken-at")
    if when > now + FUTURE_SLACK:
        return Problem(str(path), None, "--taken-at" if given else "timestamp",
                       f"taken at {when.isoformat()}, after now: nvidia-smi prints the host's "
                       "local time, read as UTC; give --taken-at with the host's offset")
    return when


@app.command("import")
def import_(
    ctx: typer.Context,
    files: Annotated[list[Path], typer.Argument(help="Capture files; the format is detected.")],
    host: Annotated[
        str | None,
        typer.Option("--host", help="Host name to record under (default: the capture's "
                     "hostname, else the file name without extension). One file only."),
    ] = None,
    pool: Annotated[str | None, typer.Option("--pool", "-p", help="Pool of the host.")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Record under --host a capture that names another host.")] = False,
    taken_at: Annotated[str | None, typer.Option(
        "--taken-at", help="When the capture was taken (ISO 8601; default: the time the "
        "capture names, read as UTC when it names no zone).")] = None,
    json_out: JsonFlag = False,
) -> None:
    """Record captures in the history like a probe, for hosts SSH cannot reach.

    Support bundles and air-gapped sites: each file becomes a snapshot with its GPU counters and
    check findings, at the time the capture was taken. Every file is parsed before anything is
    written, so a bad file records nothing.
    Exit 1 when a check fails, 2 on an unreadable file or one that says not when it was taken.
    """
    from fleet.cli.app import settings
    from fleet.domain.checks import Severity, run_checks, worst
    from fleet.facts import facts_from_file
    from fleet.history import open_history, record_event, utcnow
    from fleet.jobs.record import record_snapshot

    if host is not None and len(files) > 1:
        raise BadInput.single("--host names one host: give one file with it", field="--host")
    parsed, problems = [], []
    for path in files:
        try:
            facts = facts_from_file(path)
        except BadInput as exc:
            problems.extend(exc.problems)
            continue
        name = record_name(path, (facts.identity.hostname or None) if facts.identity else None,
                           host, force)
        if isinstance(name, Problem):
            problems.append(name)
        else:
            parsed.append((path, name, facts))
    taken: dict[Path, dt.datetime] = {}
    for path, _name, facts in parsed:
        when = capture_taken_at(path, facts, taken_at, utcnow())
        if isinstance(when, Problem):
            problems.append(when)
        else:
            taken[path] = when
    if problems:
        raise BadInput(problems)
    out = []
    with open_history(settings(ctx).db) as history:
        for path, name, facts in parsed:
            findings = run_checks(facts)
            snapshot = record_snapshot(history, name, facts, findings, taken_at=taken[path],
                                       pool=pool)
            record_event(history, "facts.import", name, f"imported {path.name}",
                         {"file": str(path), "snapshot": snapshot, "source": facts.source})
            out.append({"file": str(path), "host": name, "snapshot": snapshot,
                        "gpus": len(facts.gpus), "worst": worst(findings).value,
                        "findings": [f.model_dump(mode="json") for f in findings]})
    if json_out:
        emit_json({"imported": out})
    else:
        for item in out:
            stdout.print(f"{item['file']}: host {item['host']}, {item['gpus']} GPU(s), "
                          f"snapshot {item['snapshot']}, worst finding {item['worst']}",
                          markup=False)
    failed = [str(i["host"]) for i in out if i["worst"] == Severity.FAIL.value]
    if failed:
        raise ProblemsFound(f"failing checks on {', '.join(failed)}")
