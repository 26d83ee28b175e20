"""Host-supplied text reaches the terminal without its control characters (issue 32,
"suspected"): rich passes ESC through, so a GPU name or a version from a host could retitle
the terminal, clear it or write the clipboard. One place strips them: `SafeConsole`, the class
of both of fleet's consoles."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.table import Table
from rich.text import Text

from fleet.cli.app import run
from fleet.cli.output import esc
from fleet.cli.safe_console import REPLACEMENT, SafeConsole, printable

EVIL = "\x1b]0;pwned\x07\x1b[2J\x9b31m\x7f"


def terminal() -> tuple[SafeConsole, io.StringIO]:
    buf = io.StringIO()
    return SafeConsole(file=buf, force_terminal=True, color_system="standard", width=120,
                       highlight=False, emoji=False), buf


def test_markup_plain_text_table_and_text_objects_are_all_cleaned() -> None:
    c, buf = terminal()
    c.print(f"[bold]host[/bold] {esc(EVIL)}")
    c.print(EVIL, markup=False)
    c.print(Text.assemble(("label", "red"), ": ", EVIL))
    t = Table("name")
    t.add_row(EVIL)
    c.print(t)
    out = buf.getvalue()
    assert "]0;pwned" in out  # the text is still shown ...
    for bad in ("\x1b]0;", "\x07", "\x1b[2J", "\x9b", "\x7f"):  # ... but drives nothing
        assert bad not in out
    assert REPLACEMENT in out
    assert "\x1b[1m" in out and "\x1b[31m" in out  # rich's own styling is untouched


def test_tabs_and_newlines_are_kept() -> None:
    assert printable("a\tb\nc\x1bd") == f"a\tb\nc{REPLACEMENT}d"


def test_the_cli_prints_a_hosts_escape_sequence_harmlessly(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capture = tmp_path / "gpu-01.json"
    capture.write_text(json.dumps({
        "schema": 1, "source": "nvml", "identity": {"hostname": "gpu-01"},
        "versions": {"driver_library": "580.95.05"}, "gpu_count": 1,
        "gpus": [{"index": 0, "name": f"NVIDIA H100 {EVIL}"}]}))
    with pytest.raises(SystemExit):
        run(["facts", "parse", str(capture)])
        raise SystemExit(0)
    out, err = capsys.readouterr()
    assert "pwned" in out  # shown (the result, on stdout), wrapped in a narrow table cell
    assert not any(c in out + err for c in "\x1b\x07\x9b")
