"""The one rich `Console` fleet prints through: host-supplied text never drives the terminal.

A host controls much of what the CLI prints (names, versions, kernel-log lines, error text from
its commands). rich passes ESC and the other control characters of a string straight to the
terminal, so a fact value holding `ESC ] 0 ; ... BEL` would retitle the window, `ESC [ 2 J`
clear the screen, an OSC 52 sequence write the clipboard. `SafeConsole` replaces every control
character (C0 but tab and newline, DEL, C1) in what it renders with U+FFFD, at the one point
all printed text passes: the segments of `Console.render`, after markup has been read and
before rich adds its own styling (which travels as styles and control segments, untouched).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
REPLACEMENT = "\ufffd"


def printable(text: str) -> str:
    """`text` with its control characters (tab and newline kept) replaced by U+FFFD."""
    return _CONTROL.sub(REPLACEMENT, text)


class SafeConsole(Console):
    """A rich Console that never writes a control character it was given as text."""

    def render(self, renderable: RenderableType,
               options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            if segment.control is None and _CONTROL.search(segment.text):
                yield Segment(printable(segment.text), segment.style)
            else:
                yield segment
