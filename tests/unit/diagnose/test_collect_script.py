"""The collection script, run here with `sh` against stand-in commands on PATH: it writes
exactly the bundle's files, keeps nvidia-smi's failure text, drops failed GPU captures, and what
it writes diagnoses like a bundle collected by hand."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from fleet.domain.diagnose.bundle import BUNDLE_FILES
from fleet.errors import BadInput
from fleet.jobs.diagnose import diagnose_files
from fleet.remote.bundle import collect_script, split_output
from fleet.sim.facts import KERNELS, boot_facts

BUNDLES = Path(__file__).parents[2] / "data" / "diagnose" / "bundles"
REAL_XML = Path(__file__).parents[2] / "data" / "realdata" / "nvidia-smi-xml" / \
    "nvidia-k8s-test-infra__qx-h100.xml"


def _stand_in(bin_dir: Path, name: str, body: str) -> None:
    p = bin_dir / name
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(0o755)


def _run(tmp_path: Path, smi: str, metrics: str | None = None) -> dict[str, str]:
    b = tmp_path / "bin"
    b.mkdir()
    h = BUNDLES / "healthy"
    _stand_in(b, "nvidia-smi", smi.replace("@H", str(h)).replace("@X", str(REAL_XML)))
    _stand_in(b, "journalctl", f"cat {h}/kernel.log\n")
    if metrics:
        _stand_in(b, "curl", f"cat {BUNDLES}/queueing/metrics.txt\n")
    script = collect_script(1, "abc123", metrics).replace(
        "export LC_ALL=C PATH=", f"export LC_ALL=C PATH={b}:")
    out = subprocess.run(["sh", "-s"], input=script, capture_output=True, text=True,
                         timeout=30, env={**os.environ}).stdout
    return split_output(out, "abc123")


GOOD_SMI = """case "$1 $2" in
  "-q -x") cat @X;;
  "dmon -s") cat @H/dmon.txt;;
  "pmon -s") cat @H/pmon.txt;;
  "topo -m") cat @H/topo.txt;;
  *) exit 2;;
esac
"""


def test_script_writes_the_bundle_files(tmp_path: Path) -> None:
    files = _run(tmp_path, GOOD_SMI)
    assert set(files) <= set(BUNDLE_FILES)
    assert {"nvidia-smi-q.xml", "dmon.txt", "pmon.txt", "topo.txt", "kernel.log", "meminfo",
            "loadavg", "stat", "df.txt", "ps.txt", "boot.json"} == set(files)
    assert files["stat"].count("\ncpu ") + files["stat"].startswith("cpu ") == 2
    d = diagnose_files(files)
    # this machine's own /proc is read: its CPU, memory and disk may be anything, the GPU side
    # (the stand-in's captures) is healthy and every host question is answered
    assert {f.cls for f in d.findings} <= {"host_cpu", "host_memory", "disk"}
    status = {a.cls: a.status for a in d.answers}
    assert status["gpu_idle"] == status["throttled"] == status["numa"] == "ok"
    assert "could_not_judge" not in {status["host_cpu"], status["host_memory"], status["disk"]}


def test_failed_nvidia_smi_kept_as_evidence_other_gpu_captures_dropped(tmp_path: Path) -> None:
    files = _run(tmp_path, "echo \"NVIDIA-SMI has failed because it couldn't communicate with "
                           "the NVIDIA driver.\"; exit 9\n")
    assert "couldn't communicate" in files["nvidia-smi-q.xml"]
    assert not {"dmon.txt", "pmon.txt", "topo.txt"} & set(files)
    assert diagnose_files(files).verdict == "fallback"


def test_metrics_url_is_fetched_and_named(tmp_path: Path) -> None:
    files = _run(tmp_path, GOOD_SMI, "http://127.0.0.1:8000/metrics")
    assert files["metrics-url"].strip() == "http://127.0.0.1:8000/metrics"
    assert "vllm:num_requests_waiting" in files["metrics.txt"]
    assert "queueing" in {f.cls for f in diagnose_files(files).findings}


@pytest.mark.parametrize("url", ["http://x/$(reboot)", "file:///etc/passwd", "http://a b"])
def test_metrics_url_never_reaches_the_shell_unchecked(tmp_path: Path, url: str) -> None:
    from fleet.errors import BadInput
    from fleet.remote.bundle import _target

    inv = tmp_path / "inv.py"
    inv.write_text(f"hosts = [('gpu-1', {{'serving_metrics_url': {url!r}}})]\n")
    with pytest.raises(BadInput) as info:
        _target(inv, "gpu-1")
    assert info.value.field == "gpu-1.serving_metrics_url"


def test_the_bundle_carries_the_boot_facts_the_probe_reads(tmp_path: Path) -> None:
    """boot.json is the probe's own boot section, run on the host by the collection script:
    here, this machine's running kernel."""
    files = _run(tmp_path, GOOD_SMI)
    boot = diagnose_files(files).boot
    assert boot is not None
    running = Path("/proc/sys/kernel/osrelease").read_text().strip()
    assert boot["running_kernel"] == running
    assert running in [k["version"] for k in boot["kernels"]]
    assert "secure_boot" in boot and diagnose_files(files).as_dict()["boot"] == boot


def test_boot_facts_of_a_kernel_without_module_read_from_a_bundle() -> None:
    """The kernel-without-module shape (the simulated fleet's, as the probe prints it): the
    next-boot kernel and its missing module are in the report; a broken boot.json is bad input
    naming the file."""
    doc = boot_facts("debian", "580.95.05", "open", new_kernel=True)
    boot = diagnose_files({"boot.json": json.dumps({"boot": doc})}).boot
    old, new = KERNELS["debian"]
    assert boot is not None and (boot["running_kernel"], boot["next_kernel"]) == (old, new)
    assert {k["version"]: k["module"] for k in boot["kernels"]} == {
        old: {"version": "580.95.05", "flavor": "open", "signer": None}, new: None}
    assert boot["secure_boot"] is False
    unread = {**doc, "secure_boot": {"error": "os_error", "detail": "efivars: Permission denied"}}
    boot = diagnose_files({"boot.json": json.dumps({"boot": unread})}).boot
    assert boot is not None and boot["secure_boot"] == "unreadable: os_error: efivars: " \
        "Permission denied"
    with pytest.raises(BadInput, match="boot.json"):
        diagnose_files({"boot.json": "{\"not\": 1}"}, "b")
