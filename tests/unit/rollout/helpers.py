"""A small simulated rehearsal: a fleet, a history and an engine wired on one logical clock."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fleet.domain.matrix.models import Matrix
from fleet.history import History, open_history
from fleet.history.rollouts import load_steps, rollout_events
from fleet.jobs.rollout import RolloutEngine, RolloutOptions, invariants
from fleet.sim import Latency, SimClock, SimFleet

POOLS = {"h100-canary": 3, "h100": 8}


class Crash(BaseException):
    """The controller dies here (not an Exception: nothing in the engine may catch it)."""


class Wrap:
    """A backend or scheduler passing every call through to `inner`; override what a test
    breaks."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class ManualTicker:
    """The heartbeat timer in a test: `fire()` is one tick of wall time passing."""

    def __init__(self) -> None:
        self.tick: Callable[[], None] | None = None
        self.running = False

    def start(self, every_s: float, tick: Callable[[], None]) -> None:
        self.tick, self.running = tick, True

    def stop(self) -> None:
        self.running = False

    def fire(self) -> None:
        if self.running and self.tick is not None:
            self.tick()


class RebootLog:
    """Every reboot of the simulated fleet (over SSH or through its scheduler), and the ones
    done while the simulation's ground truth had a job running on the host (`busy`) or the
    host was not drained (`undrained`)."""

    def __init__(self, fleet: SimFleet) -> None:
        self.fleet, self.sched = fleet, fleet.scheduler()
        self.rebooted: list[str] = []
        self.busy: list[tuple[str, str]] = []
        self.undrained: list[tuple[str, str]] = []
        orig = fleet.reboot

        def reboot(hosts: Any, *, gate: Any) -> Any:
            for h in hosts:
                self.rebooted.append(h)
                a = self.sched.state(h)
                if self.sched._running(self.sched._node(h)):  # ground truth, not a listing
                    self.busy.append((h, f"{a.state} ({a.reason})"))
                if a.state not in ("drained", "draining", "down"):
                    self.undrained.append((h, a.state))
            return orig(hosts, gate=gate)  # the gate's pass goes on to the fleet, which checks it

        fleet.reboot = reboot  # type: ignore[method-assign]

    def boots(self, host: str) -> int:
        return self.rebooted.count(host)


class Rig:
    def __init__(self, matrix: Matrix, tmp: Path, *, pools: Mapping[str, int] = POOLS,
                 seed: int = 0, **build: Any) -> None:
        self.matrix = matrix
        self.clock = SimClock()
        self.fleet = SimFleet.build(matrix, None, seed, pools=dict(pools), clock=self.clock,
                                    latency=Latency.zero(), **build)
        self.history: History = open_history(str(tmp / "history.db"))
        self.backend: Any = self.fleet

    def engine(self, *, checkpoint: Callable[[str], Any] | None = None, pid: int = 1000,
               dead: bool = False, **opts: Any) -> RolloutEngine:
        return RolloutEngine(
            self.backend, self.fleet.scheduler(), self.history, self.matrix, now=self.clock,
            sleep=self.clock.advance, actor="tester", options=RolloutOptions(**opts),
            checkpoint=checkpoint, pid=pid, machine="testbox",
            pid_alive=(lambda p: False) if dead else (lambda p: True))

    def start(self, **kw: Any) -> Any:
        eng = kw.pop("engine", None) or self.engine()
        kw.setdefault("unreachable", self.fleet.unreachable_hosts())
        return eng.start(matrix_path="m.yaml", releases=self.fleet.releases_by_host(), **kw)

    def steps(self, rid: int) -> Any:
        return load_steps(self.history, rid)

    def problems(self, rid: int) -> list[str]:
        return invariants(self.steps(rid), self.fleet.scheduler(), self.fleet.installed_release)

    def events(self, rid: int) -> Any:
        return rollout_events(self.history, rid)

    def explained(self, rid: int) -> list[str]:
        """Hosts that moved without an event naming them (should be none)."""
        named: set[str] = set()
        for e in self.events(rid):
            d = e.data or {}
            named.update(d.get("hosts") or [])
            for hosts in (d.get("to") or {}).values():
                named.update(hosts)
            if d.get("host"):
                named.add(d["host"])
        return [s.host for s in self.steps(rid) if s.state != "planned" and s.host not in named]


def with_drain(matrix: Matrix, **drain: Any) -> Matrix:
    """The matrix with every pool's `rollout.drain` set to `drain`."""
    pools = {}
    for name, p in matrix.pools.items():
        d = p.rollout.drain.model_copy(update=drain)
        pools[name] = p.model_copy(update={"rollout": p.rollout.model_copy(update={"drain": d})})
    return matrix.model_copy(update={"pools": pools})


_KILL_AT = """
import os, signal, sys
from fleet.jobs.rollout import core
label, argv = sys.argv[1], sys.argv[2:]
init = core.EngineCore.__init__
def killing(self, *a, **kw):
    init(self, *a, **kw)
    def checkpoint(at):
        if at == label:
            os.kill(os.getpid(), signal.SIGKILL)
    self._checkpoint = checkpoint
core.EngineCore.__init__ = killing
from fleet.cli.app import run
run(argv)
"""


def fleet_killed_at(label: str, *args: str) -> list[str]:
    """argv of `python -m fleet ARGS` whose rollout controller SIGKILLs itself at the engine's
    checkpoint `label` ("created": right after the rollout row is written, before anything
    else), as a real kill at that instant would leave it."""
    import sys

    return [sys.executable, "-c", _KILL_AT, label, *args]
