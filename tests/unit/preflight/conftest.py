"""Fixtures of the preflight tests: a small ONNX model built with the `onnx` package and run by
the real onnxruntime CPU wheel, its canary, and the GPU side faked faithfully (the lab's fake
libnvidia-ml.so.1, tiny stand-ins for libcudart, libcudnn and libnvinfer that answer the version
calls as the real ones do, a /dev with nvidia device nodes as files).

The checker runs as users run it: `python3 -I preflight.py ...` in a fresh process, so the
loader finds the fake libraries through LD_LIBRARY_PATH as it finds real ones.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
PREFLIGHT = ROOT / "fleet" / "preflight.py"
PROC_VERSION = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  {v}  Tue Mar  5 22:23:56 UTC 2024\n"

# the version entry points of the real libraries, with the encodings they document
FAKE_LIBS = {
    "libcudart.so": "int cudaRuntimeGetVersion(int *v) { *v = %(cuda)d; return 0; }",
    "libcudnn.so": "unsigned long cudnnGetVersion(void) { return %(cudnn)d; }",
    "libnvinfer.so": "int getInferLibVersion(void) { return %(trt)d; }",
}


@dataclass
class Result:
    rc: int
    doc: dict[str, Any]
    stderr: str

    def check(self, name: str) -> dict[str, Any]:
        found = [c for c in self.doc.get("checks", []) if c["name"] == name]
        assert found, f"no {name} check in {self.doc}"
        return found[0]


@pytest.fixture(scope="session")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """y = relu(x @ W): x float32 [1, 4], W a fixed 4x4 matrix with negative entries."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    w = [((i * 7 + j * 3) % 11 - 5) / 4 for i in range(4) for j in range(4)]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
         helper.make_node("Relu", ["h"], ["y"], name="relu")],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor("w", TensorProto.FLOAT, [4, 4], w)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8  # readable by every onnxruntime the test extra allows
    onnx.checker.check_model(m)
    path = tmp_path_factory.mktemp("model") / "tiny.onnx"
    onnx.save(m, str(path))
    return path


def expected_output(x: Any) -> Any:
    import numpy as np

    w = np.array([((i * 7 + j * 3) % 11 - 5) / 4 for i in range(4) for j in range(4)],
                 dtype=np.float32).reshape(4, 4)
    return np.maximum(x @ w, 0)


@pytest.fixture(scope="session")
def canary(tmp_path_factory: pytest.TempPathFactory) -> Callable[[float], Path]:
    """A canary folder whose expected outputs are the true answer times `scale`."""
    import numpy as np

    def make(scale: float = 1.0) -> Path:
        d = tmp_path_factory.mktemp("canary")
        x = np.array([[1.0, -2.0, 3.0, 0.5]], dtype=np.float32)
        np.savez(d / "inputs.npz", x=x)
        np.savez(d / "outputs.npz", y=(expected_output(x) * scale).astype(np.float32))
        return d

    return make


@pytest.fixture(scope="session")
def fake_gpu_libs(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """A folder with the fake libnvidia-ml.so.1 (the lab's) and, as asked, version-only
    stand-ins of libcudart, libcudnn and libnvinfer."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build the fake NVML and CUDA libraries")
    from fleet.lab import nvml_build

    nvml = nvml_build.build(tmp_path_factory.mktemp("nvml"))  # compiled once: about 1 s

    def make(**versions: int) -> Path:
        d = tmp_path_factory.mktemp("gpulibs")
        shutil.copy(nvml, d / nvml.name)
        for name, src in FAKE_LIBS.items():
            key = {"libcudart.so": "cuda", "libcudnn.so": "cudnn", "libnvinfer.so": "trt"}[name]
            if key in versions:
                c = d / f"{name}.c"
                c.write_text(src % {key: versions[key]} + "\n")
                subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(d / name), str(c)],
                               check=True)
        return d

    return make


@pytest.fixture
def gpu_root(tmp_path: Path) -> Callable[..., Path]:
    """A root folder with /dev/nvidia* device nodes (plain files) and the driver's
    /proc/driver/nvidia/version, as a container with its GPUs mounted sees them."""

    def make(gpus: int = 1, *, driver: str = "580.95.05", uvm: bool = True) -> Path:
        root = tmp_path / "root"
        shutil.rmtree(root, ignore_errors=True)  # each call describes a whole container
        (root / "dev").mkdir(parents=True)
        for i in range(gpus):
            (root / "dev" / f"nvidia{i}").touch()
        (root / "dev" / "nvidiactl").touch()
        if uvm:
            (root / "dev" / "nvidia-uvm").touch()
        proc = root / "proc" / "driver" / "nvidia"
        proc.mkdir(parents=True)
        (proc / "version").write_text(PROC_VERSION.format(v=driver))
        return root

    return make


def run_preflight(*args: str, libs: Path | None = None, root: Path | None = None,
                  nvml_state: str = "", driver: str = "580.95.05", cuda_driver: int = 13000,
                  env: dict[str, str] | None = None, script: Path = PREFLIGHT) -> Result:
    """`python3 -I preflight.py ARGS --json` in a fresh process; no fleet on the path."""
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("GPUSIM_", "NVIDIA_", "CUDA_VISIBLE"))}
    full.pop("LD_LIBRARY_PATH", None)
    if libs is not None:
        state = libs / "state"
        state.write_text(nvml_state)
        (libs / "driver.conf").write_text(
            f"driver_version={driver}\ncuda_driver_version={cuda_driver}\n")
        full.update(LD_LIBRARY_PATH=str(libs), GPUSIM_STATE=str(state),
                    GPUSIM_DRIVER_FILE=str(libs / "driver.conf"),
                    GPUSIM_PROC_VERSION=str((root or libs) / "proc/driver/nvidia/version"))
    full.update(env or {})
    argv = [*args, "--json"] + (["--root", str(root)] if root else [])
    cp = subprocess.run([sys.executable, "-I", str(script), *argv], capture_output=True,
                        text=True, env=full, cwd=script.parent, timeout=120)
    try:
        doc = json.loads(cp.stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"stdout is not one JSON document: {cp.stdout!r}\n{cp.stderr}") \
            from exc
    return Result(cp.returncode, doc, cp.stderr)
