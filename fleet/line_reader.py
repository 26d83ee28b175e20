"""Read a big log line by line in bounded memory (`fleet logs parse`, `bench trace-from-log`).

Both commands held the whole file, several times over (a 200 MB kernel log peaked at 1.5 GB,
issue 28). A log is read here one line at a time, and at most `limit` bytes of a line are kept:
the rest of a longer line is read and dropped, so a file without newlines costs no more memory
than a short line. Standard input, which cannot be read twice, is spooled to a temporary file
first (the kernel-log parser reads a file twice: its common indentation, then its records).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

LINE_LIMIT = 64 * 1024
"""Bytes of one line kept: above any log line a parser reads (kernel records are at most 1 KiB
with their prefixes, fleet.probe.hostprobe.MAX_LINE_CHARS cuts at 8,192 characters; a trace's
path is at most 8,192)."""


def bounded_lines(f: IO[bytes], limit: int = LINE_LIMIT) -> Iterator[bytes]:
    """Each line of `f` with its newline, its first `limit` bytes only (then without one)."""
    while True:
        line = f.readline(limit)
        if not line:
            return
        if len(line) == limit and not line.endswith(b"\n"):
            rest = line
            while rest and not rest.endswith(b"\n"):
                rest = f.readline(limit)  # the rest of the long line: read, never kept
        yield line


def text_lines(f: IO[bytes], limit: int = LINE_LIMIT) -> Iterator[str]:
    """The lines of `f` as `text.splitlines()` of the whole decoded file gives them (a CR, NEL
    or other line boundary inside a line included), undecodable bytes replaced: kernel logs
    carry stray bytes (firmware strings) and the rest of such a line still counts."""
    for line in bounded_lines(f, limit):
        yield from line.decode("utf-8", errors="replace").splitlines()


@contextmanager
def rereadable(source: IO[bytes]) -> Iterator[IO[bytes]]:
    """`source` itself when it can be read again, else a temporary copy of it (standard input,
    copied in chunks: never held in memory), removed when the block ends."""
    try:
        if source.seekable():
            source.seek(0, 1)
            yield source
            return
    except OSError:
        pass
    with tempfile.TemporaryFile() as spool:
        shutil.copyfileobj(source, spool, 1024 * 1024)
        spool.seek(0)
        yield spool
