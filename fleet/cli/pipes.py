"""A reader that stops reading (`fleet matrix show | head -1`) never changes the exit code.

Python ignores SIGPIPE, so a write to a pipe whose reader has gone raises BrokenPipeError:
in the middle of a command it became an "internal error" (exit 3), and at exit Python's last
flush of stdout turned exit 0 into exit 1 ("Exception ignored ... BrokenPipeError"). A script
with `set -o pipefail` then read the wrong code. `guard_streams` wraps stdout and stderr at the
entry point: once the reader is gone, the stream's descriptor points at /dev/null, the rest of
the output is dropped, and the command runs to its end and exits with its own code (a rollout
is not abandoned half-way because `| head` stopped reading).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, TextIO


class GuardedStream:
    """A text stream that drops its output once the reader has closed the pipe."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.reader_gone = False

    def _gone(self) -> None:
        self.reader_gone = True
        try:  # the unflushed rest, and Python's own last flush, go to /dev/null
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self._stream.fileno())
            finally:
                os.close(devnull)
        except (OSError, ValueError):
            pass

    def write(self, text: str) -> int:
        if not self.reader_gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._gone()
        return len(text)

    def flush(self) -> None:
        if not self.reader_gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._gone()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guard_streams() -> None:
    """Wrap the process's own stdout and stderr (once; a test's capture is left alone) and
    keep SIGPIPE ignored, as Python starts."""
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and stream is getattr(sys, f"__{name}__"):
            setattr(sys, name, GuardedStream(stream))
