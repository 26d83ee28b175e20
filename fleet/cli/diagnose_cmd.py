"""`fleet diagnose` and `fleet bundle collect`: the first ten minutes of a slow GPU host."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fleet.cli.output import console, emit_json, esc, stdout
from fleet.errors import CouldNotComplete, ProblemsFound

if TYPE_CHECKING:
    from fleet.jobs.diagnose import DiagnoseResult

_STYLE = {"critical": "red", "warning": "yellow", "info": "dim"}

app = typer.Typer(help="Support bundles: the captures `fleet diagnose` reads.",
                  no_args_is_help=True)


def diagnose_cmd(
    target: Annotated[str, typer.Argument(
        help="A bundle folder, or with -i a host of the inventory.", metavar="BUNDLE_DIR|HOST")],
    inventory: Annotated[Path | None, typer.Option(
        "--inventory", "-i", envvar="FLEET_INVENTORY",
        help="pyinfra inventory: diagnose HOST live over SSH.")] = None,
    seconds: Annotated[int, typer.Option(
        "--seconds", min=1, max=600, help="Live: sample the GPUs and CPUs this long.")] = 10,
    json_out: Annotated[bool, typer.Option("--json", help="JSON on stdout.")] = False,
) -> None:
    """Ask a slow GPU host the field's questions in order (queueing, GPU busy, throttled,
    memory, PCIe/NUMA/NVLink, drift and fallback, hardware, host CPU, disk) and name the
    most likely bottleneck, from a bundle folder or live over SSH (see docs/diagnose.md).

    Exit 0 when the verdict is healthy, 1 with findings, 2 on bad input (a missing folder, a
    corrupt capture: named with its line), 3 when it could not complete (host unreachable, or
    nothing seen of the GPUs).
    """
    from fleet.jobs.diagnose import diagnose_bundle

    if inventory is None:
        result = diagnose_bundle(Path(target))
    else:
        from fleet.jobs.diagnose import diagnose_live

        with console.status(f"sampling {target} for {seconds} s"):
            result = diagnose_live(inventory, target, seconds)
    _report(result, json_out)


def _report(result: DiagnoseResult, json_out: bool) -> None:
    d = result.diagnosis
    if json_out:
        emit_json(result.as_dict())
    else:
        _print_human(result)
    if d.verdict == "could_not_judge":
        raise CouldNotComplete(f"{result.target}: nothing seen of the GPUs; see the questions' "
                               "reasons for the captures that are missing")
    if d.verdict != "healthy":
        raise ProblemsFound(f"{result.target}: verdict {d.verdict} "
                            f"({sum(f.severity != 'info' for f in d.findings)} finding(s))")


def _print_human(result: DiagnoseResult) -> None:
    d = result.diagnosis
    style = "green" if d.verdict == "healthy" else "red"
    stdout.print(f"{esc(result.target)} ({result.mode}): verdict [{style}]{d.verdict}[/]",
                  soft_wrap=True)
    for f in d.findings:
        stdout.print(f"  [{_STYLE[f.severity]}]{f.severity}[/] {f.cls}: {esc(f.summary)}",
                      soft_wrap=True)
        nums = ", ".join(f"{k}={v}" for k, v in f.evidence.items() if v is not None)
        stdout.print(f"      evidence: {esc(nums)}", soft_wrap=True, style="dim")
        stdout.print(f"      next: {esc(f.next)}", soft_wrap=True)
        stdout.print(f"      fix:  {esc(f.remediation)}", soft_wrap=True)
    ok = [a.cls for a in d.answers if a.status == "ok"]
    if ok:
        stdout.print(f"  [green]ok[/]: {', '.join(ok)}", soft_wrap=True)
    unjudged = [a for a in d.answers if a.status == "could_not_judge"]
    if unjudged:
        stdout.print("  could not judge:", style="dim")
        for a in unjudged:
            stdout.print(f"    {a.cls}: {esc(a.reason or '')}", soft_wrap=True, style="dim")


@app.command("collect")
def collect(
    host: Annotated[str, typer.Argument(help="The host, as the inventory names it.")],
    inventory: Annotated[Path, typer.Option(
        "--inventory", "-i", envvar="FLEET_INVENTORY", help="pyinfra inventory file.")],
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="Folder to write the bundle to: a new or empty one.")],
    seconds: Annotated[int, typer.Option(
        "--seconds", min=1, max=600, help="Sample the GPUs and CPUs this long.")] = 10,
    json_out: Annotated[bool, typer.Option("--json", help="JSON on stdout.")] = False,
) -> None:
    """Collect HOST's support bundle over SSH into a folder, the same captures `fleet diagnose`
    reads (docs/diagnose.md lists them and the shell lines that make them by hand).

    Exit 0 when written, 2 on bad input, 3 when the host could not be reached.
    """
    from fleet.jobs.diagnose import bundle_folder, write_bundle
    from fleet.remote.bundle import collect_host

    bundle_folder(output, create=False)  # a folder that holds something: refused before SSH
    with console.status(f"collecting from {host} ({seconds} s of sampling)"):
        files = collect_host(inventory, host, seconds)
    written = write_bundle(files, output)
    if json_out:
        emit_json({"host": host, "output": str(output), "seconds": seconds,
                   "files": [p.name for p in written]})
    else:
        stdout.print(f"{esc(host)}: {len(written)} file(s) in {esc(output)}: "
                      + esc(", ".join(p.name for p in written)), soft_wrap=True)
    if not written:
        raise CouldNotComplete(f"{host}: nothing collected")


def register(root: typer.Typer) -> None:
    root.command("diagnose")(diagnose_cmd)

