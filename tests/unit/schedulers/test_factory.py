from __future__ import annotations

import pytest

from fleet.domain.ports import AdminState
from fleet.errors import BadInput
from fleet.schedulers import make_scheduler
from fleet.schedulers.kubernetes import KubernetesScheduler
from fleet.schedulers.none import NoneScheduler
from fleet.schedulers.runner import subprocess_runner
from fleet.schedulers.slurm import SlurmScheduler
from fleet.sim.scheduler import SimScheduler


def test_factory_names() -> None:
    assert isinstance(make_scheduler("none"), NoneScheduler)
    assert isinstance(make_scheduler("slurm", poll_s=1), SlurmScheduler)
    assert isinstance(make_scheduler("Kubernetes", context="c"), KubernetesScheduler)
    assert isinstance(make_scheduler("k8s"), KubernetesScheduler)
    assert isinstance(make_scheduler("sim"), SimScheduler)
    with pytest.raises(BadInput):
        make_scheduler("pbs")


def test_none_scheduler_records_a_noop_drain() -> None:
    s = make_scheduler("none")
    assert s.state("h1") == AdminState("available")
    r = s.drain("h1", "wave 1", wait_s=600)
    assert r.ok and r.changed and r.seconds == 0
    assert s.state("h1") == AdminState("drained", "fleet: wave 1", by_fleet=True)
    assert s.drain("h1", "wave 1").changed is False
    assert s.undrain("h1").changed is True
    assert s.state("h1") == AdminState("available")


def test_subprocess_runner_timeout_and_missing_command() -> None:
    run = subprocess_runner()
    rc, _, err = run(["sleep", "5"], 0.2)
    assert rc == 124 and "timed out" in err
    rc, _, err = run(["/nonexistent/tool"], 1)
    assert rc == 127
    rc, out, _ = run(["echo", "a; rm -rf /"], 5)  # an argv, never a shell
    assert rc == 0 and out == "a; rm -rf /\n"


def test_kubernetes_takes_the_inventorys_kubeconfig() -> None:
    """The lab's inventory names its own kubeconfig: `--scheduler kubernetes` reaches that
    cluster, never ~/.kube/config; hosts naming different files are refused."""
    from fleet.domain.ports import HostRef
    from fleet.schedulers import scheduler_for

    refs = [HostRef(n, data={"scheduler": "slurm", "kubeconfig": "/run/lab/kube/kubeconfig"})
            for n in ("h1", "h2")]
    sched = scheduler_for("kubernetes", refs)
    assert isinstance(sched, KubernetesScheduler)
    assert sched.global_args == ["--kubeconfig", "/run/lab/kube/kubeconfig"]
    assert scheduler_for("kubernetes", [HostRef("h1")]).global_args == []  # type: ignore[attr-defined]
    other = HostRef("h3", data={"kubeconfig": "/elsewhere"})
    with pytest.raises(BadInput, match="different kubeconfig"):
        scheduler_for("kubernetes", [*refs, other])
