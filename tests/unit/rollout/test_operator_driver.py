"""A rollout on a cluster where the GPU Operator runs some hosts' drivers as containers
(Kubernetes: the Node's `nvidia.com/gpu.deploy.driver` label and the driver pods): such a host
is skipped before the drain (no pod evicted for a pin fleet refuses) and the others move; a
host whose owner cannot be read fails before the drain, and the health gate stops the wave."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleet.domain.driver_owner import DriverOwner
from fleet.domain.matrix.models import Matrix
from fleet.jobs.rollout.fence import Fenced
from tests.unit.rollout.helpers import Rig, Wrap


class Cluster(Wrap):
    """The simulated scheduler, plus the Node's word on each host's driver."""

    def __init__(self, inner: object, owners: dict[str, DriverOwner]) -> None:
        super().__init__(inner)
        self.owners = owners
        self.asked: list[str] = []

    def driver_owner(self, host: str) -> DriverOwner | None:
        self.asked.append(host)
        return self.owners.get(host)


def _run(matrix: Matrix, tmp_path: Path, owner: DriverOwner) -> tuple[Any, Rig, Cluster, str,
                                                                      list[str]]:
    rig = Rig(matrix, tmp_path, pools={"l40s": 4})
    names = sorted(h.name for h in rig.fleet.hosts())
    sim = rig.fleet.scheduler()
    cluster = Cluster(sim, {names[0]: owner})
    drained: list[str] = []
    drain = sim.drain

    def spy(host: str, *a: Any, **kw: Any) -> Any:
        drained.append(host)
        return drain(host, *a, **kw)

    sim.drain = spy  # type: ignore[method-assign]
    eng = rig.engine()
    eng.scheduler = Fenced(cluster, eng._guard)  # type: ignore[assignment]  # behind the fence
    return rig.start(engine=eng), rig, cluster, names[0], drained


def test_an_operator_host_is_skipped_before_the_drain(matrix: Matrix, tmp_path: Path) -> None:
    res, rig, cluster, op, drained = _run(
        matrix, tmp_path, DriverOwner("gpu-operator", "pod gpu-operator/nvidia-driver-x"))
    steps = {s.host: s for s in rig.steps(res.rollout_id)}
    assert res.status == "completed", res.reason
    assert op in cluster.asked and op not in drained, drained
    assert steps[op].state == "skipped" and "spec.driver.version" in steps[op].detail["why"]
    assert rig.fleet.installed_release(op) == rig.fleet.state(op)["initial"]
    others = [h for h in steps if h != op]
    assert all(h in drained for h in others) and len(others) == 3
    assert {steps[h].state for h in others} == {"done"}, {h: steps[h].state for h in others}


def test_a_host_whose_driver_owner_cannot_be_read_fails_undrained(
        matrix: Matrix, tmp_path: Path) -> None:
    res, rig, _cluster, host, drained = _run(
        matrix, tmp_path, DriverOwner("unknown", "node: connection refused"))
    step = {s.host: s for s in rig.steps(res.rollout_id)}[host]
    assert step.state == "failed" and "cannot tell" in step.detail["error"], step.detail
    assert host not in drained
    assert res.status == "rolled_back" and host in res.reason  # the health gate stops the wave
