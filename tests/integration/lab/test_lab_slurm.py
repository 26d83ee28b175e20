"""The session lab's real Slurm: nodes idle after up, jobs run inside the lab hosts, reboots (by the
host, by the lab, through Slurm) bring slurmd and the node back, gres, status, teardown coverage.

The tests use h4 (L40S x4) and h5 (H100 x8), which test_lab.py leaves alone, and start from them
idle: earlier tests of the session may have left faults, and `fleet node-check` (the
HealthCheckProgram, every 10 s) drains a node it finds faulty and never resumes it.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from fleet.lab import hosts as H
from fleet.lab import lab
from fleet.lab import slurm as S
from fleet.lab.model import PROFILES

pytestmark = pytest.mark.lab


def sh(env: dict[str, str], *argv: str, timeout: float = 30) -> str:
    cp = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    assert cp.returncode == 0, f"{' '.join(argv)} exited {cp.returncode}: {cp.stderr}{cp.stdout}"
    return cp.stdout


def node(env: dict[str, str], name: str) -> tuple[str, str, str]:
    """(sinfo long state, reason, reason owner) of a node."""
    out = sh(env, "sinfo", "-h", "-N", "-p", "lab", "-n", name, "-o", "%T|%E|%u").strip()
    state, reason, user = out.split("|", 2)
    return state, reason, user


def diag(env: dict[str, str], name: str) -> str:
    """For failure messages: the node as scontrol shows it, and the end of the lab's Slurm logs."""
    conf = env["SLURM_CONF"]
    run = conf[: conf.index("/slurm/")]
    out = subprocess.run(["scontrol", "show", "node", name], env=env, capture_output=True,
                         text=True, timeout=10).stdout
    for log in (f"{run}/slurm/ctld/slurmctld.log",
                f"{run}/hosts/{name}/root/var/log/slurm/slurmd.log"):
        try:
            text = Path(log).read_text(errors="replace")
        except OSError:
            continue
        lines = [ln for ln in text.splitlines() if "pmix" not in ln.lower()]
        out += f"\n--- {log}\n" + "\n".join(lines[-15:])
    return out


def wait_node(env: dict[str, str], name: str, want: str, timeout: float = 20) -> float:
    """Seconds until the node's sinfo state is `want`."""
    t0 = time.monotonic()
    seen = []
    while time.monotonic() - t0 < timeout:
        st = node(env, name)
        if not seen or seen[-1] != st:
            seen.append(st)
        if st[0] == want:
            return time.monotonic() - t0
        time.sleep(0.1)
    raise AssertionError(
        f"{name} not {want} within {timeout} s: went through {seen}\n{diag(env, name)}"
    )


def wait_boot(lab_paths, name: str, before: str, timeout: float = 20) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while H.boot_info(lab_paths, name).get("boot_id") == before:
        assert time.monotonic() < deadline, f"{name} did not reboot within {timeout} s"
        time.sleep(0.1)


def boot_id(lab_paths, name: str) -> str:  # noqa: ANN001
    return str(H.boot_info(lab_paths, name).get("boot_id"))


def job_state(env: dict[str, str], job: str) -> str:
    return sh(env, "squeue", "-h", "-j", job, "-t", "all", "-o", "%T|%N").strip()


def slurmd_pid(lab_paths, name: str) -> int | None:  # noqa: ANN001
    root = str(lab_paths.host_root(name))
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            exe = os.readlink(f"/proc/{d}/exe")
            pr = os.readlink(f"/proc/{d}/root")
        except OSError:
            continue
        if exe.endswith("/slurmd-wlm") and pr == root:
            return int(d)
    return None


MINE = ("h4", "h5")


@pytest.fixture(autouse=True)
def nodes_ready(lab_paths, slurm_env) -> None:  # noqa: ANN001
    """h4 and h5 without injected faults and idle (resumed if an earlier test left them drained)."""
    for name in MINE:
        lab.reset(lab_paths, name)
        state = node(slurm_env, name)[0]
        if state.startswith(("drain", "down")):
            sh(slurm_env, "scontrol", "update", f"nodename={name}", "state=resume")
        if state != "idle":
            wait_node(slurm_env, name, "idle", timeout=30)


def test_every_node_was_idle_seconds_after_up(lab_state, slurm_env) -> None:
    assert lab_state.slurm and lab_state.slurm_ready_s is not None
    assert lab_state.slurm_ready_s < 10, "daemons started -> all nodes idle"
    parts = sh(slurm_env, "sinfo", "-h", "-o", "%R|%N").split()
    assert "lab|h[1-5]" in parts and "h100|h[2,5]" in parts and "l40s|h4" in parts


def test_sbatch_runs_on_the_node_and_completes(slurm_env) -> None:
    job = sh(slurm_env, "sbatch", "--parsable", "-w", "h4", "-o", "/dev/null",
             "--wrap", "sleep 3").strip()
    deadline = time.monotonic() + 40
    seen = set()
    while (st := job_state(slurm_env, job)) != "COMPLETED|h4":
        seen.add(st)
        assert time.monotonic() < deadline, f"job {job}: {st} (seen {seen})"
        time.sleep(0.2)
    assert "RUNNING|h4" in seen


def test_a_job_runs_inside_the_lab_host(slurm_env, hosts) -> None:
    cmd = "hostname; cat /proc/driver/nvidia/version; dpkg-query -W -f='${Package} ${Version}\\n'"
    out = sh(slurm_env, "srun", "-w", "h5", "-I5", "sh", "-c", cmd, timeout=60)
    lines = out.splitlines()
    assert lines[0] == "lab-h5"
    assert lines[1].startswith("NVRM version: NVIDIA UNIX x86_64 Kernel Module  ")
    # the same module and the same dpkg database as the host shows over SSH
    assert out == hosts["h5"].sh(cmd)[1]
    assert any(ln.startswith("nvidia-driver-") for ln in lines)


def test_batch_output_lands_on_the_host(slurm_env, hosts) -> None:
    job = sh(slurm_env, "sbatch", "--parsable", "-w", "h5", "-o", "/root/slurm-%j.out",
             "--wrap", "hostname; cat /etc/hostname").strip()
    deadline = time.monotonic() + 40
    while not job_state(slurm_env, job).startswith("COMPLETED"):
        assert time.monotonic() < deadline, job_state(slurm_env, job)
        time.sleep(0.2)
    assert hosts["h5"].sh(f"cat /root/slurm-{job}.out")[1].split() == ["lab-h5", "lab-h5"]


def test_gres_shows_the_hosts_gpus(lab_state, slurm_env) -> None:
    for h in lab_state.hosts:
        text = sh(slurm_env, "scontrol", "show", "node", h.name)
        assert f"Gres=gpu:{h.gpu_model.lower()}:{PROFILES[h.gpu_model].count}" in text, text
        assert "INVAL" not in text
    out = sh(slurm_env, "srun", "-w", "h5", "-I5", "--gres=gpu:h100:2", "sh", "-c",
             "echo $CUDA_VISIBLE_DEVICES", timeout=60)
    assert out.strip() == "0,1"


def slurmd_started(env: dict[str, str], name: str) -> str:
    text = sh(env, "scontrol", "show", "node", name)
    return text.split("SlurmdStartTime=")[1].split()[0]


def wait_slurmd_back(lab_paths, env: dict[str, str], name: str, started: str,  # noqa: ANN001
                     old_pid: int | None, timeout: float = 15) -> int:
    """Until the host runs a new slurmd, slurmctld saw it start, and the node is idle."""
    deadline = time.monotonic() + timeout
    while True:
        pid = slurmd_pid(lab_paths, name)
        if pid not in (None, old_pid) and slurmd_started(env, name) != started \
                and node(env, name)[0] == "idle":
            return pid  # type: ignore[return-value]
        assert time.monotonic() < deadline, (pid, old_pid, node(env, name))
        time.sleep(0.1)


def test_host_reboot_brings_slurmd_and_the_node_back(lab_paths, slurm_env, hosts) -> None:
    pid = slurmd_pid(lab_paths, "h4")
    assert pid is not None
    started = slurmd_started(slurm_env, "h4")
    hosts["h4"].reboot_and_wait()
    pid = wait_slurmd_back(lab_paths, slurm_env, "h4", started, pid)
    # a power cycle by the lab (SIGKILL of the host's namespaces) too
    time.sleep(1.1)  # SlurmdStartTime has whole seconds
    started = slurmd_started(slurm_env, "h4")
    before = boot_id(lab_paths, "h4")
    lab.reboot(lab_paths, "h4")
    assert boot_id(lab_paths, "h4") != before
    wait_slurmd_back(lab_paths, slurm_env, "h4", started, pid)


def test_scontrol_reboot_asap_nextstate_resume(lab_paths, slurm_env) -> None:
    before = boot_id(lab_paths, "h5")
    sh(slurm_env, "scontrol", "reboot", "ASAP", "nextstate=resume", "reason=fleet-test: reboot",
       "h5")
    wait_boot(lab_paths, "h5", before)
    took = wait_node(slurm_env, "h5", "idle", timeout=15)
    assert node(slurm_env, "h5") == ("idle", "none", "Unknown")
    assert took < 10
    log = (lab_paths.host_root("h5") / "var/log/lab-reboots.log").read_text()
    assert log.splitlines()[-1].split()[1] == "reboot", "Slurm ran the host's own /sbin/reboot"


def test_reboot_asap_without_nextstate_resumes_even_another_drain(lab_paths, slurm_env) -> None:
    """Slurm 22.05 gives ASAP a default next state of RESUME: after the reboot the node is idle,
    the earlier drain (someone else's) and both reasons gone."""
    sh(slurm_env, "scontrol", "update", "nodename=h4", "state=drain", "reason=ops: RMA 1")
    assert node(slurm_env, "h4")[:2] == ("drained", "ops: RMA 1")
    before = boot_id(lab_paths, "h4")
    sh(slurm_env, "scontrol", "reboot", "ASAP", "reason=fleet-test: asap", "h4")
    assert node(slurm_env, "h4")[1].startswith("fleet-test: asap"), "the reason was replaced"
    wait_boot(lab_paths, "h4", before)
    wait_node(slurm_env, "h4", "idle", timeout=15)
    assert node(slurm_env, "h4") == ("idle", "none", "Unknown")


def test_plain_reboot_of_a_drained_node_keeps_the_drain(lab_paths, slurm_env) -> None:
    """Without ASAP and without nextstate the drain survives; the reason gets ' : reboot issued'."""
    sh(slurm_env, "scontrol", "update", "nodename=h4", "state=drain", "reason=fleet-test: drain")
    before = boot_id(lab_paths, "h4")
    try:
        sh(slurm_env, "scontrol", "reboot", "h4")
        wait_boot(lab_paths, "h4", before)
        wait_node(slurm_env, "h4", "drained", timeout=15)
        assert node(slurm_env, "h4") == ("drained", "fleet-test: drain : reboot issued", "root")
        assert "REBOOT" not in sh(slurm_env, "scontrol", "show", "node", "h4").split("State=")[1]
    finally:
        sh(slurm_env, "scontrol", "update", "nodename=h4", "state=resume")
    wait_node(slurm_env, "h4", "idle")


def test_status_and_inventory_report_slurm(lab_paths, lab_state, project_root) -> None:
    import runpy

    st = lab.status(lab_paths)
    assert st["slurm_conf"] == lab_state.slurm_conf
    assert {h["name"]: h["slurm_state"] for h in st["hosts"]}["h5"] == "idle"
    os.environ["FLEET_LAB_DIR"] = str(lab_paths.run)
    try:
        inv = runpy.run_path(str(project_root / "inventories" / "lab.py"))
    finally:
        os.environ.pop("FLEET_LAB_DIR")
    for _, data in inv["lab"]:
        assert data["scheduler"] == "slurm" and data["slurm_conf"] == lab_state.slurm_conf


def test_fleet_and_the_health_check_run_inside_a_host(hosts, lab_state) -> None:
    h = hosts["h2"]
    rc, out, err = h.sh("fleet --help", check=False)
    assert rc == 0 and "lab" in out and "Usage" in out, err
    for d in lab_state.fleet_binds:
        assert h.sh(f"touch {d}/.fleet-lab-rw-test", check=False)[0] != 0, f"{d} is read-only"
    rc, out, err = h.sh("env -i /usr/local/sbin/fleet-lab-healthcheck", check=False)
    assert rc in (0, 1), out + err  # node-check's verdict (1: failing findings) or no node-check
    assert "not found" not in out + err and "No such file" not in out + err
    # as slurmd runs it (no PATH): never "command not found" (rc 127) in slurmd's log
    log = h.sh("cat /var/log/slurm/slurmd.log")[1]
    assert "health_check failed: rc:127" not in log
    assert h.sh("scontrol show node h2 | head -1")[1].startswith("NodeName=h2"), "scontrol in host"


def test_slurm_processes_are_lab_processes(lab_paths, lab_state) -> None:
    """`fleet lab down` kills and checks what `_lab_processes` finds: it must see every Slurm
    daemon of the lab (slurmctld's helper keeps no lab path in its command line)."""
    ours = set(lab._lab_processes(lab_paths.run))
    names: dict[str, int] = {}
    for pid in ours:
        try:
            exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
        except OSError:
            continue
        names[exe] = names.get(exe, 0) + 1
    assert names.get("slurmctld-wlm", 0) >= 1 and names.get("munged") == 1, names
    assert names.get("slurmd-wlm") == len(lab_state.hosts), names
    sp = S.SlurmPaths.of(lab_paths)
    assert sp.socket.exists() and str(sp.root).startswith(str(lab_paths.run))
