"""The lock's heartbeat, refreshed from a timer while the controller runs.

History writes refresh the heartbeat too, but one host call can outlast `stale_after_s` on its
own: a reboot waits up to 300 s over SSH and 900 s through Slurm, a `kubectl drain` kick or a
benchmark for minutes. Without a beat in between, a live controller reads as dead, and a forced
takeover reboots the hosts it has in flight a second time. So a timer beats every few seconds
while the controller runs, and stops beating once the controller has shown no sign of life (no
host call started, no history write) for `quiet_limit_s`: a controller that hangs for good still
goes stale and can be taken over.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol


class Ticker(Protocol):
    """Calls `tick()` every `every_s` seconds between `start` and `stop` (from any thread)."""

    def start(self, every_s: float, tick: Callable[[], None]) -> None: ...

    def stop(self) -> None: ...


class ThreadTicker:
    """A daemon thread; `stop()` wakes it and waits for it to end."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, every_s: float, tick: Callable[[], None]) -> None:
        if self._thread is not None:
            return
        self._stop.clear()

        def loop() -> None:
            while not self._stop.wait(every_s):
                tick()

        self._thread = threading.Thread(target=loop, name="fleet-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        thread.join(timeout=30)


def beat_interval(heartbeat_s: float, stale_after_s: float) -> float:
    """How often the timer beats: at most `heartbeat_s`, and at least three beats per
    `stale_after_s`, so one slow write never lets the lock go stale."""
    return max(0.05, min(heartbeat_s, stale_after_s / 3.0))


__all__ = ["Ticker", "ThreadTicker", "beat_interval"]
