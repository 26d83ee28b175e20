"""Decode a user's file as UTF-8, or say where it is not: line and column, not a byte offset.

Python's UnicodeDecodeError names the byte offset ("position 18"), which no editor shows. Every
file fleet reads as text (matrix, mig-parted layouts, inventories, simulation specs, benchmark
samples, traces, access logs) reports the first bad byte as `file:line: not UTF-8 text: byte
0xff at column 7`, the column counted in characters like the editor's (pure; issue 28).
"""

from __future__ import annotations

from fleet.errors import BadInput, Problem


def where_not_utf8(data: bytes, start: int) -> tuple[int, int]:
    """(line, column), both 1-based, of byte offset `start` (the first undecodable byte)."""
    line_start = data.rfind(b"\n", 0, start) + 1
    column = len(data[line_start:start].decode("utf-8", errors="replace")) + 1
    return data.count(b"\n", 0, start) + 1, column


def not_utf8_problem(exc: UnicodeDecodeError, file: str | None, *, line_offset: int = 0,
                     field: str | None = None) -> Problem:
    """The problem of a UnicodeDecodeError raised decoding `exc.object`; `line_offset` is added
    to its line when the bytes are one line (or chunk) of a longer file."""
    data = exc.object if isinstance(exc.object, bytes) else bytes(exc.object)
    line, column = where_not_utf8(data, exc.start)
    bad = data[exc.start:exc.end][:4]
    shown = " ".join(f"0x{b:02x}" for b in bad) or "?"
    return Problem(file, line + line_offset, field,
                   f"not UTF-8 text: byte {shown} at column {column} ({exc.reason}); "
                   "save the file as UTF-8")


def decode_utf8(data: bytes, file: str | None, *, line_offset: int = 0,
                field: str | None = None) -> str:
    """`data` as text; BadInput naming the line and column of the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput([not_utf8_problem(exc, file, line_offset=line_offset,
                                         field=field)]) from None
