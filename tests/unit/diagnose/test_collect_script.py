"""The collection script, run here with `sh` against stand-in commands on PATH: it writes
exactly the bundle's files, keeps nvidia-smi's failure text, drops failed GPU captures, and what
it writes diagnoses like a bundle collected by hand."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from fleet.domain.diagnose.bundle import BUNDLE_FILES
from fleet.jobs.diagnose import diagnose_files
from fleet.remote.bundle import collect_script, split_output

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
            "loadavg", "stat", "df.txt", "ps.txt"} == set(files)
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
