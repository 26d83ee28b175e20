"""`bench trace-from-log` reads its log line by line and keeps each request compact (issue 28:
a 116 MB nginx log peaked at 700 MB, every request held as objects, the trace as one string).

The memory figure itself is benchmarks/log_memory.py; these tests pin the behaviour."""

from __future__ import annotations

import json
from pathlib import Path

from fleet.domain.tracelog import MAX_PROBLEMS, TraceBuilder
from fleet.errors import ExitCode

LINE = '10.0.0.1 - - [10/Oct/2024:13:55:{s} +0000] "GET /{p} HTTP/1.1" 200 5 "-" "c"{rt}\n'


def nginx(s: int, p: str, rt: str = "") -> str:
    return LINE.format(s=f"{s:02d}", p=p, rt=f" {rt}" if rt else "")


class CountingStore:
    """An entry store that says what was put in it (the builder keeps no entry itself)."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.reads = 0

    def append(self, data: bytes) -> None:
        self.data += data

    def read(self, offset: int, length: int) -> bytes:
        self.reads += 1
        return bytes(self.data[offset:offset + length])


def test_entries_live_in_the_store_and_come_out_in_arrival_order() -> None:
    store = CountingStore()
    b = TraceBuilder(store=store)
    lines = [nginx(10, "c"), nginx(10, "a", "0.900"), nginx(9, "b"), nginx(10, "d")]
    for no, line in enumerate(lines, 1):
        b.add(no, line)
    assert len(b) == 4 and b"/a" in store.data and store.reads == 0
    trace = [json.loads(x) for x in b.lines()]
    # line 2 ended at :10 after 0.9 s: it arrived at :09.1; :09 and :10 are whole seconds,
    # spread across their second by line (line 3 alone at :09.0; lines 1, 4 at :10.0, :10.5)
    assert [(e["t"], e["path"]) for e in trace] == [
        (0.0, "/b"), (0.1, "/a"), (1.0, "/c"), (1.5, "/d")]
    assert store.reads == 4 and b.span == 1.5


def test_bad_lines_are_counted_and_the_first_ones_kept() -> None:
    b = TraceBuilder()
    for no in range(1, MAX_PROBLEMS + 30):
        b.add(no, "not a log line")
    b.add(10_000, nginx(1, "ok"))
    assert b.bad == MAX_PROBLEMS + 29 and len(b.problems) == MAX_PROBLEMS
    assert [p.line for p in b.problems[:2]] == [1, 2] and len(b) == 1


def test_a_line_that_is_not_utf8_is_a_bad_line_with_its_column(tmp_path: Path,
                                                               fleet_cli) -> None:
    log = tmp_path / "access.log"
    log.write_bytes(nginx(1, "a").encode() + nginx(2, "caf").encode().replace(
        b"/caf", b"/caf\xe9") + nginx(3, "b").encode())
    r = fleet_cli("bench", "trace-from-log", str(log))
    assert r.returncode == ExitCode.BAD_INPUT
    assert "access.log:2: not UTF-8 text: byte 0xe9 at column 52" in r.stderr, r.stderr
    r = fleet_cli("bench", "trace-from-log", str(log), "--skip-bad")
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["path"] for x in r.stdout.splitlines()] == ["/a", "/b"]
    assert "1 unreadable line(s) skipped" in r.stderr


def test_more_bad_lines_than_shown_are_counted(tmp_path: Path, fleet_cli) -> None:
    log = tmp_path / "access.log"
    log.write_text(nginx(1, "a") + "junk\n" * (MAX_PROBLEMS + 5))
    r = fleet_cli("bench", "trace-from-log", str(log))
    assert r.returncode == ExitCode.BAD_INPUT and "... and 5 more bad line(s)" in r.stderr


def _trace(lines: list[str], **kw: object) -> tuple[list[str], float, int]:
    b = TraceBuilder(**kw)  # type: ignore[arg-type]
    for no, line in enumerate(lines, 1):
        b.add(no, line)
    return list(b.lines()), b.span, len(b)


def test_spilled_runs_merge_into_the_same_trace_as_memory() -> None:
    """Memory is bounded by spilling sorted runs every `spill_every` requests (issue 28: the
    arrays grew 24 bytes per request); the merged trace is byte for byte the in-memory one,
    nginx's whole seconds spread across their second included, whatever the run size."""
    import random

    rng = random.Random(7)
    lines = []
    for i in range(600):  # out of order, many requests per second, some sub-second arrivals
        rt = f"{rng.random():.3f}" if rng.random() < 0.3 else ""
        lines.append(nginx(rng.randrange(5, 25), f"p{i}", rt))
    whole, span, n = _trace(lines)
    assert n == 600 and len(whole) == 600 and span > 0
    for every in (1, 7, 64, 599, 600, 601):
        runs = CountingStore()
        got = _trace(lines, spill_every=every, runs=runs)
        assert got == (whole, span, n), every
        assert (len(runs.data) > 0) == (every <= 600), every  # what spilled went to the store
    jsonl = [json.dumps({"time": 1_700_000_000 + rng.random() * 50, "path": f"/j{i}",
                         "method": "POST", "body": {"i": i}}) + "\n" for i in range(300)]
    in_memory = _trace(jsonl)
    assert in_memory[2] == 300 and _trace(jsonl, spill_every=13) == in_memory
