"""`fleet logs ...`: kernel logs -> Xid, fallen-off-the-bus and PCIe AER events."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated

import typer

from fleet.cli.facts_cmd import print_findings
from fleet.cli.output import emit_json, esc, stdout
from fleet.errors import BadInput, CouldNotComplete, ProblemsFound
from fleet.line_reader import rereadable, text_lines

if TYPE_CHECKING:  # pydantic models: imported when a log is parsed
    from fleet.domain.facts import KernelEvent

app = typer.Typer(
    help="Kernel logs: Xid, fallen-off-the-bus and PCIe AER events.", no_args_is_help=True
)


def events_from_text(text: str) -> list[KernelEvent]:
    """The probe's own parser, with the classes of the package's Xid catalog."""
    from fleet.domain.checks import xid_classes
    from fleet.domain.facts import KernelEvent
    from fleet.probe.hostprobe import parse_kernel_log

    return [KernelEvent.model_validate(e) for e in parse_kernel_log(text, xid_classes())]


def _read_log(f: IO[bytes], name: str) -> tuple[list[KernelEvent], int, bool]:
    """(events, kernel lines counted when there is no event, whether the log is empty), the
    file read line by line: once for its common indentation, once for its records (and once
    more only when no event was found), never whole (issue 28)."""
    from fleet.domain.checks import xid_classes
    from fleet.domain.facts import KernelEvent
    from fleet.probe import hostprobe

    if b"\x00" in f.read(4096):
        raise BadInput.single("binary file, not a text kernel log", file=name, line=1)
    f.seek(0)
    indent = hostprobe.common_indent(text_lines(f))
    f.seek(0)
    found = hostprobe.parse_kernel_log_lines(text_lines(f), xid_classes(), indent)
    events = [KernelEvent.model_validate(e) for e in found]
    if events:
        return events, 0, False
    f.seek(0)
    counted = hostprobe.count_kernel_lines(hostprobe.log_rows(text_lines(f), indent))
    f.seek(0)
    empty = not any(line.strip() for line in text_lines(f))
    return events, counted, empty


@app.command("parse")
def parse(
    file: Annotated[Path, typer.Argument(
        help="dmesg, journalctl -k, kern.log, ... (any shape); - reads stdin.")],
    json_out: Annotated[bool, typer.Option("--json", help="The events as JSON on stdout.")] = False,
) -> None:
    """Print the events in a kernel log and the findings they raise.

    `--json` prints `{"schema", "file", "events", "findings"}`: each event with the stable keys
    kind, pci, xid, severity, line, text (plus timestamp, uuid, pid, process, device_id, bits).
    Exit 1 when a finding fails; 3 when nothing in the input reads as a kernel log line (an
    empty file, /dev/null, another kind of log): no event there says nothing about the host.
    """
    from fleet.domain.checks import Severity, run_checks, worst
    from fleet.domain.facts import HostFacts, KernelLog

    name = "<stdin>" if str(file) == "-" else str(file)
    try:
        with (contextlib.nullcontext(typer.get_binary_stream("stdin")) if str(file) == "-"
              else file.open("rb")) as source, rereadable(source) as log:
            events, kernel_lines, empty = _read_log(log, name)
    except OSError as exc:
        raise BadInput.single(f"cannot read: {exc.strerror or exc}", file=name) from exc
    if not events and not kernel_lines:
        why = "it is empty" if empty else "no line reads as a kernel log line"
        raise CouldNotComplete(
            f"{name}: could not judge: {why} (dmesg, journalctl -k, kern.log); finding no event "
            "in it says nothing about the host", file=name)
    facts = HostFacts(input_file=name, kernel_log=KernelLog(source="file", events=events))
    findings = run_checks(facts)
    if json_out:
        emit_json({"file": name, "events": [e.model_dump(mode="json") for e in events],
                   "findings": [f.model_dump(mode="json") for f in findings]})
    else:
        for e in events:
            what = f"Xid {e.xid}" if e.kind == "xid" else e.kind
            stdout.print(
                f"{esc(name)}:{e.line}: {what} {esc(e.pci or '-')} {e.severity or ''}  "
                f"[dim]{esc(e.text[:120])}[/dim]",
                soft_wrap=True,
            )
        stdout.print(f"{len(events)} event(s)")
        print_findings(findings)
    if worst(findings) is Severity.FAIL:
        raise ProblemsFound(f"{name}: failing findings")
