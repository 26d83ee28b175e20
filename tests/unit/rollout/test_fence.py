"""The lock fence around a rollout's backend and scheduler keeps the ports they implement.

Python 3.12 checks `runtime_checkable` Protocols with `inspect.getattr_static`, which never
reaches `__getattr__`: a wrapper that only forwards dynamically fails `isinstance(x, NodeReboot)`
there (`reboot: slurm` refused, `on_timeout: cancel` never stopping a job). `static_isinstance`
below is that check, so these tests fail on such a wrapper under 3.11 too.
"""

from __future__ import annotations

import inspect
from collections import Counter
from typing import Any, Generic, Protocol

import pytest

from fleet.domain.ports import Backend, IdleCheck, JobControl, NodeReboot, Scheduler
from fleet.history.rollouts import LockLost
from fleet.jobs.rollout.fence import Fenced
from fleet.schedulers.kubernetes import KubernetesScheduler
from fleet.schedulers.none import NoneScheduler
from fleet.schedulers.slurm import SlurmScheduler
from fleet.sim import Latency, SimClock, SimFleet


def members(proto: type) -> set[str]:
    """A Protocol's members, as Python 3.12 lists them for `isinstance`."""
    names: set[str] = set()
    for base in proto.__mro__:
        if base in (object, Protocol, Generic) or base.__module__ == "typing":
            continue
        names |= {n for n in vars(base) if not n.startswith("_")}
        names |= set(getattr(base, "__annotations__", {}))
    return names


def static_isinstance(obj: Any, proto: type) -> bool:
    """`isinstance(obj, proto)` the 3.12 way: every member found without `__getattr__`."""
    for name in members(proto):
        try:
            inspect.getattr_static(obj, name)
        except AttributeError:
            return False
    return True


def _slurm() -> SlurmScheduler:
    return SlurmScheduler(lambda argv, t: (0, "", ""))


def _fleet() -> SimFleet:
    from datetime import date
    from pathlib import Path

    from fleet.domain.matrix.loader import load_matrix

    root = Path(__file__).resolve().parents[3]
    m = load_matrix(root / "matrices" / "example.yaml", today=date(2025, 6, 1)).matrix
    return SimFleet.build(m, None, 0, pools={"h100": 2}, clock=SimClock(),
                          latency=Latency.zero())


def test_members_sees_the_protocols() -> None:
    assert members(Scheduler) == {"name", "state", "drain", "undrain"}
    assert members(NodeReboot) == {"reboot_nodes"}
    assert {"probe", "apply", "reboot", "benchmark"} <= members(Backend)


@pytest.mark.parametrize(("target", "ports"), [
    (_slurm(), (Scheduler, JobControl, NodeReboot, IdleCheck)),
    (KubernetesScheduler(lambda argv, t: (0, "", "")), (Scheduler, IdleCheck)),
    (NoneScheduler(), (Scheduler, IdleCheck)),
])
def test_fenced_scheduler_has_every_port_member_its_target_has(target: Any,
                                                              ports: tuple[type, ...]) -> None:
    fenced = Fenced(target, lambda: None)
    for proto in ports:
        assert static_isinstance(target, proto)
        missing = {n for n in members(proto) if not hasattr(type(fenced), n)}
        assert not missing, f"{type(fenced).__name__} lacks {proto.__name__}: {missing}"
        assert static_isinstance(fenced, proto)
    for proto in (JobControl, NodeReboot, IdleCheck):  # the runtime_checkable ones
        assert isinstance(fenced, proto) == isinstance(target, proto), proto.__name__
    assert fenced.name == target.name


def test_fenced_backend_has_every_backend_member() -> None:
    fleet = _fleet()
    fenced = Fenced(fleet, lambda: None)
    missing = {n for n in members(Backend) if not hasattr(type(fenced), n)}
    assert not missing
    assert [h.name for h in fenced.hosts()] == [h.name for h in fleet.hosts()]
    sched = Fenced(fleet.scheduler(), lambda: None)  # the simulated Slurm: every port
    assert all(static_isinstance(sched, p) for p in (JobControl, NodeReboot, IdleCheck))


def test_no_port_the_target_lacks() -> None:
    fenced = Fenced(NoneScheduler(), lambda: None)
    assert not isinstance(fenced, NodeReboot) and not isinstance(fenced, JobControl)
    assert not static_isinstance(fenced, NodeReboot)


def test_host_calls_pass_the_guard_reads_do_not() -> None:
    calls: list[list[str]] = []

    def runner(argv: list[str], timeout: float | None) -> tuple[int, str, str]:
        calls.append(argv)
        if argv[0] == "squeue":
            return 0, "", ""
        return 0, "NodeName=n1 Arch=x86_64\n   State=IDLE ThreadsPerCore=2\n", ""

    lost = {"now": False}

    def guard() -> None:
        if lost["now"]:
            raise LockLost("taken over by someone else")

    fenced: Any = Fenced(SlurmScheduler(runner), guard)
    lost["now"] = True
    assert fenced.state("n1").state == "available"  # read-only: no guard
    assert fenced.idle("n1").value is True
    for call in (lambda: fenced.reboot_nodes(["n1"], "wave 1", timeout_s=1),
                 lambda: fenced.stop_jobs("n1", ["4711"], "cancel"),
                 lambda: fenced.drain("n1", "wave 1"), lambda: fenced.undrain("n1")):
        before = len(calls)
        with pytest.raises(LockLost):
            call()
        assert len(calls) == before  # stopped before any command ran
    assert fenced.unfenced.name == "slurm"
    assert fenced.drain_kick_s == 0.0  # the adapter's extras still reach through


class _Lock:
    """A lock check that counts its reads and can be lost; a clock the test moves."""

    def __init__(self) -> None:
        self.reads, self.lost, self.t = 0, False, 100.0

    def check(self) -> str | None:
        self.reads += 1
        return "taken over by ctl-b" if self.lost else None


def test_outside_a_batch_every_host_call_reads_the_lock() -> None:
    from fleet.jobs.rollout.fence import Guard

    lock = _Lock()
    guard = Guard(lock.check, clock=lambda: lock.t)
    guard()
    guard()
    assert lock.reads == 2
    lock.lost = True  # no time passes: the next call still reads, and stops
    with pytest.raises(LockLost, match="ctl-b"):
        guard()


def test_a_batch_reads_once_per_window_and_still_stops_a_lost_controller() -> None:
    from fleet.jobs.rollout.fence import Guard

    lock = _Lock()
    guard = Guard(lock.check, clock=lambda: lock.t, fresh_s=0.25)
    with guard.batch():
        for _ in range(1000):  # a thousand undrains that take no time: one read
            guard()
        assert lock.reads == 1
        lock.lost = True
        lock.t += 0.2  # within the window of the read that saw it held
        guard()
        lock.t += 0.05  # the window is over: read again, and stop
        with pytest.raises(LockLost):
            guard()
        with pytest.raises(LockLost):  # a failed read covers nothing
            guard()
    assert lock.reads == 3
    lock.lost = False
    with guard.batch():
        guard()
    lock.lost = True
    with guard.batch(), pytest.raises(LockLost):  # a new batch starts with a read
        guard()


def test_a_rollout_reads_the_lock_per_batch_not_per_host(matrix: Any, tmp_path: Any,
                                                         monkeypatch: Any) -> None:
    """60 hosts drained and undrained one call each: inside each step's batch the lock is read
    once (the clock stands still here), not once per host (2,030 reads at 1,000 hosts before,
    issue 28); every other host call still reads it."""
    from fleet.jobs.rollout import fence
    from tests.unit.rollout.helpers import Rig

    calls: Counter[str] = Counter()
    call = fence.Fenced._call

    def counted(self: Any, name: str, *a: Any, **k: Any) -> Any:
        calls[name] += name in fence.TOUCH
        return call(self, name, *a, **k)

    monkeypatch.setattr(fence.Fenced, "_call", counted)
    rig = Rig(matrix, tmp_path, pools={"h100": 60})
    eng = rig.engine()
    reads = [0]
    lost = eng._lost

    def counting() -> str | None:
        reads[0] += 1
        return lost()

    eng._guard._check, eng._guard._clock = counting, lambda: 0.0
    res = rig.start(engine=eng)
    assert res.status == "completed", res.reason
    assert calls["drain"] == calls["undrain"] == 60
    per_host = calls["drain"] + calls["undrain"]
    others = sum(calls.values()) - per_host
    batches = 2 * len(res.waves)  # one drain batch and one undrain batch per wave
    assert others < reads[0] <= others + batches, (reads[0], others, batches)
