#!/usr/bin/env python3
"""fleet preflight: prove at a service's start that the GPU does the work, or fail fast.

One self-contained file: the standard library, plus whatever runtime the container already has
(onnxruntime, numpy, torch; NVML, CUDA, cuDNN and TensorRT read through ctypes). Copy it into an
image (`fleet preflight --emit > preflight.py`) and run `python3 preflight.py ...` from the
entrypoint, an init container or a readiness probe; `fleet preflight` runs the same code.

Exit codes: 0 pass, 1 a check failed, 2 bad input (a flag, a missing or corrupt model, a canary
that does not fit the model), 3 could not check (a runtime that was asked for is missing, nothing
to check). See docs/preflight.md.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import glob
import io
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA = 1
PASS, FAIL, UNKNOWN, SKIP = "pass", "fail", "could-not-check", "skipped"
GPU_PROVIDERS = frozenset({
    "CUDAExecutionProvider", "TensorrtExecutionProvider", "NvTensorRTRTXExecutionProvider",
    "ROCMExecutionProvider", "MIGraphXExecutionProvider", "DmlExecutionProvider",
    "WebGpuExecutionProvider"})
CHECKS = ("gpu", "driver", "libraries", "onnxruntime", "torch")
VERSION_RE = re.compile(r"^\d+(\.\d+){0,3}$")


class InputError(Exception):
    """Bad input (exit 2): every problem, each as file/field/message."""

    def __init__(self, problems: list[dict[str, Any]]) -> None:
        self.problems = [{"file": p.get("file"), "line": None, "field": p.get("field"),
                          "message": p["message"], "severity": "error"} for p in problems]
        super().__init__("\n".join(problem_text(p) for p in self.problems))


def problem_text(p: dict[str, Any]) -> str:
    return ": ".join(str(x) for x in (p.get("file"), p.get("field"), p["message"]) if x)


@dataclass
class Options:
    """What to check; every field has a command-line flag of the same name."""

    onnx: str | None = None
    providers: list[str] = field(default_factory=list)
    allow_cpu: bool = False
    canary: str | None = None
    rtol: float = 1e-3
    atol: float = 1e-5
    max_latency_ms: float | None = None
    runs: int = 20
    sample_seconds: float = 1.0
    min_gpu_util: float | None = None
    gpus: int | None = None
    expect_driver: str | None = None
    expect_cuda: str | None = None
    expect_cudnn: str | None = None
    expect_tensorrt: str | None = None
    require_libs: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)
    root: str = "/"
    max_load_ms: float | None = None
    prom_file: str | None = None


@dataclass
class Check:
    name: str
    status: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


# ------------------------------------------------------------------ input
def validate(o: Options) -> None:
    """Every problem of the command line and its files, before anything runs."""
    bad: list[dict[str, Any]] = []
    for flag, value in (("--expect-driver", o.expect_driver), ("--expect-cuda", o.expect_cuda),
                        ("--expect-cudnn", o.expect_cudnn),
                        ("--expect-tensorrt", o.expect_tensorrt)):
        if value is not None and not VERSION_RE.match(value):
            bad.append({"field": flag, "message": f"{value!r} is not a version (like 12.4)"})
    for lib in o.require_libs:
        if lib not in LIBRARIES:
            bad.append({"field": "--require-lib", "message": f"unknown library {lib!r} "
                        f"(expected one of {', '.join(LIBRARIES)})"})
    for name in o.skip:
        if name not in CHECKS:
            bad.append({"field": "--skip", "message": f"unknown check {name!r} "
                        f"(expected one of {', '.join(CHECKS)})"})
    for flag, num, low in (("--rtol", o.rtol, 0.0), ("--atol", o.atol, 0.0),
                           ("--max-latency-ms", o.max_latency_ms, 0.0),
                           ("--max-load-ms", o.max_load_ms, 0.0),
                           ("--sample-seconds", o.sample_seconds, 0.0),
                           ("--min-gpu-util", o.min_gpu_util, 0.0)):
        if num is not None and not (num >= low and num < float("inf")):
            bad.append({"field": flag, "message": f"{num} is out of range (>= {low})"})
    if o.min_gpu_util is not None and o.min_gpu_util > 100:
        bad.append({"field": "--min-gpu-util", "message": "a percentage is at most 100"})
    if o.runs < 1:
        bad.append({"field": "--runs", "message": "at least 1"})
    if o.gpus is not None and o.gpus < 0:
        bad.append({"field": "--gpus", "message": "a count is at least 0"})
    if o.prom_file is not None and (os.path.isdir(o.prom_file) or not os.path.isdir(
            os.path.dirname(os.path.abspath(o.prom_file)))):
        bad.append({"file": o.prom_file, "field": "--prom-file",
                    "message": "name a file in an existing directory (the textfile collector's)"})
    if o.onnx is None:
        for flag, given in (("--providers", o.providers), ("--canary", o.canary),
                            ("--allow-cpu", o.allow_cpu), ("--max-load-ms", o.max_load_ms)):
            if given:
                bad.append({"field": flag, "message": "needs --onnx MODEL"})
    else:
        if not os.path.isfile(o.onnx):
            bad.append({"file": o.onnx, "field": "--onnx", "message": "no such file"})
        if not o.providers:
            bad.append({"field": "--providers", "message": "name the service's provider order, "
                        "e.g. CUDAExecutionProvider,CPUExecutionProvider"})
        bad += _unknown_providers(o.providers)
    if o.canary is not None:
        for name in ("inputs.npz", "outputs.npz"):
            if not os.path.isfile(os.path.join(o.canary, name)):
                bad.append({"file": os.path.join(o.canary, name), "field": "--canary",
                            "message": "no such file"})
    if o.max_latency_ms is not None and o.canary is None:
        bad.append({"field": "--max-latency-ms", "message": "needs --canary DIR (the warm-up)"})
    if bad:
        raise InputError(bad)


def _unknown_providers(providers: list[str]) -> list[dict[str, Any]]:
    try:
        import onnxruntime as ort
    except ImportError:
        return []  # the onnxruntime check says it could not check
    known = set(ort.get_all_providers())
    return [{"field": "--providers", "message": f"unknown provider {p!r} (ONNX Runtime knows "
             f"{', '.join(sorted(known))})"} for p in providers if p not in known]


# ------------------------------------------------------------------ NVML through ctypes
class _Util(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class Nvml:
    """The few NVML calls preflight needs, on libnvidia-ml.so.1 as the container mounts it."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        self.lock = threading.Lock()

    @classmethod
    def open(cls) -> tuple[Nvml | None, str]:
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError as e:
            return None, f"libnvidia-ml.so.1 not loadable ({e})"
        n = cls(lib)
        rc = lib.nvmlInit_v2()
        if rc != 0:
            return None, f"nvmlInit failed: {n.error(rc)} ({rc})"
        return n, ""

    def error(self, rc: int) -> str:
        self.lib.nvmlErrorString.restype = ctypes.c_char_p
        return str(self.lib.nvmlErrorString(rc).decode(errors="replace"))

    def _text(self, fn: str, *args: Any) -> str:
        buf = ctypes.create_string_buffer(96)
        rc = getattr(self.lib, fn)(*args, buf, ctypes.c_uint(96))
        if rc != 0:
            raise OSError(f"{fn}: {self.error(rc)}")
        return buf.value.decode(errors="replace")

    def driver_version(self) -> str:
        return self._text("nvmlSystemGetDriverVersion")

    def cuda_driver_version(self) -> int | None:
        v = ctypes.c_int()
        return v.value if self.lib.nvmlSystemGetCudaDriverVersion(ctypes.byref(v)) == 0 else None

    def handles(self) -> list[ctypes.c_void_p]:
        count = ctypes.c_uint()
        rc = self.lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
        if rc != 0:
            raise OSError(f"nvmlDeviceGetCount: {self.error(rc)}")
        out = []
        for i in range(count.value):
            h = ctypes.c_void_p()
            rc = self.lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(i), ctypes.byref(h))
            if rc != 0:
                raise OSError(f"nvmlDeviceGetHandleByIndex({i}): {self.error(rc)}")
            out.append(h)
        return out

    def describe(self, h: ctypes.c_void_p) -> dict[str, str]:
        return {"name": self._text("nvmlDeviceGetName", h),
                "uuid": self._text("nvmlDeviceGetUUID", h)}

    def utilization(self, h: ctypes.c_void_p) -> tuple[int, int] | None:
        u = _Util()
        with self.lock:
            rc = self.lib.nvmlDeviceGetUtilizationRates(h, ctypes.byref(u))
        return (u.gpu, u.memory) if rc == 0 else None


class Sampler:
    """GPU utilization every 50 ms on every GPU NVML shows, while the warm-up answers."""

    def __init__(self, nvml: Nvml) -> None:
        self.nvml, self.handles = nvml, nvml.handles()
        self.samples: list[tuple[int, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.is_set():
            for h in self.handles:
                u = self.nvml.utilization(h)
                if u is not None:
                    self.samples.append(u)
            self.stop.wait(0.05)

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


# ------------------------------------------------------------------ GPUs and driver
def _env_hides(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("", "none", "void", "-1", "nodevfiles")


def gpu_check(o: Options, nvml: Nvml | None, nvml_error: str, required: bool) -> Check:
    """Device nodes, NVML and the container runtime's environment agree that GPUs are here."""
    dev = os.path.join(o.root, "dev")
    nodes = sorted((p for p in glob.glob(os.path.join(dev, "nvidia*"))
                    if re.fullmatch(r"nvidia\d+", os.path.basename(p))),
                   key=lambda p: int(os.path.basename(p)[6:]))
    nvd, cvd = os.environ.get("NVIDIA_VISIBLE_DEVICES"), os.environ.get("CUDA_VISIBLE_DEVICES")
    d: dict[str, Any] = {"device_nodes": [os.path.basename(p) for p in nodes],
                         "NVIDIA_VISIBLE_DEVICES": nvd, "CUDA_VISIBLE_DEVICES": cvd,
                         "injection": "cdi" if nvd == "void" and nodes else
                         "nvidia-container-runtime" if nvd and not _env_hides(nvd) and nodes
                         else None}
    problems, notes = [], []
    wanted_by_env = nvd is not None and not _env_hides(nvd)
    if not nodes and not required and not wanted_by_env and nvml is None:
        # CPU is intended when --allow-cpu says so or the service's providers are all CPU ones;
        # otherwise nothing says whether this service needs a GPU: never a pass on no GPU
        if o.allow_cpu or (o.providers and not any(p in GPU_PROVIDERS for p in o.providers)):
            return Check("gpu", SKIP, "no GPU in this container; CPU intended", d)
        return Check("gpu", UNKNOWN, "no GPU in this container and none asked for: could not "
                     "judge (--gpus N: GPUs required; --skip gpu: none by design)", d)
    if nodes:
        for name in ("nvidiactl", "nvidia-uvm"):
            if not os.path.exists(os.path.join(dev, name)):
                problems.append(f"/dev/{name} is missing (CUDA cannot start without it)")
        for p in [*nodes, os.path.join(dev, "nvidiactl")]:
            try:
                os.close(os.open(p, os.O_RDWR | os.O_CLOEXEC))
            except FileNotFoundError:
                pass
            except OSError as e:
                problems.append(f"cannot open {p}: {e.strerror} (device cgroup or permissions)")
    elif required or wanted_by_env:
        why = (f"NVIDIA_VISIBLE_DEVICES={nvd} asks for GPUs but " if wanted_by_env else "")
        problems.append(why + "no /dev/nvidia[0-9]* device node in this container: it was "
                        "started without its GPUs (--gpus / --runtime=nvidia / CDI device / "
                        "runtimeClassName: nvidia, nvidia.com/gpu limit)")
    count = len(nodes)
    if nvml is not None:
        try:
            hs = nvml.handles()
            d["nvml_gpus"] = [nvml.describe(h) for h in hs]
            count = len(hs)
        except OSError as e:
            problems.append(f"NVML: {e}")
    else:
        d["nvml"] = nvml_error
        if nodes and "not loadable" not in nvml_error:
            problems.append(f"NVML: {nvml_error}")
        elif nodes:
            notes.append(f"NVML not mounted ({nvml_error}): NVIDIA_DRIVER_CAPABILITIES "
                         "without 'utility'? GPU utilization cannot be sampled")
    d["count"] = count
    if nodes and nvml is not None and "nvml_gpus" in d and len(d["nvml_gpus"]) != len(nodes):
        notes.append(f"{len(nodes)} device node(s) but NVML shows {len(d['nvml_gpus'])} GPU(s)")
    if (required or nodes) and _env_hides(cvd):
        problems.append(f"CUDA_VISIBLE_DEVICES={cvd!r} hides every GPU from CUDA")
    if o.gpus is not None and count != o.gpus:
        problems.append(f"{count} GPU(s) visible, expected {o.gpus} (--gpus)")
    if problems:
        return Check("gpu", FAIL, "; ".join(problems), d, notes)
    return Check("gpu", PASS, f"{count} GPU(s) visible"
                 + (f" ({d['injection']})" if d["injection"] else ""), d, notes)


def version_matches(expected: str, actual: str) -> bool:
    """`580` matches 580.95.05; `12.4` matches 12.4; a library that reports only major.minor
    is compared on those."""
    e, a = expected.split("."), re.split(r"[.-]", actual)
    n = min(len(e), len(a))
    try:
        return all(int(x) == int(y) for x, y in zip(e[:n], a[:n], strict=True))
    except ValueError:
        return e[:n] == a[:n]


def driver_check(o: Options, nvml: Nvml | None) -> Check:
    version, source = None, None
    if nvml is not None:
        with contextlib.suppress(OSError):
            version, source = nvml.driver_version(), "nvml"
    if version is None:
        with contextlib.suppress(OSError):
            with open(os.path.join(o.root, "proc/driver/nvidia/version")) as f:
                m = re.search(r"Kernel Module\s+(\S+)", f.readline())
            if m:
                version, source = m.group(1), "/proc/driver/nvidia/version"
    d = {"version": version, "source": source, "expected": o.expect_driver}
    if nvml is not None:
        d["cuda_driver_version"] = _cuda_text(nvml.cuda_driver_version())
    if version is None:
        if o.expect_driver:
            return Check("driver", UNKNOWN, "no driver version readable in this container "
                         "(no NVML, no /proc/driver/nvidia/version)", d)
        return Check("driver", SKIP, "no NVIDIA driver visible", d)
    if o.expect_driver and not version_matches(o.expect_driver, version):
        return Check("driver", FAIL, f"driver {version} seen inside the container, expected "
                     f"{o.expect_driver}", d)
    return Check("driver", PASS, f"driver {version}" + (
        f" (expected {o.expect_driver})" if o.expect_driver else ""), d)


# ------------------------------------------------------------------ CUDA, cuDNN, TensorRT
def _cuda_text(v: int | None) -> str | None:
    return None if not v else f"{v // 1000}.{v % 1000 // 10}"


def _scaled(v: int, big: int) -> str:
    """cuDNN 9 / TensorRT 10 encode major*10000+minor*100+patch, cuDNN 8 / TensorRT 8 use 1000."""
    base = 10000 if v >= big else 1000
    return f"{v // base}.{v % base // 100}.{v % 100}"


def _cudart(lib: Any) -> str | None:
    v = ctypes.c_int()
    return _cuda_text(v.value) if lib.cudaRuntimeGetVersion(ctypes.byref(v)) == 0 else None


def _cudnn(lib: Any) -> str | None:
    lib.cudnnGetVersion.restype = ctypes.c_size_t
    return _scaled(int(lib.cudnnGetVersion()), 10000)


def _tensorrt(lib: Any) -> str | None:
    lib.getInferLibVersion.restype = ctypes.c_int32
    return _scaled(int(lib.getInferLibVersion()), 100000)


LIBRARIES: dict[str, tuple[tuple[str, ...], Any, str]] = {
    "cuda-runtime": (("libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"),
                     _cudart, "expect_cuda"),
    "cudnn": (("libcudnn.so", "libcudnn.so.9", "libcudnn.so.8"), _cudnn, "expect_cudnn"),
    "tensorrt": (("libnvinfer.so", "libnvinfer.so.10", "libnvinfer.so.8"), _tensorrt,
                 "expect_tensorrt"),
}


def _load(names: tuple[str, ...]) -> tuple[Any, str | None, list[str]]:
    """The library the dynamic loader would give (LD_LIBRARY_PATH, ld.so.cache), else one of
    the pip wheels' copies (site-packages/nvidia/*/lib, tensorrt_libs) that frameworks preload."""
    tried: list[str] = []
    extra = [p for d in sys.path for pat in ("nvidia/*/lib", "tensorrt_libs", "torch/lib")
             for p in glob.glob(os.path.join(d, pat))]
    for name in names:
        for cand in [name, *(os.path.join(x, name) for x in extra)]:
            if cand != name and not os.path.exists(cand):
                continue
            try:
                return ctypes.CDLL(cand), _mapped_path(name), tried
            except OSError as e:
                tried.append(str(e))
    return None, None, tried


def _mapped_path(name: str) -> str | None:
    stem = name.split(".so")[0] + ".so"
    with contextlib.suppress(OSError), open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if os.path.basename(path).startswith(stem):
                return path
    return None


def library_checks(o: Options, cuda_driver: int | None) -> list[Check]:
    out = []
    for key, (names, read, opt) in LIBRARIES.items():
        expected = getattr(o, opt)
        required = key in o.require_libs
        lib, path, tried = _load(names)
        d: dict[str, Any] = {"expected": expected, "path": path}
        if lib is None:
            d["tried"] = tried[-3:]
            status = FAIL if required else UNKNOWN if expected else SKIP
            out.append(Check(key, status, f"{names[-2]} not loadable in this container", d))
            continue
        try:
            version = read(lib)
        except (AttributeError, OSError) as e:
            out.append(Check(key, FAIL if required else UNKNOWN,
                             f"{path or names[0]}: version unreadable ({e})", d))
            continue
        d["version"] = version
        if version is None:
            out.append(Check(key, UNKNOWN, f"{path}: the library gave no version", d))
        elif expected and not version_matches(expected, version):
            out.append(Check(key, FAIL, f"{key} {version} ({path}), expected {expected}", d))
        elif key == "cuda-runtime" and cuda_driver and _too_new(version, cuda_driver):
            out.append(Check(key, FAIL, f"CUDA runtime {version} needs a newer driver: the "
                             f"driver supports CUDA {_cuda_text(cuda_driver)}", d))
        else:
            out.append(Check(key, PASS, f"{key} {version} ({path})", d))
    return out


def _too_new(runtime: str, driver: int) -> bool:
    """A CUDA runtime of a newer major than the driver supports cannot run (minor-version
    compatibility covers newer minors of the same major)."""
    return int(runtime.split(".")[0]) > driver // 1000


# ------------------------------------------------------------------ ONNX Runtime
@contextlib.contextmanager
def captured() -> Iterator[list[str]]:
    """Everything ONNX Runtime writes while inside: its C++ log on fd 2, the Python wrapper's
    `print` of an EP error and its warnings. The text lands in the yielded list on exit."""
    out: list[str] = []
    for s in (sys.stdout, sys.stderr):
        s.flush()
    saved = [os.dup(1), os.dup(2)]
    py = io.StringIO()
    with tempfile.TemporaryFile() as tmp, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        os.dup2(tmp.fileno(), 1)
        os.dup2(tmp.fileno(), 2)
        try:
            with contextlib.redirect_stdout(py), contextlib.redirect_stderr(py):
                yield out
        finally:
            for s in (sys.stdout, sys.stderr):
                s.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            tmp.seek(0)
            out += tmp.read().decode(errors="replace").splitlines()
            out += py.getvalue().splitlines()
            out += [f"warning: {w.message}" for w in caught]


_HEADER = re.compile(r"(All nodes|Node\(s\)) placed on \[(\w+)\]\. Number of nodes: (\d+)")
_NODE = re.compile(r"\]\s{2,}(\S+) \((.*)\)\s*$")
_FORCED = re.compile(r"Force fallback to CPU execution for node: (\S+)")
_NOKERNEL = re.compile(r"(\w+) kernel not found in registries for Op type: (\S+) node name: (.*)$")


def parse_placement(lines: list[str]) -> dict[str, Any]:
    """ONNX Runtime's own node placement (session log at VERBOSE): nodes per provider, the nodes
    it moved to the CPU on purpose (shape computations, cheaper there) and why others had no
    kernel on the requested provider."""
    providers: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    forced, nokernel = set(), {}
    for line in lines:
        if m := _HEADER.search(line):
            current = providers.setdefault(m.group(2), {"count": 0, "nodes": []})
            current["count"] += int(m.group(3))
        elif current is not None and "VerifyEachNodeIsAssignedToAnEp" in line and (
                m := _NODE.search(line)):
            current["nodes"].append({"op": m.group(1), "name": m.group(2)})
        elif m := _FORCED.search(line):
            forced.add(m.group(1))
        elif m := _NOKERNEL.search(line):
            nokernel[m.group(3).strip()] = f"{m.group(1)} has no kernel for {m.group(2)}"
    return {"providers": providers, "cpu_on_purpose": sorted(forced), "no_kernel": nokernel}


def _reasons(lines: list[str]) -> list[str]:
    """ONNX Runtime's warnings and errors about providers, each once."""
    keep = re.compile(r"\[[EW]:onnxruntime|EP Error|Falling back|not in available provider|"
                      r"Failed to (load|create)|kernel not found", re.I)
    seen: list[str] = []
    for line in lines:
        if keep.search(line) and "Some nodes were not assigned" not in line:
            text = re.sub(r"^.*?\] ", "", line).strip()
            if text and text not in seen:
                seen.append(text)
    return seen[:12]


def _ort_package() -> str | None:
    from importlib import metadata
    for dist in ("onnxruntime-gpu", "onnxruntime", "onnxruntime-directml", "onnxruntime-openvino"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            return f"{dist} {metadata.version(dist)}"
    return None


def onnx_checks(o: Options, nvml: Nvml | None) -> list[Check]:
    try:
        import onnxruntime as ort
    except ImportError as e:
        return [Check("onnxruntime", UNKNOWN, f"--onnx given but onnxruntime is not importable "
                      f"here ({e})")]
    assert o.onnx is not None
    so = ort.SessionOptions()
    so.log_severity_level = 0  # VERBOSE: the "Node placements" report
    with captured() as log:
        ort.set_default_logger_severity(0)  # "Force fallback to CPU" comes from the default one
        t0 = time.perf_counter()  # the cold start: read the model, build the session
        try:
            sess = ort.InferenceSession(o.onnx, so, providers=o.providers)
        except Exception as e:
            sess, error = None, e
        finally:
            load_ms = (time.perf_counter() - t0) * 1000.0
            ort.set_default_logger_severity(2)
    available = ort.get_available_providers()
    d: dict[str, Any] = {"version": ort.__version__, "package": _ort_package(),
                         "requested": o.providers, "available": available}
    if sess is None:
        kind = type(error).__name__
        if kind in ("InvalidProtobuf", "InvalidGraph", "NoSuchFile", "NoModel", "InvalidArgument"):
            raise InputError([{"file": o.onnx, "field": "--onnx",
                               "message": f"ONNX Runtime cannot load the model: {error}"}])
        d["reasons"] = _reasons(log)
        return [Check("onnxruntime", FAIL, f"session could not be created ({kind}): {error}", d)]
    checks = [_provider_check(o, sess, log, d), cold_start_check(o, load_ms)]
    if o.canary is not None:
        checks += canary_checks(o, sess, nvml, d)
    return checks


# network and remote filesystems a model file may be read from (a FUSE one we do not know is
# reported as unknown, not as local)
NETWORK_FS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "gpfs", "beegfs",
    "9p", "afs", "ocfs2", "fuse.sshfs", "fuse.s3fs", "fuse.gcsfuse", "fuse.goofys",
    "fuse.rclone", "fuse.juicefs", "fuse.mountpoint-s3", "fuse.blobfuse2", "fuse.glusterfs",
    "fuse.ceph", "fuse.lxcfs", "virtiofs"})
LOCAL_FS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "tmpfs",
                      "overlay", "squashfs", "vfat", "ramfs", "bcachefs"})


def _unescape(path: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def model_filesystem(path: str, root: str = "/") -> dict[str, Any]:
    """The mount the file lies on (the longest mount point above its real path, from
    /proc/self/mountinfo): mount point, filesystem type, source, and whether it is a network
    filesystem (None: unknown, e.g. an unlisted FUSE type or no mount table)."""
    real = os.path.realpath(path)
    try:
        with open(os.path.join(root, "proc/self/mountinfo"), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        return {"mount": None, "fstype": None, "source": None, "network": None,
                "error": f"cannot read the mount table: {e.strerror}"}
    best: tuple[str, str, str] | None = None
    for line in lines:
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 2:
            continue
        mnt = _unescape(fields[4])
        inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
        if inside and (best is None or len(mnt) >= len(best[0])):
            best = (mnt, tail[0], _unescape(tail[1]))
    if best is None:
        return {"mount": None, "fstype": None, "source": None, "network": None,
                "error": "no mount holds the file"}
    mnt, fstype, src = best
    network = True if fstype in NETWORK_FS else False if fstype in LOCAL_FS else None
    return {"mount": mnt, "fstype": fstype, "source": src, "network": network}


def cold_start_check(o: Options, load_ms: float) -> Check:
    """How long the model took to load and its session to be created, and where the file
    lies: a network filesystem makes every cold start pay the network."""
    assert o.onnx is not None
    fs = model_filesystem(o.onnx, o.root)
    d = {"load_ms": round(load_ms, 3), "max_load_ms": o.max_load_ms,
         "file_bytes": os.path.getsize(o.onnx), **{f"fs_{k}": v for k, v in fs.items()}}
    where = {True: "network", False: "local", None: "unknown"}[fs["network"]]
    text = (f"model loaded and session created in {load_ms:.1f} ms from a {where} filesystem "
            f"({fs['fstype'] or '?'} at {fs['mount'] or '?'})")
    warn = []
    if fs["network"]:
        warn.append(f"{o.onnx} is read over the network ({fs['fstype']} from {fs['source']}): "
                    "every cold start pays it; copy the model to local disk or a node cache")
    elif fs["network"] is None:
        warn.append(f"cannot tell whether {o.onnx} is on local disk: "
                    f"{fs.get('error') or 'filesystem type ' + str(fs['fstype'])}")
    if o.max_load_ms is not None and load_ms > o.max_load_ms:
        return Check("cold-start", FAIL, f"{text}: over the limit {o.max_load_ms:g} ms", d, warn)
    return Check("cold-start", PASS, text, d, warn)


def prom_text(report: dict[str, Any], model: str | None, now: float) -> str:
    """The outcome as a Prometheus textfile (node_exporter's textfile collector)."""
    def esc(v: object) -> str:
        return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    lines = ["# HELP fleet_preflight_passed 1 when every check passed",
             "# TYPE fleet_preflight_passed gauge",
             f"fleet_preflight_passed {int(report['status'] == PASS)}",
             "# HELP fleet_preflight_timestamp_seconds When the preflight ran",
             "# TYPE fleet_preflight_timestamp_seconds gauge",
             f"fleet_preflight_timestamp_seconds {now:.3f}"]
    cold = next((c for c in report["checks"] if c["name"] == "cold-start"), None)
    if cold is not None:
        d, lab = cold["details"], f'model="{esc(model)}"'
        lines += ["# HELP fleet_preflight_model_load_ms Model load and session creation (ms)",
                  "# TYPE fleet_preflight_model_load_ms gauge",
                  f"fleet_preflight_model_load_ms{{{lab}}} {d['load_ms']}",
                  "# HELP fleet_preflight_model_on_network_fs 1: the model file is on a "
                  "network filesystem, 0: local, -1: unknown",
                  "# TYPE fleet_preflight_model_on_network_fs gauge",
                  f"fleet_preflight_model_on_network_fs{{{lab},fstype="
                  f"\"{esc(d['fs_fstype'] or '')}\"}} "
                  f"{ {True: 1, False: 0, None: -1}[d['fs_network']] }"]
    return "\n".join(lines) + "\n"


def write_prom(path: str, text: str) -> None:
    """Atomically (a temporary file in the same directory, then a rename): the collector
    never reads half a file."""
    fd, tmp = tempfile.mkstemp(prefix=".preflight-", dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _provider_check(o: Options, sess: Any, log: list[str], d: dict[str, Any]) -> Check:
    obtained = sess.get_providers()
    placement = parse_placement(log)
    d.update(obtained=obtained, placement=placement, reasons=_reasons(log))
    missing = [p for p in o.providers if p not in obtained]
    gpu_wanted = [p for p in o.providers if p in GPU_PROVIDERS]
    problems = []
    if missing:
        runs_on = ", ".join(obtained)
        msg = f"requested {', '.join(missing)} not obtained: ONNX Runtime fell back to {runs_on}"
        absent = [p for p in missing if p not in d["available"]]
        if absent:
            msg += (f"; this build ({d['package'] or 'onnxruntime ' + d['version']}) offers only "
                    f"{', '.join(d['available'])}")
            if d["package"] and d["package"].startswith("onnxruntime ") and gpu_wanted:
                msg += " (the CPU-only package: install onnxruntime-gpu)"
        problems.append(msg)
    gpu_obtained = [p for p in gpu_wanted if p in obtained]
    if gpu_obtained:
        cpu = placement["providers"].get("CPUExecutionProvider")
        if not placement["providers"]:
            d["placement_unknown"] = True
        elif cpu:
            purpose = set(placement["cpu_on_purpose"])
            nodes = [n for n in cpu["nodes"] if n["name"] not in purpose]
            count = len(nodes) if cpu["nodes"] else cpu["count"] - len(purpose)
            if count > 0:
                shown = ", ".join(f"{n['op']} ({n['name']})" + (
                    f": {placement['no_kernel'][n['name']]}"
                    if n["name"] in placement["no_kernel"] else "") for n in nodes[:8])
                problems.append(f"{count} node(s) placed on CPUExecutionProvider while "
                                f"{', '.join(gpu_obtained)} was requested" +
                                (f": {shown}" if shown else ""))
    reasons = d["reasons"]
    why = f" (ONNX Runtime: {' | '.join(reasons[:3])})" if reasons and problems else ""
    if problems and o.allow_cpu:
        return Check("onnxruntime", PASS, f"session on {', '.join(obtained)}: CPU allowed "
                     "(--allow-cpu)", d, [p + why for p in problems])
    if problems:
        return Check("onnxruntime", FAIL, "; ".join(problems) + why, d)
    if d.get("placement_unknown"):
        return Check("onnxruntime", UNKNOWN, "providers obtained, but ONNX Runtime logged no node "
                     "placement to check", d)
    return Check("onnxruntime", PASS, f"session on {', '.join(obtained)}", d)


def _load_npz(path: str) -> dict[str, Any]:
    import numpy as np
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except Exception as e:  # a zip, pickle or format error: all mean the file is bad
        raise InputError([{"file": path, "field": "--canary",
                           "message": f"not a numpy .npz archive ({type(e).__name__}: {e})"}]
                         ) from None


def canary_checks(o: Options, sess: Any, nvml: Nvml | None, od: dict[str, Any]) -> list[Check]:
    """Run the deterministic canary: outputs within tolerance, latency, and the GPU busy."""
    import numpy as np
    import onnxruntime as ort

    assert o.canary is not None
    ipath, opath = (os.path.join(o.canary, n) for n in ("inputs.npz", "outputs.npz"))
    inputs, expected = _load_npz(ipath), _load_npz(opath)
    in_names = [i.name for i in sess.get_inputs()]
    out_names = [x.name for x in sess.get_outputs()]
    bad = [{"file": ipath, "field": n, "message": "the model's input is missing"}
           for n in in_names if n not in inputs]
    bad += [{"file": ipath, "field": n, "message": f"not an input of the model "
             f"(inputs: {', '.join(in_names)})"} for n in inputs if n not in in_names]
    bad += [{"file": opath, "field": n, "message": f"not an output of the model "
             f"(outputs: {', '.join(out_names)})"} for n in expected if n not in out_names]
    if not expected:
        bad.append({"file": opath, "field": None, "message": "no expected output in it"})
    if bad:
        raise InputError(bad)
    ro = ort.RunOptions()
    ro.log_severity_level = 3
    names = list(expected)
    sampling = nvml is not None and (
        o.min_gpu_util is not None or
        (not o.allow_cpu and any(p in GPU_PROVIDERS for p in sess.get_providers())))
    times: list[float] = []
    with captured() as log:
        try:
            t0 = time.perf_counter()
            first = sess.run(names, inputs, ro)
            cold = (time.perf_counter() - t0) * 1000
            sampler = None
            if sampling and nvml is not None:
                with contextlib.suppress(OSError):  # NVML lost its GPUs: the gpu check says so
                    sampler = Sampler(nvml)
            with sampler or contextlib.nullcontext():
                start = time.perf_counter()
                while len(times) < o.runs or (
                        sampler and time.perf_counter() - start < o.sample_seconds):
                    t0 = time.perf_counter()
                    last = sess.run(names, inputs, ro)
                    times.append((time.perf_counter() - t0) * 1000)
        except Exception as e:
            if type(e).__name__ == "InvalidArgument":
                raise InputError([{"file": ipath, "field": "--canary", "message":
                                   f"the model refuses these inputs: {e}"}]) from None
            return [Check("canary", FAIL, f"the model failed to answer: {e}",
                          {"reasons": _reasons(log)})]
    if sess.get_providers() != od["obtained"]:  # ORT's run-time fallback recreated the session
        return [Check("canary", FAIL, f"ONNX Runtime moved the session to "
                      f"{', '.join(sess.get_providers())} while answering: {_reasons(log)}")]
    d: dict[str, Any] = {"runs": len(times), "cold_ms": round(cold, 3),
                         "p50_ms": round(statistics.median(times), 3),
                         "max_ms": round(max(times), 3), "outputs": {}}
    problems = []
    for name, want, got0, got in zip(names, expected.values(), first, last, strict=True):
        err = d["outputs"][name] = _compare(np, np.asarray(got), want, o.rtol, o.atol)
        if err["ok"]:  # the first answer too: an engine built lazily may answer it differently
            err = d["outputs"][name] = _compare(np, np.asarray(got0), want, o.rtol, o.atol)
            err["run"] = "first"
        if not err["ok"]:
            problems.append(f"output {name} differs from the canary: {err['why']}")
    checks = [Check("canary", FAIL if problems else PASS, "; ".join(problems) or
                    f"{len(names)} output(s) within rtol {o.rtol}, atol {o.atol}", d)]
    if o.max_latency_ms is not None:
        slow = d["p50_ms"] > o.max_latency_ms
        checks.append(Check("latency", FAIL if slow else PASS, f"median {d['p50_ms']} ms over "
                            f"{len(times)} warm runs (limit {o.max_latency_ms} ms, cold "
                            f"{d['cold_ms']} ms)", {k: d[k] for k in ("p50_ms", "max_ms")}))
    checks.append(_busy_check(o, sampler, nvml, sampling))
    return checks


def _busy_check(o: Options, sampler: Sampler | None, nvml: Nvml | None, wanted: bool) -> Check:
    threshold = o.min_gpu_util if o.min_gpu_util is not None else 1.0
    if sampler is None:
        why = ("NVML not present" if nvml is None else "no GPU provider answers")
        status = UNKNOWN if o.min_gpu_util is not None else SKIP
        return Check("gpu-busy", status, f"GPU utilization not sampled ({why})")
    gpu = [s[0] for s in sampler.samples]
    d: dict[str, Any] = {"samples": len(gpu), "max_gpu_util": max(gpu, default=None),
         "mean_gpu_util": round(statistics.fmean(gpu), 1) if gpu else None,
         "max_memory_util": max((s[1] for s in sampler.samples), default=None),
         "threshold": threshold}
    if not gpu:
        return Check("gpu-busy", UNKNOWN, "NVML gave no utilization sample", d)
    if max(gpu) < threshold:
        return Check("gpu-busy", FAIL, f"GPU idle while answering: utilization at most "
                     f"{max(gpu)}% over {len(gpu)} samples (needs {threshold}%)", d)
    return Check("gpu-busy", PASS, f"GPU busy while answering: up to {max(gpu)}%", d)


def _compare(np: Any, got: Any, want: Any, rtol: float, atol: float) -> dict[str, Any]:
    if got.shape != want.shape:
        return {"ok": False, "why": f"shape {list(got.shape)}, expected {list(want.shape)}"}
    if got.size == 0:
        return {"ok": True}
    g, w = got.astype(np.float64), want.astype(np.float64)
    diff = np.abs(g - w)
    ok = bool(np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True))
    finite = bool(np.isfinite(diff).any())
    i = np.unravel_index(int(np.nanargmax(diff)) if finite else 0, diff.shape)
    out: dict[str, Any] = {"ok": ok, "max_abs_err": float(np.nanmax(diff)) if finite else None}
    if not ok:
        out["why"] = (f"at {list(map(int, i))} got {float(g[i])!r}, expected {float(w[i])!r} "
                      f"(max abs error {out['max_abs_err']})")
    return out


# ------------------------------------------------------------------ torch
def torch_check(gpu_expected: bool) -> Check:
    import importlib.util
    if importlib.util.find_spec("torch") is None:
        return Check("torch", SKIP, "torch not installed")
    import torch
    d: dict[str, Any] = {"version": torch.__version__, "cuda": torch.version.cuda}
    if not torch.cuda.is_available():
        if gpu_expected:
            return Check("torch", FAIL, f"torch {torch.__version__} sees no CUDA device (built "
                         f"for CUDA {torch.version.cuda}; a CPU build, or a driver too old for "
                         "it)", d)
        return Check("torch", PASS, f"torch {torch.__version__} on the CPU (no GPU expected)", d)
    d["devices"] = n = torch.cuda.device_count()
    a = torch.arange(64 * 64, dtype=torch.float32).reshape(64, 64) / 4096
    want = a @ a
    for i in range(n):
        try:
            got = (a.to(f"cuda:{i}") @ a.to(f"cuda:{i}")).cpu()
        except Exception as e:
            return Check("torch", FAIL, f"matmul on cuda:{i} failed: {e}", d)
        if not torch.allclose(got, want, rtol=1e-3, atol=1e-3):
            return Check("torch", FAIL, f"matmul on cuda:{i} gave a wrong result", d)
    return Check("torch", PASS, f"torch {torch.__version__}: {n} CUDA device(s), matmul ok", d)


# ------------------------------------------------------------------ the whole run
def run(o: Options) -> dict[str, Any]:
    """Every check that was asked for or whose runtime is present; the report document."""
    validate(o)
    gpu_providers = [p for p in o.providers if p in GPU_PROVIDERS]
    required = bool(o.gpus or o.expect_driver or (gpu_providers and not o.allow_cpu))
    nvml, nvml_error = Nvml.open()
    checks: list[Check] = []
    if "gpu" not in o.skip:
        checks.append(gpu_check(o, nvml, nvml_error, required))
    if "driver" not in o.skip:
        checks.append(driver_check(o, nvml))
    if "libraries" not in o.skip:
        checks += library_checks(o, nvml.cuda_driver_version() if nvml else None)
    if o.onnx is not None and "onnxruntime" not in o.skip:
        checks += onnx_checks(o, nvml)
    if "torch" not in o.skip:
        gpu = next((c for c in checks if c.name == "gpu"), None)
        checks.append(torch_check(required or bool(gpu and gpu.details.get("device_nodes"))))
    statuses = {c.status for c in checks}
    status = FAIL if FAIL in statuses else UNKNOWN if UNKNOWN in statuses else (
        PASS if PASS in statuses else UNKNOWN)
    code = {PASS: 0, FAIL: 1, UNKNOWN: 3}[status]
    report = {"schema": SCHEMA, "status": status, "exit_code": code,
              "checks": [asdict(c) for c in checks],
              "summary": "nothing to check" if statuses <= {SKIP} else
              f"{sum(c.status == FAIL for c in checks)} failed, "
              f"{sum(c.status == UNKNOWN for c in checks)} could not check"}
    if o.prom_file is not None:
        write_prom(o.prom_file, prom_text(report, o.onnx, time.time()))
    return report


def render(report: dict[str, Any]) -> str:
    """The checks, one line each (and their warnings): the same text from `fleet preflight`."""
    lines = []
    for c in report["checks"]:
        lines.append(f"{c['status'].upper():<16} {c['name']:<13} {c['message']}")
        lines += [f"{'':<16} {'':<13} warning: {w}" for w in c["warnings"]]
    return "\n".join(lines)


def summary_line(report: dict[str, Any]) -> str:
    """The last line; printed as `error: ...` when the run did not pass (as fleet prints it)."""
    return f"preflight: {report['status']} ({report['summary']})"


def error_document(code: int, message: str, problems: list[dict[str, Any]]) -> dict[str, Any]:
    """The same error shape as every `fleet --json` command (docs/exit-codes.md)."""
    first = problems[0] if problems else {}
    err: dict[str, Any] = {"code": code, "message": message, "where": {
        "file": first.get("file"), "line": first.get("line"), "field": first.get("field")}}
    if problems:
        err["problems"] = problems
    return {"schema": SCHEMA, "error": err}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="preflight.py", description=__doc__.split("\n\n")[0])
    a = p.add_argument
    csv = lambda s: [x.strip() for x in s.split(",") if x.strip()]  # noqa: E731
    a("--onnx", metavar="MODEL", help="ONNX model to open a session on")
    a("--providers", type=csv, default=[], help="the service's provider order, comma-separated")
    a("--allow-cpu", action="store_true", help="CPU placement or fallback is intended")
    a("--canary", metavar="DIR", help="folder with inputs.npz and outputs.npz")
    a("--rtol", type=float, default=1e-3)
    a("--atol", type=float, default=1e-5)
    a("--max-latency-ms", type=float, help="limit on the median warm latency")
    a("--max-load-ms", type=float, help="limit on loading the model and creating the session")
    a("--prom-file", metavar="PATH", help="also write the outcome as a Prometheus textfile")
    a("--runs", type=int, default=20, help="warm runs after the first (default 20)")
    a("--sample-seconds", type=float, default=1.0, help="keep answering this long while NVML "
      "samples utilization (default 1)")
    a("--min-gpu-util", type=float, help="GPU utilization %% the warm-up must reach (default: "
      "above 0 when a GPU provider answers)")
    a("--gpus", type=int, help="GPUs this container must see")
    for lib in ("driver", "cuda", "cudnn", "tensorrt"):
        a(f"--expect-{lib}", metavar="VERSION")
    a("--require-lib", dest="require_libs", action="append", default=[],
      help="cuda-runtime, cudnn or tensorrt must load (repeatable)")
    a("--skip", action="append", default=[], help=f"skip a check: {', '.join(CHECKS)}")
    a("--root", default="/", help="read /dev and /proc under this folder (tests)")
    a("--json", action="store_true", help="one JSON document on stdout")
    return p


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    json_out = "--json" in args
    p = parser()
    p.exit = lambda status=0, message=None: _usage_exit(status, message, json_out)  # type: ignore
    ns = vars(p.parse_args(args))
    ns.pop("json")
    try:
        report = run(Options(**ns))
    except InputError as e:
        for pr in e.problems:
            print(f"error: {problem_text(pr)}", file=sys.stderr)
        if json_out:
            print(json.dumps(error_document(2, str(e), e.problems), indent=2, sort_keys=True))
        return 2
    except Exception as e:  # a bug or a runtime surprise: could not check, never a pass
        print(f"internal error: {type(e).__name__}: {e}", file=sys.stderr)
        if json_out:
            print(json.dumps(error_document(3, f"internal error: {e}", []), sort_keys=True))
        return 3
    # the check lines are the result (stdout); with --json stdout holds the JSON alone
    print(render(report), file=sys.stderr if json_out else sys.stdout)
    print(("" if report["status"] == PASS else "error: ") + summary_line(report), file=sys.stderr)
    if json_out:
        print(json.dumps(report, indent=2, sort_keys=True, default=str))
    return int(report["exit_code"])


def _usage_exit(status: int, message: str | None, json_out: bool) -> None:
    if status == 0:
        sys.exit(0)
    text = (message or "usage error").strip()
    print(text, file=sys.stderr)
    if json_out:
        print(json.dumps(error_document(2, text, []), sort_keys=True))
    sys.exit(2)


if __name__ == "__main__":
    sys.exit(main())
