"""`fleet diagnose` on the lab: a healthy host reads `healthy`, and each fault class is found,
both live over SSH and from a bundle collected with `fleet bundle collect`, with the same verdict.

The lab hosts share this machine's CPUs and memory (/proc/stat, /proc/loadavg and /proc/meminfo
are the machine's): on a busy 2-core CI machine the CPU question can rightly say "saturated"
while the lab runs. The verdicts are therefore compared with the CPU question set aside (its
finding, when there is one, must carry a measured busy share of at least 90 %), except in the
CPU test itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.domain.diagnose.questions import verdict
from fleet.lab import lab
from fleet.lab.boot import KERNEL

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[3]
INV = ROOT / "inventories" / "lab.py"
HOST = "h4"
SECONDS = "3"


@pytest.fixture(scope="module")
def host(lab_paths, hosts) -> Iterator[object]:  # noqa: ANN001
    lab.reset(lab_paths, HOST)
    hosts[HOST].reboot_and_wait()
    yield hosts[HOST]
    lab.reset(lab_paths, HOST)


@pytest.fixture
def clean(lab_paths, host) -> Iterator[object]:  # noqa: ANN001
    lab.reset(lab_paths, HOST)
    yield host
    lab.reset(lab_paths, HOST)


def fleet(lab_paths, *argv: str) -> tuple[int, dict]:  # noqa: ANN001
    env = {**os.environ, "FLEET_LAB_DIR": str(lab_paths.run)}
    p = subprocess.run([sys.executable, "-m", "fleet", *argv, "--json"], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=180)
    return p.returncode, json.loads(p.stdout)


def live_and_bundle(lab_paths, tmp_path: Path, gpu: bool = True) -> tuple[dict, dict]:  # noqa: ANN001
    """(live diagnosis, diagnosis of a collected bundle), each checked against its exit code;
    `gpu`: nvidia-smi works, so its dmon, pmon and topo captures are in the bundle."""
    rc_live, live = fleet(lab_paths, "diagnose", HOST, "-i", str(INV), "--seconds", SECONDS)
    rc_col, col = fleet(lab_paths, "bundle", "collect", HOST, "-i", str(INV), "-o",
                        str(tmp_path / "b"), "--seconds", SECONDS)
    assert rc_col == 0, col
    gpu_files = {"dmon.txt", "pmon.txt", "topo.txt"}
    assert {"nvidia-smi-q.xml", "meminfo", "stat", "df.txt", "ps.txt"} <= set(col["files"])
    assert (gpu_files <= set(col["files"])) if gpu else not (gpu_files & set(col["files"]))
    rc_b, bundle = fleet(lab_paths, "diagnose", str(tmp_path / "b"))
    for rc, d in ((rc_live, live), (rc_b, bundle)):
        assert d["schema"] == 1
        assert rc == (0 if d["verdict"] == "healthy" else 1), d
        assert {f: s for f, s in d["files"].items() if s != "missing"}, d
    assert live["mode"] == "live" and bundle["mode"] == "bundle"
    return live, bundle


def without_cpu(d: dict) -> str:
    """The verdict with the CPU question set aside (see the module docstring)."""
    from fleet.domain.diagnose.model import Answer, Finding

    for f in d["findings"]:
        if f["class"] == "host_cpu":
            busy = f["evidence"]["busy_pct"]
            assert busy is not None and busy >= 90, f
    findings = [Finding(f["class"], f["severity"], f["summary"], f["evidence"], f["next"],
                        f["remediation"], f["gpu"]) for f in d["findings"]
                if f["class"] != "host_cpu"]
    answers = [Answer(q["class"], q["status"], q["reason"]) for q in d["questions"]]
    return verdict(findings, answers)


def classes(d: dict) -> set[str]:
    return {f["class"] for f in d["findings"] if f["severity"] != "info"}


def test_healthy_host_reads_healthy_live_and_from_a_bundle(clean, lab_paths, tmp_path) -> None:  # noqa: ANN001
    live, bundle = live_and_bundle(lab_paths, tmp_path)
    assert without_cpu(live) == without_cpu(bundle) == "healthy", (live, bundle)
    for d in (live, bundle):
        assert classes(d) <= {"host_cpu"}
        status = {q["class"]: q["status"] for q in d["questions"]}
        # the GPU side was seen, not guessed: every GPU question answered
        assert all(status[c] == "ok" for c in ("gpu_idle", "throttled", "memory_bound",
                                               "gpu_memory", "pcie", "numa", "nvlink", "drift",
                                               "fallback", "hardware", "disk")), status
        assert status["queueing"] == "could_not_judge"
        # the boot facts the pre-reboot gate reads came along (boot.json): the lab's kernel
        boot = d["boot"]
        assert (boot["running_kernel"], boot["next_kernel"], boot["secure_boot"]) == (
            KERNEL, KERNEL, False), boot
        assert [k["version"] for k in boot["kernels"]] == [KERNEL], boot


@pytest.mark.parametrize(("fault", "expected"), [
    ("power", "throttled"),
    ("pcie-downtrain:gen=3,width=8", "pcie"),
    ("gpu-leak:mib=2048,rate=200", "gpu_memory"),
])
def test_gpu_fault_class_live_and_from_a_bundle(clean, lab_paths, tmp_path, fault: str,  # noqa: ANN001
                                                 expected: str) -> None:
    lab.inject(lab_paths, HOST, [fault])
    live, bundle = live_and_bundle(lab_paths, tmp_path)
    assert without_cpu(live) == without_cpu(bundle) == expected, (live, bundle)
    assert classes(live) - {"host_cpu"} == classes(bundle) - {"host_cpu"} == {expected}


def test_far_numa_process_live_and_from_a_bundle(clean, lab_paths, tmp_path) -> None:  # noqa: ANN001
    # a process pinned to CPU 0 uses GPU 0, whose CPU affinity (NUMA node 1) is CPU 1 only
    _, out, _ = clean.sh("setsid taskset -c 0 sleep 300 >/dev/null 2>&1 & echo $!")
    pid = out.strip()
    try:
        lab.inject(lab_paths, HOST, [f"far-numa:pid={pid},cpus=1,node=1"])
        live, bundle = live_and_bundle(lab_paths, tmp_path)
        assert without_cpu(live) == without_cpu(bundle) == "numa", (live, bundle)
        f = next(f for f in live["findings"] if f["class"] == "numa")
        assert f["evidence"]["pid"] == int(pid) and f["evidence"]["cpu"] == 0
    finally:
        clean.sh(f"kill {pid}", check=False)


def test_cpu_saturated_host_live_and_from_a_bundle(clean, lab_paths, tmp_path) -> None:  # noqa: ANN001
    # every CPU of the machine busy for the time of both samplings (the host's CPUs are the
    # machine's): 2 x (3 s of sampling + SSH) fits well inside 60 s
    _, out, _ = clean.sh("for i in $(seq $(nproc)); do setsid timeout 60 sh -c "
                         "'while :; do :; done' >/dev/null 2>&1 & echo $!; done; sleep 1")
    pids = " ".join(out.split())
    try:
        live, bundle = live_and_bundle(lab_paths, tmp_path)
        for d in (live, bundle):
            assert "host_cpu" in classes(d), d
            f = next(f for f in d["findings"] if f["class"] == "host_cpu")
            assert f["evidence"]["busy_pct"] >= 90
            assert without_cpu(d) == "healthy"
        assert live["verdict"] == bundle["verdict"] == "host_cpu"
    finally:
        clean.sh(f"kill {pids}", check=False)


def test_full_disk_live_and_from_a_bundle(clean, lab_paths, tmp_path) -> None:  # noqa: ANN001
    clean.sh("mkdir -p /mnt/fleet-full && mount -t tmpfs -o size=1m fleet-full /mnt/fleet-full"
             " && (dd if=/dev/zero of=/mnt/fleet-full/fill bs=64k count=64 2>/dev/null; true)")
    try:
        live, bundle = live_and_bundle(lab_paths, tmp_path)
        assert without_cpu(live) == without_cpu(bundle) == "disk", (live, bundle)
        f = next(f for f in bundle["findings"] if f["class"] == "disk")
        assert f["evidence"]["mount"] == "/mnt/fleet-full" and f["evidence"]["used_pct"] >= 99
    finally:
        clean.sh("umount /mnt/fleet-full", check=False)


def test_queueing_from_the_pools_metrics_url(clean, lab_paths, tmp_path) -> None:  # noqa: ANN001
    """The serving layer's metrics (a vLLM-shaped Prometheus text served on the host) named by
    `serving_metrics_url` in the inventory: fetched on the host (python3: the lab has no curl),
    queueing judged live and from the bundle."""
    metrics = ("vllm:num_requests_waiting{model_name=\"m\"} 12\n"
               "vllm:num_requests_running{model_name=\"m\"} 4\n"
               "vllm:request_queue_time_seconds_sum{model_name=\"m\"} 30\n"
               "vllm:request_queue_time_seconds_count{model_name=\"m\"} 10\n")
    clean.sh(f"mkdir -p /tmp/fleet-metrics && printf '%s' '{metrics}' > "
             "/tmp/fleet-metrics/metrics")
    # only the server goes to the background, its output away from the SSH channel
    _, out, _ = clean.sh("cd /tmp/fleet-metrics && { setsid python3 -m http.server 9400 --bind "
                         "127.0.0.1 >/dev/null 2>&1 </dev/null & echo $!; } && sleep 1")
    pid = out.strip()
    inv = tmp_path / "inv.py"
    inv.write_text(
        "import runpy\n"
        f"_lab = runpy.run_path({str(INV)!r})\n"
        f"served = [(n, {{**d, 'serving_metrics_url': 'http://127.0.0.1:9400/metrics'}})"
        f" for n, d in _lab['lab'] if n == {HOST!r}]\n")
    try:
        rc, live = fleet(lab_paths, "diagnose", HOST, "-i", str(inv), "--seconds", SECONDS)
        rc_col, col = fleet(lab_paths, "bundle", "collect", HOST, "-i", str(inv), "-o",
                            str(tmp_path / "b"), "--seconds", SECONDS)
        assert rc_col == 0 and {"metrics.txt", "metrics-url"} <= set(col["files"]), col
        rc_b, bundle = fleet(lab_paths, "diagnose", str(tmp_path / "b"))
        assert rc == rc_b == 1
        assert without_cpu(live) == without_cpu(bundle) == "queueing", (live, bundle)
        f = next(f for f in live["findings"] if f["class"] == "queueing")
        assert f["evidence"]["waiting"] == 12 and f["evidence"]["queue_wait_s_mean"] == 3.0
        assert f["evidence"]["source"] == "http://127.0.0.1:9400/metrics"
    finally:
        clean.sh(f"kill {pid}", check=False)


def test_xid_in_the_kernel_log_is_hardware(clean, lab_paths, tmp_path) -> None:  # noqa: ANN001
    """The lab's kernel log is its syslog file (/var/log/kern.log; dmesg would be the machine's
    own ring buffer): collected like the probe reads it, judged for this boot only."""
    clean.sh("cp -p /var/log/kern.log /var/log/kern.log.before-xid")
    lab.inject(lab_paths, HOST, ["xid:code=79"])
    try:
        live, bundle = live_and_bundle(lab_paths, tmp_path)
        assert without_cpu(live) == without_cpu(bundle) == "hardware", (live, bundle)
        f = next(f for f in live["findings"] if f["class"] == "hardware")
        assert f["severity"] == "critical" and f["evidence"]["xid"] == 79
    finally:
        # the injected Xid leaves the log (a week's Xid count in a later hygiene test would
        # flag this host), then a new boot as after any GPU fault
        clean.sh("mv /var/log/kern.log.before-xid /var/log/kern.log")
        clean.reboot_and_wait()


def test_driver_not_loaded_is_fallback(clean, lab_paths, tmp_path) -> None:  # noqa: ANN001
    lab.inject(lab_paths, HOST, ["driver-not-loaded"])
    try:
        live, bundle = live_and_bundle(lab_paths, tmp_path, gpu=False)
        assert without_cpu(live) == without_cpu(bundle) == "fallback", (live, bundle)
        assert "nvidia-smi failed" in live["files"]["nvidia-smi-q.xml"]
        assert live["files"]["dmon.txt"] == "missing"  # its command failed: left out
    finally:
        lab.reset(lab_paths, HOST)
        clean.reboot_and_wait()  # the module loads again at boot
