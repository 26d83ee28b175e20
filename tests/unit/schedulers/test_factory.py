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
