"""The torch check of `fleet preflight` against a real torch: the CPU build of torch 2.13.0
that `bash scripts/test` installs into `.venv-torch` (from this machine's wheel, no download).

With no CUDA device: a container that should have its GPUs fails naming torch's build, one
meant for the CPU passes. The matmul path needs a CUDA device: here torch's CUDA entry points
are stood in for by a device that computes on the CPU (`FAKE_CUDA`), so the real torch runs the
check's arithmetic, its comparison and its failure branches.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.unit.preflight.conftest import PREFLIGHT

ROOT = Path(__file__).resolve().parents[3]
TORCH_PY = ROOT / ".venv-torch" / "bin" / "python"

if not TORCH_PY.exists():
    if os.environ.get("CI") == "true":  # scripts/test installs it: missing in CI is a failure
        raise RuntimeError(f"{TORCH_PY} missing: scripts/test installs torch there")
    pytest.skip(f"no {TORCH_PY} (bash scripts/test installs the CPU build of torch there)",
                allow_module_level=True)

BASE = ("--skip", "gpu", "--skip", "driver", "--skip", "libraries", "--skip", "onnxruntime",
        "--json")

# `mode`: ok (the device computes right), wrong (off by 0.1), raise (the copy to it fails)
FAKE_CUDA = """
import runpy, sys, torch
mode = sys.argv.pop(1)
torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 2
real_to = torch.Tensor.to
def to(self, *a, **k):
    dev = str(a[0]) if a else str(k.get("device", ""))
    if not dev.startswith("cuda"):
        return real_to(self, *a, **k)
    if mode == "raise":
        raise RuntimeError("CUDA error: no kernel image is available for execution on the device")
    return self + 0.1 if mode == "wrong" and dev == "cuda:1" else self.clone()
torch.Tensor.to = to
sys.argv[0] = sys.argv[1]
del sys.argv[1]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def preflight(*args: str, fake: str | None = None) -> tuple[int, dict[str, Any]]:
    """The standalone checker under the torch venv (`-I`: nothing of fleet on the path)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_", "NVIDIA_"))}
    argv = ["-c", FAKE_CUDA, fake, str(PREFLIGHT)] if fake else [str(PREFLIGHT)]
    cp = subprocess.run([str(TORCH_PY), "-I", *argv, *BASE, *args], capture_output=True,
                        text=True, env=env, timeout=180)
    try:
        doc = json.loads(cp.stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"no JSON: {cp.stdout!r}\n{cp.stderr[-3000:]}") from exc
    return cp.returncode, doc


def torch_check(doc: dict[str, Any]) -> dict[str, Any]:
    (check,) = [c for c in doc["checks"] if c["name"] == "torch"]
    return check


def test_a_cpu_build_fails_where_gpus_are_expected() -> None:
    rc, doc = preflight("--gpus", "1")
    check = torch_check(doc)
    assert check["status"] == "fail", check
    assert "sees no CUDA device" in check["message"] and "CPU build" in check["message"], check
    assert check["details"]["version"].startswith("2.13.0") and check["details"]["cuda"] is None
    assert rc == 1, doc


def test_a_cpu_build_passes_where_no_gpu_is_expected() -> None:
    rc, doc = preflight()
    check = torch_check(doc)
    assert check["status"] == "pass" and "on the CPU (no GPU expected)" in check["message"], check


def test_matmul_on_every_device_passes_when_the_results_agree() -> None:
    rc, doc = preflight("--gpus", "2", fake="ok")
    check = torch_check(doc)
    assert check["status"] == "pass", check
    assert check["message"].endswith("2 CUDA device(s), matmul ok") and \
        check["details"]["devices"] == 2, check


def test_a_device_that_computes_wrong_fails_naming_it() -> None:
    rc, doc = preflight("--gpus", "2", fake="wrong")
    check = torch_check(doc)
    assert (check["status"], check["message"]) == (
        "fail", "matmul on cuda:1 gave a wrong result"), check
    assert rc == 1


def test_a_device_that_cannot_run_the_matmul_fails_with_torchs_error() -> None:
    rc, doc = preflight("--gpus", "2", fake="raise")
    check = torch_check(doc)
    assert check["status"] == "fail" and check["message"].startswith("matmul on cuda:0 failed: "), \
        check
    assert "no kernel image" in check["message"] and rc == 1
