"""`fleet logs ...`: kernel logs -> Xid, fallen-off-the-bus and PCIe AER events."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fleet.cli.facts_cmd import print_findings
from fleet.cli.output import emit_json, esc, stdout
from fleet.errors import BadInput, CouldNotComplete, ProblemsFound

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
    from fleet.probe.hostprobe import kernel_log_lines

    name = "<stdin>" if str(file) == "-" else str(file)
    try:
        raw = typer.get_binary_stream("stdin").read() if str(file) == "-" else file.read_bytes()
    except OSError as exc:
        raise BadInput.single(f"cannot read: {exc.strerror or exc}", file=name) from exc
    if b"\x00" in raw[:4096]:
        raise BadInput.single("binary file, not a text kernel log", file=name, line=1)
    text = raw.decode("utf-8", errors="replace")
    events = events_from_text(text)
    if not events and not kernel_log_lines(text):
        why = "it is empty" if not text.strip() else "no line reads as a kernel log line"
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
