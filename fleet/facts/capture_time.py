"""When a capture was taken, read from the capture itself (for `fleet facts import`).

A support bundle imported a month after it was taken is a month-old sample: recorded at the
import time it would land after last week's probe, and its lower lifetime counters would read
as a reset (issue 31, defect 9). Each format says when it was taken:

- probe JSON: `collected_at` (UTC, ISO 8601 with `Z`);
- `nvidia-smi -q -x`: `<timestamp>Fri Aug 21 08:54:01 2026</timestamp>`;
- `nvidia-smi -q`: the top-level `Timestamp : Wed Sep 25 10:40:24 2024` line;
- `--query-gpu` CSV: the `timestamp` column, `2026/06/24 10:26:34.977`.

nvidia-smi prints the host's local time without a zone: it is read as UTC (what GPU hosts
mostly run); `fleet facts import --taken-at` says otherwise. None when the capture names no
time or one that does not parse.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re

_XML = re.compile(r"<timestamp>\s*([^<]+?)\s*</timestamp>")
_Q = re.compile(r"^Timestamp\s*:\s*(.+?)\s*$", re.M)
_FORMATS = ("%a %b %d %H:%M:%S %Y", "%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S")


def parse_time(text: str) -> dt.datetime | None:
    """An aware UTC datetime from nvidia-smi's or ISO 8601 text, or None."""
    value = " ".join(text.split())
    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        t = None
        for fmt in _FORMATS:
            try:
                t = dt.datetime.strptime(value, fmt)
                break
            except ValueError:
                continue
    if t is None:
        return None
    return t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t.astimezone(dt.UTC)


def capture_time(text: str) -> dt.datetime | None:
    """When the capture `text` was taken (see the module docstring), or None."""
    head = text.lstrip()
    if head.startswith("{"):
        try:
            doc = json.loads(head)
        except ValueError:
            return None
        value = doc.get("collected_at") if isinstance(doc, dict) else None
        return parse_time(value) if isinstance(value, str) else None
    m = _XML.search(text[:20000])
    if m is None and "<nvidia_smi_log" not in text[:4000]:
        m = _Q.search(text[:20000])
    if m is not None:
        return parse_time(m.group(1))
    rows = csv.reader(io.StringIO(head[:20000]), skipinitialspace=True)
    header = next(rows, [])
    if "timestamp" in header:
        first = next(rows, None)
        i = header.index("timestamp")
        if first is not None and len(first) > i:
            return parse_time(first[i])
    return None
