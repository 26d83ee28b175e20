"""The kernel-log parser read line by line (issue 28: `fleet logs parse` held a 200 MB log whole,
peaking at 1.5 GB): the same events as the parser of the whole text, holding a few records.

The memory figure itself is benchmarks/log_memory.py; these tests pin the behaviour."""

from __future__ import annotations

import io
import itertools
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.line_reader import bounded_lines, text_lines
from fleet.probe import hostprobe

DATA = Path(__file__).resolve().parents[2] / "data"
LOGS = sorted(p for folder in ("kernel-logs", "realdata/kernel-logs")
              for p in (DATA / folder).iterdir() if p.suffix == ".log")
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
from logs_parse_scale import SHAPES, make_log  # noqa: E402


def streamed(data: bytes) -> list[dict[str, object]]:
    """What `fleet logs parse` does with a file: two passes over its lines."""
    f = io.BytesIO(data)
    indent = hostprobe.common_indent(text_lines(f))
    f.seek(0)
    return hostprobe.parse_kernel_log_lines(text_lines(f), indent=indent)


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name)
def test_the_same_events_as_the_whole_text(path: Path) -> None:
    data = path.read_bytes()
    assert streamed(data) == hostprobe.parse_kernel_log(data.decode("utf-8", "replace"))


@pytest.mark.parametrize("shape", SHAPES)
def test_the_same_events_in_every_shape(shape: str) -> None:
    text = make_log(400, shape)
    whole = hostprobe.parse_kernel_log(text)
    assert whole and streamed(text.encode()) == whole


def test_line_boundaries_and_bad_bytes_as_splitlines() -> None:
    data = (b"a\r\nb\rc\n\nd\xc2\x85e\n\xff\xfe f\x0bg\n" + "h\u2028i".encode() + b"\nlast")
    assert list(text_lines(io.BytesIO(data))) == data.decode("utf-8", "replace").splitlines()


def test_a_long_line_is_cut_and_the_next_keeps_its_number() -> None:
    long = b"x" * 300_000
    data = long + b"\n" + b"[  1.0] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
    lines = list(bounded_lines(io.BytesIO(data), limit=1024))
    assert [len(x) for x in lines][0] == 1024 and len(lines) == 2
    [event] = streamed(data)
    assert event["line"] == 2 and event["xid"] == 79


def test_records_come_out_before_the_log_ends() -> None:
    """A record is given out once the next one starts: the parser never gathers the log."""
    read = itertools.count()
    block = make_log(20, "dmesg").splitlines()

    def endless() -> Iterator[str]:
        for i in itertools.count():
            next(read)
            yield block[i % len(block)]

    records = hostprobe._iter_records(hostprobe.log_rows(endless(), 0))  # noqa: SLF001
    first = list(itertools.islice(records, 5))
    assert len(first) == 5 and next(read) <= 8


def test_common_indent_stops_at_the_first_unindented_line() -> None:
    read = itertools.count()

    def lines() -> Iterator[str]:
        yield "    indented"
        yield "flush"
        for _ in range(1000):
            next(read)
            yield "    more"

    assert hostprobe.common_indent(lines()) == 0 and next(read) == 0
    assert hostprobe.common_indent(["    a", "  > # SOURCE: x", "      b", ""]) == 4
