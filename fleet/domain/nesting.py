"""How deep a JSON text nests, found by one linear scan before any recursive parser sees it (pure).

Python's json decoder recurses once per array or object, so a document nested a few thousand
levels deep ends in RecursionError: an internal error instead of a bad-input error naming the
file and line. No input fleet reads (samples, probe documents, captures) needs more than a few
levels; `MAX_JSON_DEPTH` leaves room for any real one.
"""

from __future__ import annotations

import re

MAX_JSON_DEPTH = 64
# a whole string (escapes followed, unterminated at the end of the text too), or one bracket
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]', re.S)


def json_too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> int | None:
    """The line where `text` first nests deeper than `limit` arrays/objects, or None.

    Brackets inside strings do not count. The text need not be valid JSON: whatever the decoder
    makes of the rest, it will not recurse past `limit`."""
    if text.count("[") + text.count("{") <= limit:
        return None  # cannot nest deeper than it has brackets (the common case, at C speed)
    depth = 0
    for m in _TOKEN.finditer(text):
        token = m.group()
        if token in ("[", "{"):
            depth += 1
            if depth > limit:
                return text.count("\n", 0, m.start()) + 1
        elif token in ("]", "}"):
            depth -= 1
    return None
