"""`fleet preflight` (issue 15.1) against the real onnxruntime CPU wheel and a model built with
`onnx`: a GPU provider the build cannot give fails and names the fallback, the CPU provider
passes, a wrong canary fails, a corrupt model is bad input; the GPU side (NVML, device nodes,
CUDA library versions) through faithful fakes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from fleet import preflight as pf
from tests.conftest import run_fleet

from .conftest import PREFLIGHT, run_preflight

pytest.importorskip("onnxruntime")

CPU_ONLY = ("--skip", "libraries", "--skip", "torch")  # this machine's own CUDA stays out


# ------------------------------------------------------------------ ONNX Runtime, real wheel
@pytest.mark.parametrize("provider", ["CUDAExecutionProvider", "TensorrtExecutionProvider"])
def test_gpu_provider_on_the_cpu_build_fails_naming_the_fallback(model: Path,
                                                                  provider: str) -> None:
    r = run_preflight("--onnx", str(model), "--providers", f"{provider},CPUExecutionProvider",
                      *CPU_ONLY)
    assert r.rc == 1, r.stderr
    ort = r.check("onnxruntime")
    assert ort["status"] == "fail"
    assert f"requested {provider} not obtained" in ort["message"]
    assert "fell back to CPUExecutionProvider" in ort["message"]
    assert "install onnxruntime-gpu" in ort["message"]
    # ONNX Runtime's own words travel with the verdict
    assert any(provider in reason for reason in ort["details"]["reasons"])
    assert ort["details"]["obtained"] == ["CPUExecutionProvider"]
    assert r.doc["status"] == "fail" and r.doc["exit_code"] == 1


def test_allow_cpu_turns_the_fallback_into_a_warning(model: Path) -> None:
    r = run_preflight("--onnx", str(model), "--providers",
                      "CUDAExecutionProvider,CPUExecutionProvider", "--allow-cpu", *CPU_ONLY)
    ort = r.check("onnxruntime")
    assert ort["status"] == "pass" and "CPU allowed" in ort["message"]
    assert "fell back to CPUExecutionProvider" in ort["warnings"][0]
    assert r.rc == 0, r.stderr


def test_cpu_provider_and_a_right_canary_pass(model: Path,
                                              canary: Callable[[float], Path]) -> None:
    r = run_preflight("--onnx", str(model), "--providers", "CPUExecutionProvider",
                      "--canary", str(canary(1.0)), "--max-latency-ms", "1000", "--runs", "5",
                      *CPU_ONLY)
    assert r.rc == 0, r.stderr
    # the document: schema, verdict, exit code, every check with the same keys
    assert r.doc["schema"] == 1 and r.doc["status"] == "pass" and r.doc["exit_code"] == 0
    assert [c["name"] for c in r.doc["checks"]] == [
        "gpu", "driver", "onnxruntime", "cold-start", "canary", "latency", "gpu-busy"]
    for c in r.doc["checks"]:
        assert set(c) == {"name", "status", "message", "details", "warnings"}
        assert c["status"] in ("pass", "fail", "could-not-check", "skipped")
    ort = r.check("onnxruntime")
    assert ort["details"]["obtained"] == ["CPUExecutionProvider"]
    # ONNX Runtime's own placement report, read from its verbose log
    assert ort["details"]["placement"]["providers"] == {
        "CPUExecutionProvider": {"count": 2, "nodes": []}}
    assert r.check("canary")["status"] == "pass"
    assert r.check("canary")["details"]["runs"] == 5
    assert r.check("latency")["status"] == "pass"
    assert r.check("gpu-busy")["status"] == "skipped"  # no NVML here: nothing to sample


def test_wrong_canary_output_fails(model: Path, canary: Callable[[float], Path]) -> None:
    r = run_preflight("--onnx", str(model), "--providers", "CPUExecutionProvider",
                      "--canary", str(canary(1.01)), "--runs", "2", *CPU_ONLY)
    assert r.rc == 1, r.stderr
    c = r.check("canary")
    assert c["status"] == "fail" and c["message"].startswith("output y differs from the canary")
    # within a looser tolerance the same canary passes
    r = run_preflight("--onnx", str(model), "--providers", "CPUExecutionProvider",
                      "--canary", str(canary(1.01)), "--rtol", "0.02", "--runs", "2", *CPU_ONLY)
    assert r.rc == 0 and r.check("canary")["status"] == "pass"


def test_latency_over_the_limit_fails(model: Path, canary: Callable[[float], Path]) -> None:
    r = run_preflight("--onnx", str(model), "--providers", "CPUExecutionProvider",
                      "--canary", str(canary(1.0)), "--max-latency-ms", "0.000001",
                      "--runs", "2", *CPU_ONLY)
    assert r.rc == 1 and r.check("latency")["status"] == "fail"
    assert "limit 1e-06 ms" in r.check("latency")["message"]


def test_corrupt_model_is_bad_input(tmp_path: Path, model: Path) -> None:
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(model.read_bytes()[:40])
    r = run_preflight("--onnx", str(bad), "--providers", "CPUExecutionProvider", *CPU_ONLY)
    assert r.rc == 2, r.stderr
    err = r.doc["error"]
    assert r.doc["schema"] == 1 and err["code"] == 2
    assert err["where"] == {"file": str(bad), "line": None, "field": "--onnx"}
    assert "INVALID_PROTOBUF" in err["message"]
    assert f"error: {bad}: --onnx: ONNX Runtime cannot load the model" in r.stderr


def test_canary_that_does_not_fit_the_model_is_bad_input(tmp_path: Path, model: Path) -> None:
    import numpy as np

    np.savez(tmp_path / "inputs.npz", images=np.zeros((1, 4), np.float32))
    np.savez(tmp_path / "outputs.npz", y=np.zeros((1, 4), np.float32), logits=np.zeros(3))
    r = run_preflight("--onnx", str(model), "--providers", "CPUExecutionProvider",
                      "--canary", str(tmp_path), *CPU_ONLY)
    assert r.rc == 2
    problems = {(p["file"].rsplit("/", 1)[-1], p["field"]) for p in r.doc["error"]["problems"]}
    assert problems == {("inputs.npz", "x"), ("inputs.npz", "images"),
                        ("outputs.npz", "logits")}
    # an input of the wrong type: ONNX Runtime refuses it, named as the canary's fault
    np.savez(tmp_path / "inputs.npz", x=np.zeros((1, 4), np.float64))
    np.savez(tmp_path / "outputs.npz", y=np.zeros((1, 4), np.float32))
    r = run_preflight("--onnx", str(model), "--providers", "CPUExecutionProvider",
                      "--canary", str(tmp_path), *CPU_ONLY)
    assert r.rc == 2 and "refuses these inputs" in r.doc["error"]["message"]


def test_bad_flags_are_all_named_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(pf.InputError) as exc:
        pf.validate(pf.Options(onnx=str(tmp_path / "none.onnx"), providers=["CUDAProvider"],
                               expect_driver="580.x", rtol=-1, skip=["gpus"],
                               max_latency_ms=5))
    fields = [p["field"] for p in exc.value.problems]
    assert fields == ["--expect-driver", "--skip", "--rtol", "--onnx", "--providers",
                      "--max-latency-ms"]
    with pytest.raises(pf.InputError, match="--providers: needs --onnx"):
        pf.validate(pf.Options(providers=["CPUExecutionProvider"]))
    with pytest.raises(pf.InputError, match="name the service's provider order"):
        pf.validate(pf.Options(onnx=str(PREFLIGHT)))


def test_standalone_file_imports_nothing_of_fleet(tmp_path: Path, model: Path) -> None:
    """Copied alone into an image: `python3 -I preflight.py` works, and no fleet module is
    imported on the way."""
    script = tmp_path / "preflight.py"
    shutil.copy(PREFLIGHT, script)
    r = run_preflight("--onnx", str(model), "--providers", "CPUExecutionProvider", *CPU_ONLY,
                      script=script)
    assert r.rc == 0 and r.check("onnxruntime")["status"] == "pass"
    code = ("import runpy, sys\nsys.argv = ['preflight.py', '--skip', 'libraries', '--skip', "
            "'torch']\ntry:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
            "except SystemExit as e:\n    rc = e.code\n"
            "print('FLEET', sorted(m for m in sys.modules if m.split('.')[0] == 'fleet'), rc)")
    cp = subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path, capture_output=True,
                        text=True, timeout=60)
    assert "FLEET [] 3" in cp.stdout, cp.stdout + cp.stderr  # nothing to check here: exit 3


def test_nothing_to_check_is_not_a_pass() -> None:
    r = run_preflight("--skip", "gpu", "--skip", "libraries", "--skip", "torch")
    assert r.rc == 3 and r.doc["status"] == "could-not-check"
    assert r.doc["summary"] == "nothing to check"


def test_no_gpu_and_nothing_said_is_not_a_pass(tmp_path: Path) -> None:
    """No GPU here and no option says whether the service needs one (issue 30: `fleet
    preflight` alone on a machine without a GPU reported pass): could not judge, exit 3; CPU
    intended (--allow-cpu, or CPU providers only) is a skipped gpu check."""
    empty = tmp_path / "root"
    (empty / "dev").mkdir(parents=True)
    r = run_preflight("--skip", "torch", root=empty)
    assert r.rc == 3 and r.doc["status"] == "could-not-check"
    assert r.check("gpu")["status"] == "could-not-check"
    assert "--skip gpu" in r.check("gpu")["message"]
    assert "error: preflight: could-not-check" in r.stderr


def test_fleet_preflight_prints_the_standalone_files_text(tmp_path: Path) -> None:
    """docs/preflight.md: `fleet preflight` and the emitted file run the same code and print
    the same lines: the check lines on stdout (the result), `error: preflight: ...` on stderr."""
    empty = tmp_path / "root"
    (empty / "dev").mkdir(parents=True)
    argv = ["--skip", "libraries", "--skip", "torch", "--root", str(empty)]
    own = subprocess.run([sys.executable, "-I", str(PREFLIGHT), *argv], capture_output=True,
                         text=True, timeout=60)
    cli = run_fleet("preflight", *argv)
    assert own.returncode == cli.returncode == 3
    assert cli.stdout == own.stdout and "COULD-NOT-CHECK  gpu" in own.stdout
    assert cli.stderr == own.stderr and own.stderr.startswith("error: preflight: could-not-check")


# ------------------------------------------------------------------ GPU side, faked
def test_gpus_driver_and_utilization_through_nvml(model: Path, canary: Callable[[float], Path],
                                                  fake_gpu_libs: Callable[..., Path],
                                                  gpu_root: Callable[..., Path]) -> None:
    libs, root = fake_gpu_libs(), gpu_root(2)
    args = ("--onnx", str(model), "--providers", "CUDAExecutionProvider,CPUExecutionProvider",
            "--allow-cpu", "--canary", str(canary(1.0)), "--min-gpu-util", "5", "--runs", "2",
            "--sample-seconds", "0.3", "--gpus", "2", "--expect-driver", "580", *CPU_ONLY)
    busy = "gpu.count=2\ngpu0.util.gpu=0\ngpu1.util.gpu=37\n"
    r = run_preflight(*args, libs=libs, root=root, nvml_state=busy)
    assert r.rc == 0, r.stderr
    gpu = r.check("gpu")
    assert gpu["status"] == "pass" and gpu["details"]["count"] == 2
    assert [g["uuid"][:4] for g in gpu["details"]["nvml_gpus"]] == ["GPU-", "GPU-"]
    assert r.check("driver")["details"]["version"] == "580.95.05"
    assert r.check("driver")["details"]["source"] == "nvml"
    b = r.check("gpu-busy")
    assert b["status"] == "pass" and b["details"]["max_gpu_util"] == 37
    assert b["details"]["samples"] >= 4  # sampled through the warm-up, not once

    r = run_preflight(*args, libs=libs, root=root, nvml_state="gpu.count=2\n")
    assert r.rc == 1
    assert r.check("gpu-busy")["message"].startswith("GPU idle while answering: utilization "
                                                     "at most 0%")


def test_gpu_visibility_failures(fake_gpu_libs: Callable[..., Path],
                                 gpu_root: Callable[..., Path], tmp_path: Path) -> None:
    libs = fake_gpu_libs()
    r = run_preflight("--gpus", "2", "--expect-driver", "595", *CPU_ONLY, libs=libs,
                      root=gpu_root(1), nvml_state="gpu.count=1\n")
    assert r.rc == 1
    assert r.check("gpu")["message"] == "1 GPU(s) visible, expected 2 (--gpus)"
    assert r.check("driver")["message"] == ("driver 580.95.05 seen inside the container, "
                                            "expected 595")
    # device nodes mounted without nvidia-uvm, and CUDA told to see nothing
    r = run_preflight("--gpus", "1", *CPU_ONLY, libs=libs, root=gpu_root(1, uvm=False),
                      nvml_state="gpu.count=1\n", env={"CUDA_VISIBLE_DEVICES": ""})
    msg = r.check("gpu")["message"]
    assert r.rc == 1 and "/dev/nvidia-uvm is missing" in msg and "hides every GPU" in msg
    # the runtime was asked for GPUs (image ENV) but mounted none: fails unasked
    empty = tmp_path / "empty"
    (empty / "dev").mkdir(parents=True)
    r = run_preflight(*CPU_ONLY, root=empty, env={"NVIDIA_VISIBLE_DEVICES": "all"})
    assert r.rc == 1
    assert r.check("gpu")["message"].startswith("NVIDIA_VISIBLE_DEVICES=all asks for GPUs but "
                                                "no /dev/nvidia[0-9]* device node")
    # NVML loads but the kernel module is another version: the container sees a broken driver
    r = run_preflight("--skip", "libraries", "--skip", "torch", libs=libs,
                      root=gpu_root(1, driver="570.86.15"), nvml_state="gpu.count=1\n")
    assert r.rc == 1 and "nvmlInit failed: RM has detected an NVML/RM version mismatch" in \
        r.check("gpu")["message"]


def test_library_versions_read_from_the_libraries(fake_gpu_libs: Callable[..., Path],
                                                  gpu_root: Callable[..., Path]) -> None:
    libs = fake_gpu_libs(cuda=12040, cudnn=90100, trt=100300)
    base = ("--skip", "torch", "--skip", "gpu")
    r = run_preflight(*base, "--expect-cuda", "12.4", "--expect-cudnn", "9.1",
                      "--expect-tensorrt", "10", libs=libs, root=gpu_root(1),
                      nvml_state="gpu.count=1\n", cuda_driver=12080)
    assert r.rc == 0, r.stderr
    assert [r.check(n)["details"]["version"] for n in ("cuda-runtime", "cudnn", "tensorrt")] \
        == ["12.4", "9.1.0", "10.3.0"]
    assert r.check("cudnn")["details"]["path"] == str(libs / "libcudnn.so")
    r = run_preflight(*base, "--expect-cudnn", "8", libs=libs, root=gpu_root(1),
                      nvml_state="gpu.count=1\n", cuda_driver=12080)
    assert r.rc == 1 and r.check("cudnn")["message"].startswith("cudnn 9.1.0 (")
    # a CUDA 12 runtime on a driver that only supports CUDA 11.8
    r = run_preflight(*base, libs=libs, root=gpu_root(1), nvml_state="gpu.count=1\n",
                      cuda_driver=11080)
    assert r.rc == 1
    assert r.check("cuda-runtime")["message"] == ("CUDA runtime 12.4 needs a newer driver: the "
                                                  "driver supports CUDA 11.8")
    # cuDNN 8 and TensorRT 8 encode their versions with 1000 per major
    old = fake_gpu_libs(cudnn=8907, trt=8601)
    r = run_preflight(*base, "--skip", "driver", libs=old, root=gpu_root(1),
                      nvml_state="gpu.count=1\n")
    assert [r.check(n)["details"]["version"] for n in ("cudnn", "tensorrt")] == ["8.9.7", "8.6.1"]


def test_placement_read_from_onnx_runtime_log_lines() -> None:
    """The verbose lines a CUDA build writes (format of session_state.cc and
    fallback_cpu_capability.cc): shape nodes moved to the CPU on purpose are not a fallback, a
    node with no CUDA kernel is, with ORT's reason."""
    log = [
        "[V:onnxruntime:, session_state.cc:1598 VerifyEachNodeIsAssignedToAnEp] Node placements",
        "[V:onnxruntime:, session_state.cc:1601 VerifyEachNodeIsAssignedToAnEp]  Node(s) placed "
        "on [CUDAExecutionProvider]. Number of nodes: 2",
        "[V:onnxruntime:, session_state.cc:1603 VerifyEachNodeIsAssignedToAnEp]   MatMul (mm)",
        "[V:onnxruntime:, session_state.cc:1603 VerifyEachNodeIsAssignedToAnEp]   Relu (relu)",
        "[V:onnxruntime:, session_state.cc:1601 VerifyEachNodeIsAssignedToAnEp]  Node(s) placed "
        "on [CPUExecutionProvider]. Number of nodes: 2",
        "[V:onnxruntime:, session_state.cc:1603 VerifyEachNodeIsAssignedToAnEp]   Gather (g0)",
        "[V:onnxruntime:, session_state.cc:1603 VerifyEachNodeIsAssignedToAnEp]   "
        "MatMulInteger (mmi)",
        "[I:onnxruntime:, fallback_cpu_capability.cc:131 GetCpuPreferredNodes] ORT optimization- "
        "Force fallback to CPU execution for node: g0 because the CPU execution path is deemed "
        "faster than overhead involved with execution on other EPs  capable of executing this "
        "node",
        "[I:onnxruntime:, cuda_execution_provider.cc:2600 GetCapability] CUDA kernel not found "
        "in registries for Op type: MatMulInteger node name: mmi",
    ]
    p = pf.parse_placement(log)
    assert p["providers"]["CUDAExecutionProvider"]["count"] == 2
    assert [n["name"] for n in p["providers"]["CPUExecutionProvider"]["nodes"]] == ["g0", "mmi"]
    assert p["cpu_on_purpose"] == ["g0"]
    assert p["no_kernel"] == {"mmi": "CUDA has no kernel for MatMulInteger"}

    class CudaSession:  # what a CUDA build's session answers (the GPU side, faked)
        def get_providers(self) -> list[str]:
            return ["CUDAExecutionProvider", "CPUExecutionProvider"]

    opts = pf.Options(onnx="m.onnx", providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    c = pf._provider_check(opts, CudaSession(), log, {"available": [], "package": None})
    assert c.status == "fail"
    assert c.message.startswith("1 node(s) placed on CPUExecutionProvider while "
                                "CUDAExecutionProvider was requested: MatMulInteger (mmi): CUDA "
                                "has no kernel for MatMulInteger")
    only_shape = [x for x in log if "mmi" not in x and "MatMulInteger" not in x]
    assert pf._provider_check(opts, CudaSession(), only_shape,
                              {"available": [], "package": None}).status == "pass"
    # no placement logged at all: not a pass
    assert pf._provider_check(opts, CudaSession(), [], {"available": [], "package": None}
                              ).status == "could-not-check"


# ------------------------------------------------------------------ the fleet CLI
def test_fleet_preflight_cli(model: Path, tmp_path: Path) -> None:
    r = run_fleet("preflight", "--onnx", str(model), "--providers", "CUDAExecutionProvider",
                  *CPU_ONLY, "--json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)  # one document, the report, even on failure
    assert doc["schema"] == 1 and doc["status"] == "fail"
    assert "error: preflight: fail (" in r.stderr
    r = run_fleet("preflight", "--onnx", str(tmp_path / "none.onnx"), "--json")
    assert r.returncode == 2
    err = json.loads(r.stdout)["error"]
    assert [p["field"] for p in err["problems"]] == ["--onnx", "--providers"]
    r = run_fleet("preflight", "--emit")
    assert r.returncode == 0 and r.stdout == PREFLIGHT.read_text()


def test_cli_module_imports_no_runtime() -> None:
    """`fleet --help` builds every command: the runtimes preflight drives load only when it
    runs."""
    code = ("import sys, fleet.cli.preflight_cmd\n"
            "print([m for m in ('onnxruntime', 'numpy', 'torch', 'fleet.preflight') "
            "if m in sys.modules])")
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        timeout=60)
    assert cp.stdout.strip() == "[]", cp.stdout + cp.stderr


# ------------------------------------------------------------------ cold start (issue 24.4)
def test_cold_start_time_and_the_model_files_filesystem(model: Path, tmp_path: Path) -> None:
    prom = tmp_path / "preflight.prom"
    r = run_preflight("--onnx", str(model), "--providers", "CPUExecutionProvider",
                      "--prom-file", str(prom), *CPU_ONLY)
    assert r.rc == 0, r.doc
    cold = r.check("cold-start")
    d = cold["details"]
    assert cold["status"] == "pass" and 0 < d["load_ms"] < 60_000
    assert d["file_bytes"] == model.stat().st_size and d["fs_mount"] and d["fs_fstype"]
    text = prom.read_text()
    assert "fleet_preflight_passed 1\n" in text
    assert f'fleet_preflight_model_load_ms{{model="{model}"}} {d["load_ms"]}' in text
    assert not list(tmp_path.glob(".preflight-*"))  # written through a renamed temporary file


def test_a_model_on_nfs_is_named_and_a_slow_load_fails(model: Path, tmp_path: Path) -> None:
    """A mount table (under --root) that puts the model's folder on NFS; a load limit no real
    session creation meets."""
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/mountinfo").write_text(
        "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
        f"40 22 0:52 / {model.parent} rw,relatime - nfs4 filer:/models rw,vers=4.2\n")
    r = run_preflight("--onnx", str(model), "--providers", "CPUExecutionProvider",
                      "--max-load-ms", "0.000001", "--skip", "gpu", "--skip", "driver",
                      *CPU_ONLY, root=tmp_path)
    cold = r.check("cold-start")
    assert r.rc == 1 and cold["status"] == "fail", r.doc
    assert "over the limit 1e-06 ms" in cold["message"]
    assert "from a network filesystem (nfs4 at " in cold["message"]
    assert any("filer:/models" in w for w in cold["warnings"])
    assert pf.model_filesystem(str(model), str(tmp_path))["network"] is True


def test_max_load_ms_needs_a_model() -> None:
    r = run_preflight("--max-load-ms", "100")
    assert r.rc == 2 and "--max-load-ms" in json.dumps(r.doc)
