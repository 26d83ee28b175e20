"""The fence a rollout controller passes before it touches a host.

A controller that stopped for a while (a hung machine, a stopped process, a network partition)
may come back after another one took its rollout over (`resume --force`, after the heartbeat
went stale) or a forced `fleet rollback` preempted it. Its next history write fails
(`LockLost`), but between two writes it calls the hosts: so every call that reaches a host (or,
for the simulated fleet, saves its state) first reads the lock, and a controller that lost it
stops there. One small read per batch call, not per host.

What is left: the instant between that read and the call itself. Closing it needs a fencing
token checked by the host, which SSH and a scheduler cannot carry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fleet.history.rollouts import LockLost

TOUCH = frozenset({"probe", "plan", "apply", "reboot", "benchmark", "drain", "undrain",
                   "reboot_nodes", "stop_jobs", "cancel_jobs"})
"""Methods of a backend or scheduler that reach a host (read-only `hosts()`, `state()` and
`jobs()` do not change it)."""


class Fenced:
    """A backend or scheduler whose host calls first pass `guard()` (it raises `LockLost`)."""

    def __init__(self, target: Any, guard: Callable[[], None]) -> None:
        self._fenced_target, self._guard = target, guard

    @property
    def unfenced(self) -> Any:
        return self._fenced_target

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._fenced_target, name)
        if name == "for_drain" and callable(attr):  # a configured copy is fenced too
            return lambda *a, **k: Fenced(attr(*a, **k), self._guard)
        if name not in TOUCH or not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self._guard()
            return attr(*args, **kwargs)
        return call


def guard_for(check: Callable[[], str | None]) -> Callable[[], None]:
    """A guard raising `LockLost` with `check()`'s reason when it gives one."""
    def guard() -> None:
        why = check()
        if why is not None:
            raise LockLost(why)
    return guard
