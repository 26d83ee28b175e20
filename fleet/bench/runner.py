#!/usr/bin/env python3
"""fleet synthetic benchmark runner: measure what the host's GPUs can do, print one JSON document.

Shipped to hosts and run with the host's python3 (3.9+); stdlib only (torch or cupy are used
when the host has them). The controller imports this file (`fleet.bench.runner`) for its pure
parsers.

    python3 runner.py [--command 'CMD ARGS'] [--source auto|command|dcgm|cuda]
                      [--repeats N] [--dcgm-level N] [--size N]

Sources, in the order `auto` tries them:
  command  a configured command that prints one JSON object of metrics (the pool's settings name
           it; the lab's `fleet-lab-bench`). Run `--repeats` times; every numeric field becomes
           a metric with one sample per run (or the fields of a nested "metrics" object). An
           `"ok": false` or a non-zero exit is a failed run.
  dcgm     `dcgmi diag -r N -j`, parsed: any test that fails, and any PASS that carries errors or
           warnings inside, fails the run (a PASS with errors inside is not a pass).
  cuda     a micro-benchmark through torch or cupy: bf16 and fp16 matmul TFLOP/s, device-to-
           device copy bandwidth (bytes read + written per second), pinned host-to-device
           bandwidth; CUDA events, warm-up, the median of repeats; every repeat is a sample.
  none     nothing usable: the verdict is "could not measure", never a pass.

Output: {"suite": "synthetic", "source", "verdict": "measured" | "pass" | "fail" |
"could not measure", "samples": {metric: [values]}, "details": {...}, "errors": [...]}.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time

CMD_TIMEOUT_S = 900.0
DCGM_DIAG_TIMEOUT_S = {1: 300.0, 2: 900.0, 3: 3600.0, 4: 4 * 3600.0}
"""Per `dcgmi diag -r` level: about 4x NVIDIA's typical duration (seconds, ~2 min, ~15 min);
level 4 has no published figure beyond "longer than 3" (memtest), so a long ceiling."""
NOT_METRICS = {"ok", "samples", "n", "count", "rc", "exit_code", "pid", "seed", "repeats"}


def _result(source, verdict, samples=None, details=None, errors=None):
    return {"suite": "synthetic", "source": source, "verdict": verdict,
            "samples": samples or {}, "details": details or {}, "errors": errors or []}


def _last_json_object(text):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                return doc
    start = text.find("{")
    if start >= 0:
        try:
            doc = json.loads(text[start:])
            if isinstance(doc, dict):
                return doc
        except ValueError:
            pass
    return None


def metrics_of(doc):
    """Numeric fields of a benchmark's JSON object: its "metrics" object when it has one."""
    src = doc.get("metrics") if isinstance(doc.get("metrics"), dict) else doc
    out = {}
    for k, v in src.items():
        if k in NOT_METRICS or isinstance(v, bool):
            continue
        if isinstance(v, (int, float)) and v == v:
            out[str(k)] = float(v)
        elif isinstance(v, list) and v and all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            out[str(k)] = [float(x) for x in v]
    return out


def run_command(argv, repeats=3, timeout=CMD_TIMEOUT_S, runner=subprocess.run):
    samples, errors, details = {}, [], {}
    for i in range(repeats):
        try:
            p = runner(argv, capture_output=True, text=True, timeout=timeout)
        except FileNotFoundError:
            return _result("command", "could not measure",
                           errors=["command not found: " + argv[0]])
        except subprocess.TimeoutExpired:
            errors.append(f"run {i + 1}: timed out after {timeout:g}s")
            continue
        doc = _last_json_object(p.stdout or "")
        if doc is None:
            errors.append(f"run {i + 1}: exit {p.returncode}, no JSON object on stdout: "
                          + (p.stderr or "").strip()[-200:])
            continue
        if p.returncode != 0 or doc.get("ok") is False:
            errors.append(f"run {i + 1}: exit {p.returncode}: "
                          + str(doc.get("error") or (p.stderr or "").strip()[-200:]))
            continue
        for k, v in metrics_of(doc).items():
            samples.setdefault(k, []).extend(v if isinstance(v, list) else [v])
        for k in ("driver", "release", "benchmark"):
            if isinstance(doc.get(k), str):
                details[k] = doc[k]
    details["runs"] = repeats
    verdict = "fail" if errors else "measured"
    return _result("command", verdict, samples, details, errors)


# --- DCGM ---------------------------------------------------------------------------------------

_NUMBER_UNIT = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(GB/s|Gflops|GFLOPS|TFLOPS|Tflops)")


def _slug(text):
    return re.sub(r"[^a-z0-9]+", "_", str(text).lower()).strip("_")


def _problems(entry):
    out = []
    for key in ("warnings", "errors", "error", "warning"):
        v = entry.get(key)
        if not v:
            continue
        for item in v if isinstance(v, list) else [v]:
            if isinstance(item, dict):
                msg = item.get("warning") or item.get("msg") or item.get("message") or item.get(
                    "error") or json.dumps(item, sort_keys=True)
            else:
                msg = str(item)
            if msg.strip():
                out.append(msg.strip())
    return out


def parse_dcgm_diag(text):
    """`dcgmi diag -j` output (DCGM 2.x to 4.x layouts) to a runner result.

    Walks every test's results; a Fail status fails, and so does a Pass carrying errors or
    warnings. Skipped tests do not count. Numbers with units in the info strings (GB/s, Gflops)
    become metrics named dcgm_<test>_<unit>.
    """
    try:
        doc = json.loads(text[text.find("{"):]) if "{" in text else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        return _result("dcgm", "could not measure", errors=["dcgmi printed no JSON document"])
    tests, samples, errors = [], {}, []
    for err in _problems(doc):
        errors.append("dcgm: " + err)

    def walk(node, test_name):
        if isinstance(node, list):
            for item in node:
                walk(item, test_name)
            return
        if not isinstance(node, dict):
            return
        name = node.get("name") or node.get("test_name") or test_name
        status = node.get("status")
        if isinstance(status, str) and "test_summary" not in node:
            problems = _problems(node)
            gpu = node.get("gpu_ids", node.get("entity_id"))
            tests.append({"test": name, "gpu": gpu, "status": status, "problems": problems})
            info = node.get("info")
            for line in info if isinstance(info, list) else [info] if info else []:
                for value, unit in _NUMBER_UNIT.findall(str(line)):
                    key = f"dcgm_{_slug(name)}_{_slug(unit.replace('/', 'p'))}"
                    samples.setdefault(key, []).append(float(value))
        for key, value in node.items():
            if key not in ("warnings", "errors", "info") and isinstance(value, (dict, list)):
                walk(value, name)

    walk(doc, None)
    if not tests:
        return _result("dcgm", "could not measure", errors=["no test results in the dcgmi output"])
    for t in tests:
        s = t["status"].strip().lower()
        where = f"{t['test']}" + (f" (GPU {t['gpu']})" if t["gpu"] not in (None, "") else "")
        if s.startswith("fail"):
            errors.append(f"{where}: failed" + (": " + "; ".join(t["problems"])
                                                if t["problems"] else ""))
        elif s.startswith("pass") and t["problems"]:
            errors.append(f"{where}: PASS with errors inside: " + "; ".join(t["problems"]))
    verdict = "fail" if errors else "pass"
    details = {"tests": len(tests), "failed": sum(1 for e in errors if e)}
    return _result("dcgm", verdict, samples, details, errors)


def run_dcgm(level=1, timeout=None, runner=subprocess.run):
    if timeout is None:
        timeout = DCGM_DIAG_TIMEOUT_S.get(int(level), CMD_TIMEOUT_S)
    try:
        p = runner(["dcgmi", "diag", "-r", str(int(level)), "-j"], capture_output=True,
                   text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return _result("dcgm", "could not measure", errors=[f"dcgmi: {exc}"])
    res = parse_dcgm_diag(p.stdout or "")
    res["details"]["level"] = int(level)
    if res["verdict"] == "could not measure" and p.returncode != 0:
        res["errors"].append(f"dcgmi exit {p.returncode}: {(p.stderr or '').strip()[-300:]}")
    return res


# --- CUDA micro-benchmark -----------------------------------------------------------------------

def _timed(fn, repeats, warmup, event_cls, sync):
    """Seconds per call of `fn`, one value per repeat, timed by CUDA events after a warm-up."""
    for _ in range(warmup):
        fn()
    sync()
    out = []
    for _ in range(repeats):
        start, end = event_cls(), event_cls()
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) / 1000.0 if hasattr(start, "elapsed_time")
                   else end.elapsed(start))
    return out


def cuda_torch(size=8192, repeats=10, warmup=3, copy_bytes=1 << 30, inner=10):
    import torch

    if not torch.cuda.is_available():
        return None, "torch is installed but sees no CUDA device"
    dev = torch.device("cuda")

    def event():
        return torch.cuda.Event(enable_timing=True)

    samples = {}
    for label, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        a = torch.randn(size, size, device=dev, dtype=dtype)
        b = torch.randn(size, size, device=dev, dtype=dtype)
        c = torch.empty(size, size, device=dev, dtype=dtype)

        def mm(a=a, b=b, c=c):
            for _ in range(inner):
                torch.matmul(a, b, out=c)

        secs = _timed(mm, repeats, warmup, event, torch.cuda.synchronize)
        samples[f"matmul_{label}_tflops"] = [2.0 * size ** 3 * inner / s / 1e12 for s in secs]
        del a, b, c
    src = torch.empty(copy_bytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    secs = _timed(lambda: dst.copy_(src), repeats, warmup, event, torch.cuda.synchronize)
    samples["d2d_bandwidth_gbps"] = [2.0 * copy_bytes / s / 1e9 for s in secs]
    host = torch.empty(copy_bytes, dtype=torch.uint8, pin_memory=True)
    secs = _timed(lambda: src.copy_(host, non_blocking=True), repeats, warmup, event,
                  torch.cuda.synchronize)
    samples["h2d_pinned_bandwidth_gbps"] = [copy_bytes / s / 1e9 for s in secs]
    details = {"framework": "torch " + torch.__version__, "cuda": torch.version.cuda,
               "device": torch.cuda.get_device_name(0), "matmul_size": size,
               "copy_bytes": copy_bytes, "repeats": repeats, "warmup": warmup}
    return samples, details


def cuda_cupy(size=8192, repeats=10, warmup=3, copy_bytes=1 << 30, inner=10):
    import cupy

    if cupy.cuda.runtime.getDeviceCount() < 1:
        return None, "cupy is installed but sees no CUDA device"

    class Event:
        def __init__(self):
            self.e = cupy.cuda.Event()

        def record(self):
            self.e.record()

        def synchronize(self):
            self.e.synchronize()

        def elapsed_time(self, end):
            return cupy.cuda.get_elapsed_time(self.e, end.e)

    def sync():
        cupy.cuda.Device().synchronize()

    samples = {}
    a = cupy.random.standard_normal((size, size), dtype=cupy.float32).astype(cupy.float16)
    b = cupy.random.standard_normal((size, size), dtype=cupy.float32).astype(cupy.float16)
    c = cupy.empty((size, size), dtype=cupy.float16)

    def mm(a=a, b=b, c=c):
        for _ in range(inner):
            cupy.matmul(a, b, out=c)

    secs = _timed(mm, repeats, warmup, Event, sync)
    samples["matmul_fp16_tflops"] = [2.0 * size ** 3 * inner / s / 1e12 for s in secs]
    del a, b, c
    src = cupy.empty(copy_bytes, dtype=cupy.uint8)
    dst = cupy.empty_like(src)
    secs = _timed(lambda: dst.__setitem__(slice(None), src), repeats, warmup, Event, sync)
    samples["d2d_bandwidth_gbps"] = [2.0 * copy_bytes / s / 1e9 for s in secs]
    mem = cupy.cuda.alloc_pinned_memory(copy_bytes)
    import numpy

    host = numpy.frombuffer(mem, dtype=numpy.uint8, count=copy_bytes)
    secs = _timed(lambda: src.set(host), repeats, warmup, Event, sync)
    samples["h2d_pinned_bandwidth_gbps"] = [copy_bytes / s / 1e9 for s in secs]
    details = {"framework": "cupy " + cupy.__version__, "matmul_size": size,
               "copy_bytes": copy_bytes, "repeats": repeats, "warmup": warmup,
               "note": "cupy has no bfloat16: fp16 matmul only"}
    return samples, details


def run_cuda(size=8192, repeats=10, warmup=3):
    errors = []
    for name, fn in (("torch", cuda_torch), ("cupy", cuda_cupy)):
        try:
            __import__(name)
        except ImportError:
            errors.append(f"{name}: not importable")
            continue
        try:
            samples, details = fn(size=size, repeats=repeats, warmup=warmup)
        except Exception as exc:  # a CUDA error is a measurement failure, reported as such
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if samples is None:
            errors.append(f"{name}: {details}")
            continue
        details["median"] = {k: round(statistics.median(v), 2) for k, v in samples.items()}
        return _result("cuda", "measured", samples, details)
    return _result("cuda", "could not measure", errors=errors)


# --- entry point --------------------------------------------------------------------------------

def run(source="auto", command=None, repeats=3, dcgm_level=1, size=8192,
        which=shutil.which, cuda=run_cuda):
    """The runner's decision: which source to use, and its result."""
    tried = []
    if source in ("auto", "command") and command:
        return run_command(shlex.split(command), repeats)
    if source == "command":
        return _result("command", "could not measure", errors=["no --command given"])
    if source in ("auto", "dcgm"):
        if which("dcgmi"):
            return run_dcgm(dcgm_level)
        tried.append("dcgmi: not installed")
        if source == "dcgm":
            return _result("dcgm", "could not measure", errors=tried)
    if source in ("auto", "cuda"):
        res = cuda(size=size, repeats=max(repeats, 5))
        if res["verdict"] != "could not measure" or source == "cuda":
            return res
        tried += res["errors"]
    return _result("none", "could not measure", errors=tried)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="runner.py", description=__doc__.split("\n")[0])
    ap.add_argument("--source", choices=("auto", "command", "dcgm", "cuda"), default="auto")
    ap.add_argument("--command", default=os.environ.get("FLEET_BENCH_COMMAND"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dcgm-level", type=int, default=1, choices=(1, 2, 3, 4))
    ap.add_argument("--size", type=int, default=8192, help="matmul size for the CUDA benchmark")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    res = run(args.source, args.command, args.repeats, args.dcgm_level, args.size)
    res["details"]["seconds"] = round(time.monotonic() - t0, 3)
    print(json.dumps(res, sort_keys=True))
    return 0 if res["verdict"] in ("measured", "pass") else 1


if __name__ == "__main__":
    sys.exit(main())
