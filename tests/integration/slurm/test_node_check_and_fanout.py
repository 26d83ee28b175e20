"""Slurm as the probe's fan-out engine and `fleet node-check` as its HealthCheckProgram, on the
lab's real Slurm (slurmctld here, a chrooted slurmd per lab host, munge).

- `fleet probe --via slurm --partition lab` (one srun) sees the same hosts as the SSH probe:
  same boot, driver, GPUs and serials, packages; an admin-drained node is reported at once,
  not waited on.
- The lab's HealthCheckProgram runs `fleet node-check` inside each host every
  HealthCheckInterval: an Xid 79 gets the node drained with a `fleet:` reason within one
  interval (plus a margin); once an admin drains it with their own reason, the failing checks
  that follow leave that reason alone.

Host h4 (pool l40s) is this module's; every change to it is undone at the end: the fault reset,
the host rebooted (the Xid stays in this boot's kernel log, and node-check reads the whole
boot), the node resumed and seen idle through a full health-check interval.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from fleet.domain.facts import HostFacts
from fleet.history import open_history
from fleet.jobs.probe import ProbeResult, probe_inventory
from fleet.lab import lab
from fleet.lab.slurm_health import set_health_interval

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[3]
INVENTORY = ROOT / "inventories" / "lab.py"
HOST = "h4"
PARTITION = "lab"
MARGIN_S = 15.0  # node-check takes under a second; slurmd's timer and a loaded CI box the rest


def sh(env: dict[str, str], *argv: str, check: bool = True) -> str:
    p = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=30)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {p.returncode}: {p.stderr}{p.stdout}")
    return p.stdout


def node(env: dict[str, str], name: str) -> tuple[str, str]:
    """(state, reason) as sinfo prints them for one node of one partition (trap 4)."""
    out = sh(env, "sinfo", "-h", "-N", "-n", name, "-p", PARTITION, "-o", "%T|%E").strip()
    state, _, reason = out.partition("|")
    return state, reason


def wait_for(env: dict[str, str], name: str, ok: Any, timeout: float) -> tuple[float, str, str]:
    start = time.monotonic()
    state, reason = node(env, name)
    while not ok(state, reason):
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{name} still {state} ({reason}) after {timeout:g} s")
        time.sleep(0.5)
        state, reason = node(env, name)
    return time.monotonic() - start, state, reason


FAST_INTERVAL_S = 3  # this module's HealthCheckInterval; the session lab's (30 s) comes back after


@pytest.fixture(scope="module")
def interval(lab_state, slurm_env) -> Iterator[float]:  # noqa: ANN001 - conftest fixtures
    """The health checks every FAST_INTERVAL_S for this module, read back from slurm.conf as
    scontrol shows it in effect; the session's interval again at the end."""
    conf = Path(lab_state.slurm_conf)
    before = set_health_interval(conf, FAST_INTERVAL_S, slurm_env)
    try:
        shown = sh(slurm_env, "scontrol", "show", "config")
        m = re.search(r"^HealthCheckInterval\s*=\s*(\d+)", shown, re.M)
        assert m and int(m.group(1)) == FAST_INTERVAL_S, m and m.group(0)
        yield float(FAST_INTERVAL_S)
    finally:
        set_health_interval(conf, before, slurm_env)


@pytest.fixture(scope="module")
def env(lab_paths, slurm_env) -> Iterator[dict[str, str]]:  # noqa: ANN001 - conftest fixtures
    """SLURM_CONF for the commands; FLEET_LAB_DIR for the inventory; h4 healthy at the end."""
    import os

    e = {**slurm_env, "FLEET_LAB_DIR": str(lab_paths.run)}
    saved = os.environ.get("FLEET_LAB_DIR")
    os.environ["FLEET_LAB_DIR"] = str(lab_paths.run)
    try:
        yield e
    finally:
        if saved is None:
            os.environ.pop("FLEET_LAB_DIR", None)
        else:
            os.environ["FLEET_LAB_DIR"] = saved


def probe(tmp_path: Path, name: str, **kw: Any) -> dict[str, ProbeResult]:
    with open_history(str(tmp_path / f"{name}.db")) as h:
        return {r.host: r for r in probe_inventory(INVENTORY, None, h, frameworks=False,
                                                   now=lambda: datetime.now(UTC), **kw)}


def essence(f: HostFacts) -> dict[str, Any]:
    """The facts that say which host, which driver and which GPUs."""
    pk = f.versions.packages
    return {
        "source": f.source,
        "hostname": f.identity.hostname if f.identity else None,
        "boot_id": f.identity.boot_id if f.identity else None,
        "driver": (f.versions.driver_library, f.versions.driver_kernel_module,
                   f.versions.kernel_module_flavor, f.versions.cuda_driver_api),
        "gpus": [(g.index, g.name, g.uuid, g.serial, g.pci_bus_id) for g in f.gpus],
        "gpu_count": f.gpu_count,
        "packages": sorted((p.name, p.version, p.held) for p in pk.items) if pk else None,
        "toolkits": sorted((t.path, t.version) for t in f.versions.toolkits or []),
        "device_nodes": sorted(d.path for d in f.device_nodes or []),
    }


def notable(r: ProbeResult) -> list[tuple[str, str]]:
    return sorted((f.check, f.severity.value) for f in r.findings if f.severity.value != "ok")


def failed_checks(hosts: Any) -> int:
    """How many failing health checks this host's slurmd has logged so far."""
    out = hosts[HOST].sh("grep -c 'health_check failed' /var/log/slurm/slurmd.log",
                         check=False)[1]
    return int(out.strip() or 0)


def test_srun_probe_sees_what_ssh_sees_and_reports_a_drained_node(
        env: dict[str, str], lab_state, tmp_path: Path) -> None:  # noqa: ANN001
    ready = {n for n in (h.name for h in lab_state.hosts)
             if node(env, n)[0] in ("idle", "mixed")}
    assert len(ready) >= 3, f"too few idle lab nodes to compare: {sorted(ready)}"
    ssh = probe(tmp_path, "ssh")
    start = time.monotonic()
    srun = probe(tmp_path, "srun", via="slurm", partition=PARTITION)
    took = time.monotonic() - start
    assert set(srun) == set(ssh) == {h.name for h in lab_state.hosts}
    for name in ready:
        a, b = ssh[name], srun[name]
        assert a.facts is not None and b.facts is not None, (name, a.error, b.error)
        assert b.facts.source == "nvml"
        assert essence(b.facts) == essence(a.facts), name
        assert notable(b) == notable(a), name
    print(f"\nssh and srun probes agree on {len(ready)} node(s); srun probe {took:.2f} s")

    sh(env, "scontrol", "update", f"nodename={HOST}", "state=drain", "reason=ops: fan-out test")
    try:
        start = time.monotonic()
        again = probe(tmp_path, "srun2", via="slurm", partition=PARTITION)
        took = time.monotonic() - start
        assert not again[HOST].reachable and again[HOST].facts is None
        assert again[HOST].error == "not probed: Slurm says drained (ops: fan-out test)"
        assert took < 30, f"the probe waited on a drained node ({took:.1f} s)"
        for name in ready - {HOST}:
            assert again[name].facts is not None, (name, again[name].error)
    finally:
        sh(env, "scontrol", "update", f"nodename={HOST}", "state=resume")
    wait_for(env, HOST, lambda s, r: s == "idle", 10)


def test_health_check_drains_on_xid79_and_keeps_an_admin_drain(
        env: dict[str, str], lab_paths, hosts, interval: float) -> None:  # noqa: ANN001
    state, reason = node(env, HOST)
    assert state == "idle", f"{HOST} is {state} ({reason}) before the test"
    try:
        # the GPU falls off the bus: the next health check drains the node with fleet's reason
        lab.inject(lab_paths, HOST, ["xid:gpu=0,code=79"])
        took, state, reason = wait_for(
            env, HOST, lambda s, r: s.startswith("drain") and r.startswith("fleet:"),
            interval + MARGIN_S)
        assert reason.startswith("fleet: health: gpu.fallen_off_bus: "), reason
        print(f"\n{HOST} drained {took:.1f} s after the Xid 79 (HealthCheckInterval "
              f"{interval:g} s): {reason}")

        # an admin takes the node over with their own reason: failing checks leave it alone
        sh(env, "scontrol", "update", f"nodename={HOST}", "state=drain", "reason=ops: RMA 1")
        before = failed_checks(hosts)
        deadline = time.monotonic() + interval + MARGIN_S
        while failed_checks(hosts) <= before:  # until one more health check ran and failed
            assert time.monotonic() < deadline, "no failing health check logged by slurmd"
            time.sleep(0.5)
        assert node(env, HOST) == ("drained", "ops: RMA 1")
    finally:
        lab.reset(lab_paths, HOST)
        hosts[HOST].reboot_and_wait()  # a new boot: the Xid is in the last boot's log now
        wait_for(env, HOST, lambda s, r: "*" not in s and not s.startswith(("down", "unk")),
                 60)
        sh(env, "scontrol", "update", f"nodename={HOST}", "state=resume", check=False)
    wait_for(env, HOST, lambda s, r: s == "idle", 20)
    time.sleep(interval + 2)  # a full interval later, node-check still passes: nothing drained
    assert node(env, HOST)[0] == "idle"
