"""The lab's performance model: what a release costs in speed, measured on the host.

Each driver package records its release's `perf_factor` (1.0 = baseline; 0.75 = a candidate that
silently lost fused kernels) and `perf_noise` in `/usr/share/gpusim/driver.conf`; a `slow-bench`
fault adds `perf.slowdown` to the host state. Two host-side programs (stdlib + pynvml only) turn
that into measurements across a real process and network boundary:

- `fleet-lab-bench [--duration S]`: a synthetic benchmark whose "kernels" are sleeps sized by the
  factor; like CUDA event timing it reports each kernel's own duration (not the host's wake-up
  delay, which on a busy 2-core machine made the judge inconclusive) and prints one JSON object
  (throughput, latency percentiles, driver, release).
- `model_server.py ADDRESS`: a tiny HTTP "model server" on port 8000 (`GET /infer`, `GET /health`)
  whose latency follows the same factor; replays of workload traces hit it over the network.
Both refuse to run when NVML cannot initialise (driver not loaded, version mismatch), like CUDA.
"""

from __future__ import annotations

import re

from fleet.errors import BadInput, Problem
from fleet.lab.repo import Perf

_COMMON = r"""
import json, os, random, sys, time

def _kv(path):
    out = {}
    try:
        with open(path) as f:
            for line in f:
                if "=" in line and not line.startswith("#"):
                    k, _, v = line.partition("=")
                    out[k.strip()] = v.strip()
    except OSError:
        pass
    return out

def perf_config():
    drv = _kv("/usr/share/gpusim/driver.conf")
    st = _kv("/var/lib/gpusim/state")
    factor = float(drv.get("perf_factor", "1")) * float(st.get("perf.slowdown", "1"))
    return {"factor": factor, "noise": float(drv.get("perf_noise", "0.02")),
            "base": float(st.get("perf.base", "1000")), "release": drv.get("release"),
            "driver": drv.get("driver_version")}

def nvml_error():
    try:
        import pynvml
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return None
    except Exception as e:  # NVMLError or ImportError
        return type(e).__name__ + ": " + str(e)
"""

BENCH_SCRIPT = (
    "#!/usr/bin/python3\n# fleet lab synthetic benchmark (see fleet/lab/perf.py)\n"
    + _COMMON
    + r"""
def main():
    args = sys.argv
    duration = float(args[args.index("--duration") + 1]) if "--duration" in args else 0.3
    err = nvml_error()
    if err:
        print(json.dumps({"benchmark": "synthetic", "ok": False, "error": err}))
        return 2
    cfg = perf_config()
    step = 0.004 / max(cfg["factor"], 1e-3)  # one "kernel" at factor 1.0 takes 4 ms
    lat = []
    t_end = time.monotonic() + duration
    while time.monotonic() < t_end or len(lat) < 5:
        # a GPU benchmark times its kernels with device events, which a busy host CPU does not
        # stretch: the kernel's own time is the sample, the sleep only makes it take that long
        t = max(0.0, random.gauss(step, step * cfg["noise"]))
        time.sleep(t)
        lat.append(t)
    lat.sort()
    mean = sum(lat) / len(lat)
    print(json.dumps({
        "benchmark": "synthetic", "ok": True, "samples": len(lat),
        "throughput": round(cfg["base"] * 0.004 / mean, 3),
        "latency_ms_p50": round(lat[len(lat) // 2] * 1000, 3),
        "driver": cfg["driver"], "release": cfg["release"]}))
    return 0

sys.exit(main())
"""
)

MODEL_SERVER_SCRIPT = (
    "#!/usr/bin/python3\n# fleet lab model server (see fleet/lab/perf.py)\n"
    + _COMMON
    + r"""
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def _send(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        err = nvml_error()
        if err:
            why = "CUDA driver initialization failed: " + err
            return self._send(503, {"ok": False, "error": why})
        cfg = perf_config()
        if self.path.startswith("/health"):
            return self._send(200, {"ok": True, "driver": cfg["driver"], "release": cfg["release"]})
        if self.path.startswith("/infer"):
            base = 0.010 / max(cfg["factor"], 1e-3)  # 10 ms at factor 1.0
            t = max(0.0, random.gauss(base, base * cfg["noise"]))
            time.sleep(t)
            return self._send(200, {"ok": True, "latency_ms": round(t * 1000, 3),
                                    "driver": cfg["driver"], "release": cfg["release"]})
        self._send(404, {"ok": False, "error": "unknown path"})

ThreadingHTTPServer.daemon_threads = True
_addr = sys.argv[1] if len(sys.argv) > 1 else "0.0.0.0"
ThreadingHTTPServer((_addr, 8000), Handler).serve_forever()
"""
)

_PERF_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]{0,62})=([0-9.]+)(?::([0-9.]+))?$")


def parse_perf(items: list[str]) -> dict[str, Perf]:
    """`NAME=FACTOR[:NOISE]` flags, e.g. `r555=0.75:0.03`."""
    out: dict[str, Perf] = {}
    problems = []
    for i, item in enumerate(items):
        m = _PERF_RE.fullmatch(item)
        if not m or not 0 < float(m.group(2)) <= 10 or (m.group(3) and float(m.group(3)) > 1):
            problems.append(
                Problem(
                    None,
                    None,
                    f"--perf[{i}]",
                    f"expected RELEASE=FACTOR[:NOISE] (0<FACTOR<=10, NOISE<=1), got {item!r}",
                )
            )
            continue
        out[m.group(1)] = Perf(float(m.group(2)), float(m.group(3) or 0.02))
    if problems:
        raise BadInput(problems)
    return out
