"""The fence a rollout controller passes before it touches a host.

A controller that stopped for a while (a hung machine, a stopped process, a network partition)
may come back after another one took its rollout over (`resume --force`, after the heartbeat
went stale) or a forced `fleet rollback` preempted it. Its next history write fails
(`LockLost`), but between two writes it calls the hosts: so every call that reaches a host (or,
for the simulated fleet, saves its state) first reads the lock, and a controller that lost it
stops there. One small read per batch call, not per host.

The wrapper defines every member of the ports it stands for (`Backend`, `Scheduler`,
`JobControl`, `NodeReboot`, `IdleCheck`) as a real method of its class, and only those its target
has: Python 3.12 checks a `runtime_checkable` Protocol with `inspect.getattr_static`, which never
reaches `__getattr__`, so a wrapper that forwarded them dynamically failed `isinstance(...,
NodeReboot)` there (`reboot: slurm` refused, `on_timeout: cancel` never stopping a job).
`__getattr__` still forwards the rest (adapter extras such as `drain_kick_s`, the simulated
fleet's controls).

What is left: the instant between that read and the call itself. Closing it needs a fencing
token checked by the host, which SSH and a scheduler cannot carry.

A step that calls its hosts one by one (drain, undrain: one call per host) runs them in
`guard.batch()`: there a read that saw the lock held covers the calls that start within
`BATCH_FRESH_S` of it, then the next call reads again. That is the window the per-call read
already had (a call taking that long runs on after its read), so a controller that lost its
lock still stops within it; on real hosts each call takes longer than the window and reads as
before, and a simulated fleet of 10,000 hosts does not read the database 20,000 times.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

from fleet.history.rollouts import LockLost

TOUCH = frozenset({"probe", "plan", "apply", "reboot", "benchmark", "drain", "undrain",
                   "reboot_nodes", "stop_jobs", "cancel_jobs"})
"""Methods of a backend or scheduler that reach a host (read-only `hosts()`, `state()`,
`idle()` and `jobs()` do not change it)."""


class Fenced:
    """A backend or scheduler whose host calls first pass `guard()` (it raises `LockLost`).

    `Fenced(target, guard)` builds an instance of the subclass that has exactly the port
    methods `target` has (see the module doc)."""

    _fenced_target: Any
    _guard: Callable[[], None]

    def __new__(cls, target: Any, guard: Callable[[], None]) -> Fenced:
        if cls is Fenced:
            cls = _fenced_class(target)
        return object.__new__(cls)

    def __init__(self, target: Any, guard: Callable[[], None]) -> None:
        self._fenced_target, self._guard = target, guard

    @property
    def unfenced(self) -> Any:
        return self._fenced_target

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        attr = getattr(self._fenced_target, name)
        if name in TOUCH:
            self._guard()
        return attr(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_fenced") or name == "_guard":  # not set yet (copy, pickle)
            raise AttributeError(name)
        attr = getattr(self._fenced_target, name)
        if name not in TOUCH or not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self._guard()
            return attr(*args, **kwargs)
        return call


def _forward(name: str, doc: str) -> Any:
    """A method that forwards `name` to the target (through the guard when it touches hosts);
    a real function on the class, so `inspect.getattr_static` finds it."""
    def method(self: Fenced, *args: Any, **kwargs: Any) -> Any:
        return self._call(name, *args, **kwargs)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = doc
    return method


class _BackendPart(Fenced):
    """`fleet.domain.ports.Backend`."""

    hosts = _forward("hosts", "The inventory's hosts (read-only).")
    probe = _forward("probe", "Probe the hosts (guarded).")
    plan = _forward("plan", "Plan a pin on the hosts (guarded).")
    apply = _forward("apply", "Pin a release (guarded).")
    reboot = _forward("reboot", "Reboot the hosts (guarded).")
    benchmark = _forward("benchmark", "Benchmark the hosts (guarded).")
    close = _forward("close", "Close the backend.")


class _SchedulerPart(Fenced):
    """`fleet.domain.ports.Scheduler`; `for_drain` gives a configured copy, fenced too."""

    @property
    def name(self) -> str:
        return str(self._fenced_target.name)

    state = _forward("state", "The host's state in the workload manager (read-only).")
    drain = _forward("drain", "Drain the host (guarded).")
    undrain = _forward("undrain", "Undrain the host (guarded).")

    def __getattr__(self, name: str) -> Any:
        attr = super().__getattr__(name)
        if name == "for_drain" and callable(attr):  # a configured copy is fenced too
            return lambda *a, **k: Fenced(attr(*a, **k), self._guard)
        return attr


class _JobControlPart(Fenced):
    """`fleet.domain.ports.JobControl`."""

    stop_jobs = _forward("stop_jobs", "Cancel or requeue jobs (guarded).")


class _NodeRebootPart(Fenced):
    """`fleet.domain.ports.NodeReboot`."""

    reboot_nodes = _forward("reboot_nodes", "Reboot through the scheduler (guarded).")


class _IdlePart(Fenced):
    """`fleet.domain.ports.IdleCheck`."""

    idle = _forward("idle", "Whether the host runs nothing at all (read-only).")


_PARTS: tuple[tuple[type[Fenced], tuple[str, ...]], ...] = (
    (_SchedulerPart, ("name", "state", "drain", "undrain")),
    (_BackendPart, ("hosts", "probe", "plan", "apply", "reboot", "benchmark", "close")),
    (_JobControlPart, ("stop_jobs",)),
    (_NodeRebootPart, ("reboot_nodes",)),
    (_IdlePart, ("idle",)),
)
_CLASSES: dict[tuple[type[Fenced], ...], type[Fenced]] = {}


def _fenced_class(target: Any) -> type[Fenced]:
    """The Fenced subclass with the port methods `target` has (all of a port's, or none)."""
    parts = tuple(part for part, names in _PARTS
                  if all(hasattr(target, n) and (n == "name" or callable(getattr(target, n)))
                         for n in names))
    cls = _CLASSES.get(parts)
    if cls is None:
        label = "".join(p.__name__.strip("_").removesuffix("Part") for p in parts)
        cls = _CLASSES[parts] = type(f"Fenced{label}", (*parts, Fenced) if parts else (Fenced,),
                                     {"__doc__": Fenced.__doc__})
    return cls


BATCH_FRESH_S = 0.25
"""Inside `Guard.batch()`, how long (monotonic seconds) a read that saw the lock held covers
the host calls that follow it."""


class Guard:
    """Raises `LockLost` with `check()`'s reason when it gives one; called before every host
    call. Outside a batch every call reads the lock; inside one, a read covers the calls that
    start within `fresh_s` of it (see the module doc)."""

    def __init__(self, check: Callable[[], str | None], *,
                 clock: Callable[[], float] = time.monotonic,
                 fresh_s: float = BATCH_FRESH_S) -> None:
        self._check, self._clock, self._fresh_s = check, clock, fresh_s
        self._depth = 0
        self._held_at: float | None = None  # start of the last read that saw the lock held

    def __call__(self) -> None:
        started = self._clock()
        if (self._depth and self._held_at is not None
                and started - self._held_at < self._fresh_s):
            return
        self._held_at = None
        why = self._check()
        if why is not None:
            raise LockLost(why)
        self._held_at = started

    @property
    def clock(self) -> Callable[[], float]:
        """The clock the batch window is measured on (`FreshRead` shares it)."""
        return self._clock

    @contextmanager
    def batch(self) -> Iterator[None]:
        """The host calls of one step (one per host); the cover ends with the batch."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if not self._depth:
                self._held_at = None


T = TypeVar("T")


class FreshRead(Generic[T]):
    """`read()`'s answer, reused by the calls that start within `fresh_s` of the read that gave
    it, then read again: the batch window of `Guard`, for another question asked before each
    host call of a step (the undrain loop's "is this host quarantined now?")."""

    def __init__(self, read: Callable[[], T], *, clock: Callable[[], float] = time.monotonic,
                 fresh_s: float = BATCH_FRESH_S) -> None:
        self._read, self._clock, self._fresh_s = read, clock, fresh_s
        self._value: T | None = None
        self._read_at: float | None = None

    def __call__(self) -> T:
        started = self._clock()
        if self._read_at is None or started - self._read_at >= self._fresh_s:
            self._value, self._read_at = self._read(), started
        return self._value  # type: ignore[return-value]  # set by the read above


def guard_for(check: Callable[[], str | None]) -> Guard:
    """A guard raising `LockLost` with `check()`'s reason when it gives one."""
    return Guard(check)
