"""The pre-reboot gate over real SSH on the lab (root; CI runs it): with `kernel-without-module`
or `secure-boot-unsigned` injected, `fleet check` fails before any reboot, `fleet apply` of a
release that needs a reboot refuses without rebooting (boot id unchanged) and names the kernel,
and after `fleet lab reset` the same apply goes through; a rollout that reaches the host does not
reboot it either: the step fails naming the kernel, the wave is rolled back, the host stays
drained by fleet.

h3 is the lab's A100 host (pool a100); the test pins r580 on it first, then each case moves it
to the other of r570 and r580, which changes the kernel module (a reboot).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.lab import boot as lab_boot
from fleet.lab import lab
from fleet.lab.slurm_health import set_health_interval
from tests.integration.remote.test_pin_on_lab import INVENTORY, MATRIX, fleet, wait_for_ssh

pytestmark = pytest.mark.lab
HOST = "h3"
LAB_MATRIX = str(Path(__file__).resolve().parents[3] / "matrices" / "lab.yaml")
QUIET_INTERVAL_S = 3600


@pytest.fixture(scope="module")
def env(lab_paths, hosts, tmp_path_factory) -> Iterator[dict[str, str]]:  # noqa: ANN001
    lab.reset(lab_paths, HOST)
    wait_for_ssh(hosts[HOST])
    hosts[HOST].release_pins()
    hosts[HOST].reboot_and_wait()
    db = tmp_path_factory.mktemp("history") / "fleet.db"
    env = {**os.environ, "FLEET_LAB_DIR": str(lab_paths.run), "FLEET_DB": str(db),
           "FLEET_MATRIX": MATRIX, "FLEET_INVENTORY": INVENTORY, "COLUMNS": "200"}
    rc, doc = fleet(env, "apply", "-r", "r580-cuda13.0", "-l", HOST)
    assert rc == 0, doc
    yield env
    lab.reset(lab_paths, HOST)


DRIVERS = {"r580-cuda13.0": "580.95.05", "r570-cuda12.8": "570.133.20"}


@pytest.mark.parametrize("fault,says", [
    ("kernel-without-module", f"kernel {lab_boot.NEWER} has no nvidia {{driver}} module"),
    ("secure-boot-unsigned", "Secure Boot is on"),
])
def test_gate_refuses_then_reset_lets_the_same_apply_through(env, lab_paths, hosts, fault: str,
                                                              says: str) -> None:
    """Each case moves h3 to the release it is not on (r580 -> r570, then back): one reboot a
    case, the one after `lab reset` (before, each case first pinned r580 again: one more)."""
    h = hosts[HOST]
    on = {h.sh("cat /var/lib/gpusim/module.pending")[1].strip()}
    target = next(r for r, v in DRIVERS.items() if v not in on)
    lab.inject(lab_paths, HOST, [fault])
    # before anyone reboots: fleet check says so
    rc, _ = fleet(env, "probe", "-l", HOST)
    rc, doc = fleet(env, "check", "-l", HOST)
    assert rc == 1, doc
    text = str(doc)
    assert "node.next_boot" in text and "would lose the GPU driver" in text
    # a pin that needs a reboot is refused without one
    boot = h.boot_id()
    rc, doc = fleet(env, "apply", "-r", target, "-l", HOST)
    assert rc == 1, doc
    (res,) = doc["hosts"]
    assert res["outcome"] == "failed" and not res["rebooted"]
    assert says.format(driver=DRIVERS[target]) in (res["error"] or ""), res
    assert h.boot_id() == boot
    # after lab reset the same apply goes through, with its reboot
    lab.reset(lab_paths, HOST)
    rc, doc = fleet(env, "apply", "-r", target, "-l", HOST)
    assert rc == 0, doc
    assert doc["hosts"][0]["rebooted"] and h.boot_id() != boot


@pytest.fixture
def quiet_health(lab_paths, lab_state, slurm_env, hosts) -> Iterator[None]:  # noqa: ANN001
    """h3 in service, and no `fleet node-check` on it while the test's fault is in.

    The lab's HealthCheckProgram drains a node on any failing check (`fleet: health: ...`), and
    such a drain stays until someone resumes it: the fault itself would drain h3 within the
    30 s interval, and so does any moment the cases above leave its packages ahead of the
    loaded module (`driver.agreement`), which an apply then leaves drained. A rollout never
    takes over a drain it did not make: it skips the host ('drained by someone else') and
    never reaches the gate. So the interval goes up for the test (back after), a check already
    running is waited out, then `lab reset` resumes a health drain and any drain the cases
    left is resumed too (this module owns h3)."""
    conf = Path(lab_state.slurm_conf)
    before = set_health_interval(conf, QUIET_INTERVAL_S, slurm_env)
    try:
        deadline, clear = time.monotonic() + 60, 0
        while clear < 5:  # none running at five looks over a second
            running = hosts[HOST].sh("pgrep -f '[n]ode-check'", check=False)[0] == 0
            clear = 0 if running else clear + 1
            assert time.monotonic() < deadline, "a node-check on h3 still runs after 60 s"
            time.sleep(0.2)
        lab.reset(lab_paths, HOST)
        if "DRAIN" in _node(slurm_env)[0]:
            _resume(slurm_env)
        deadline = time.monotonic() + 60  # IDLE* (a missed ping under load) reads down
        while (now := _node(slurm_env))[0] != "IDLE":
            assert time.monotonic() < deadline, f"h3 not idle in Slurm after 60 s: {now}"
            time.sleep(0.5)
        yield
    finally:
        set_health_interval(conf, before, slurm_env)


def test_a_rollout_reaching_a_host_the_gate_refuses_does_not_reboot_it(
        env, lab_paths, hosts, slurm_env, quiet_health) -> None:  # noqa: ANN001
    """A rollout of pool a100 (h3 alone; `matrices/lab.yaml`: no bake, failure budget 0) with
    `kernel-without-module` on h3: fleet drains h3 in Slurm, installs the packages, and the
    gate refuses the reboot: boot id unchanged, the step fails naming the kernel, the policy
    rolls the wave back (packages back, the loaded module still theirs: no reboot either), and
    h3 stays drained by fleet (quarantined: its next boot would still lose the driver)."""
    h = hosts[HOST]
    on = h.sh("cat /var/lib/gpusim/module.pending")[1].strip()
    target = next(r for r, v in DRIVERS.items() if v != on)
    lab.inject(lab_paths, HOST, ["kernel-without-module"])
    boot = h.boot_id()
    e = {**env, "FLEET_MATRIX": LAB_MATRIX}
    try:
        rc, doc = fleet(e, "rollout", "start", "--pool", "a100", "--release", target)
        assert rc == 1 and doc["status"] == "rolled_back", doc
        assert h.boot_id() == boot
        said = f"kernel {lab_boot.NEWER} has no nvidia {DRIVERS[target]} module"
        assert f"({HOST} failed at reboot: the next reboot of " in doc["reason"], doc["reason"]
        assert said in doc["reason"], doc["reason"]
        rc, st = fleet(e, "rollout", "status", str(doc["rollout_id"]), "--hosts")
        (step,) = [s for s in st["host_steps"] if s["host"] == HOST]
        # the rollback put the packages back; its health check still finds the next boot
        # broken (now for the driver loaded, which the packages match again): quarantined
        assert step["state"] == "failed" and step["detail"].get("quarantined"), step
        assert f"kernel {lab_boot.NEWER} has no nvidia" in step["detail"]["error"], step
        state, reason = _node(slurm_env)
        assert "DRAIN" in state and reason.startswith("fleet:") and "health:" not in reason, (
            state, reason)
        assert h.sh("cat /var/lib/gpusim/module.pending")[1].strip() == on  # packages back
    finally:
        lab.reset(lab_paths, HOST)
        _resume(slurm_env)  # fleet's quarantine drain: the fault is gone with the reset
    assert h.boot_id() == boot


def _resume(slurm_env: dict[str, str]) -> None:
    subprocess.run(["scontrol", "update", f"nodename={HOST}", "state=resume"], env=slurm_env,
                   capture_output=True, timeout=30, check=False)


def _node(slurm_env: dict[str, str]) -> tuple[str, str]:
    """h3's (state, reason) as `sinfo` prints them."""
    out = subprocess.run(["sinfo", "-h", "-N", "-n", HOST, "-o", "%T|%E"], env=slurm_env,
                         capture_output=True, text=True, timeout=30, check=True).stdout
    state, _, reason = out.strip().splitlines()[0].partition("|")
    return state.upper(), reason
