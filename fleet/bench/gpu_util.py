#!/usr/bin/env python3
"""fleet GPU utilization sampler: run a benchmark, sample NVML while it runs, merge the samples.

Shipped to hosts and run with the host's python3 (3.9+) like the runner and the replay client;
stdlib only (NVML through ctypes, as pynvml does). It wraps either of them, so every benchmark
gate carries the third measurement next to latency and throughput: did the GPUs do the work?

    python3 gpu_util.py [--interval S] -- python3 runner.py ARGS...

While the command runs, every `--interval` seconds (default 0.2) it reads for each GPU
`nvmlDeviceGetUtilizationRates` (SM and memory-controller busy %, over the driver's own sample
period) and, where the GPU supports it, `nvmlDeviceGetPcieThroughput` (KB/s over 20 ms). One
sample per tick per metric, over the host's GPUs:

    gpu_util_pct      mean SM utilization %            (the gate's critical check)
    gpu_mem_util_pct  mean memory-controller utilization %
    pcie_rx_mbps      PCIe bytes received by the GPUs, MB/s, summed   (where available)
    pcie_tx_mbps      PCIe bytes sent by the GPUs, MB/s, summed       (where available)

The command's last JSON object gets these under "samples" and a "gpu_utilization" object (source
"nvml" or "none" with the error: no NVML is never reported as an idle GPU, it is "not measured").
The command's exit status is kept. A command that prints no JSON object is passed through as is.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
import threading
import time

NVML_SUCCESS = 0
PCIE_TX, PCIE_RX = 0, 1  # nvmlPcieUtilCounter_t
METRICS = ("gpu_util_pct", "gpu_mem_util_pct", "pcie_rx_mbps", "pcie_tx_mbps")


class _Util(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class Nvml:
    """The few NVML calls the sampler needs; `error` says why NVML is not usable."""

    def __init__(self, libname="libnvidia-ml.so.1", loader=ctypes.CDLL):
        self.error = None
        self.handles = []
        self.pcie = True
        try:
            self.lib = loader(libname)
        except OSError as exc:
            self.lib, self.error = None, f"cannot load {libname}: {exc}"
            return
        init = getattr(self.lib, "nvmlInit_v2", None) or getattr(self.lib, "nvmlInit", None)
        rc = init() if init is not None else -1
        if rc != NVML_SUCCESS:
            self.error = f"nvmlInit failed: NVML error {rc}"
            self.lib = None
            return
        count = ctypes.c_uint(0)
        rc = self.lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
        if rc != NVML_SUCCESS:
            self.error = f"nvmlDeviceGetCount failed: NVML error {rc}"
            return
        for i in range(count.value):
            h = ctypes.c_void_p()
            if self.lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)) == NVML_SUCCESS:
                self.handles.append(h)
        if not self.handles:
            self.error = "NVML sees no GPU"
        try:
            self.lib.nvmlDeviceGetPcieThroughput  # noqa: B018 - resolves the symbol or raises
        except AttributeError:
            self.pcie = False

    def read(self):
        """One tick: {metric: value} over the GPUs that answered, and the count that did not."""
        util, mem, rx, tx, failed = [], [], 0, 0, 0
        pcie = self.pcie
        for h in self.handles:
            u = _Util()
            if self.lib.nvmlDeviceGetUtilizationRates(h, ctypes.byref(u)) != NVML_SUCCESS:
                failed += 1
                continue
            util.append(u.gpu)
            mem.append(u.memory)
            if pcie:
                a, b = ctypes.c_uint(0), ctypes.c_uint(0)
                if (self.lib.nvmlDeviceGetPcieThroughput(h, PCIE_RX, ctypes.byref(a))
                        != NVML_SUCCESS or self.lib.nvmlDeviceGetPcieThroughput(
                            h, PCIE_TX, ctypes.byref(b)) != NVML_SUCCESS):
                    pcie = self.pcie = False  # not supported here: leave PCIe out, not as 0
                else:
                    rx, tx = rx + a.value, tx + b.value
        out = {}
        if util:
            out["gpu_util_pct"] = sum(util) / len(util)
            out["gpu_mem_util_pct"] = sum(mem) / len(mem)
            if pcie:
                out["pcie_rx_mbps"] = rx / 1000.0  # KB/s -> MB/s
                out["pcie_tx_mbps"] = tx / 1000.0
        return out, failed

    def close(self):
        if self.lib is not None:
            self.lib.nvmlShutdown()


class Sampler:
    """Samples NVML on a thread every `interval` s between start() and stop()."""

    def __init__(self, nvml, interval=0.2, clock=time.monotonic):
        self.nvml, self.interval, self.clock = nvml, interval, clock
        self.ticks = []
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        nxt = self.clock()
        while not self._stop.is_set():
            values, failed = self.nvml.read()
            self.failed += failed
            if values:
                self.ticks.append(values)
            nxt += self.interval
            self._stop.wait(max(0.0, nxt - self.clock()))

    def start(self):
        if self.nvml.error is None:
            self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return self


def utilization_result(ticks, error=None, gpus=0, interval=0.2, failed=0):
    """The samples ({metric: [one value per tick]}) and the "gpu_utilization" summary (pure)."""
    samples = {}
    for t in ticks:
        for k in METRICS:
            if k in t:
                samples.setdefault(k, []).append(round(float(t[k]), 3))
    summary = {"source": "nvml" if error is None else "none", "gpus": gpus,
               "interval_s": interval, "ticks": len(ticks),
               "mean": {k: round(sum(v) / len(v), 3) for k, v in samples.items()}}
    if error is not None:
        summary["error"] = error
    elif not ticks:
        summary["error"] = "no utilization sample was read during the run"
    if failed:
        summary["failed_reads"] = failed
    return samples, summary


def merge(doc, samples, summary):
    """The benchmark's document with the utilization samples and summary added (pure)."""
    out = dict(doc)
    merged = dict(out.get("samples") or {}) if isinstance(out.get("samples"), dict) else {}
    merged.update(samples)
    out["samples"] = merged
    out["gpu_utilization"] = summary
    return out


def _last_json_line(text):
    lines = text.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i].strip()
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                return i, doc
    return None, None


def main(argv=None, nvml_factory=Nvml):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        print("usage: gpu_util.py [--interval S] -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    cut = argv.index("--")
    ap = argparse.ArgumentParser(prog="gpu_util.py", description=__doc__.split("\n")[0])
    ap.add_argument("--interval", type=float, default=0.2)
    args = ap.parse_args(argv[:cut])
    command = argv[cut + 1:]
    if not command or not 0.01 <= args.interval <= 60:
        print("gpu_util.py: need a command after -- and 0.01 <= --interval <= 60",
              file=sys.stderr)
        return 2
    nvml = nvml_factory()
    sampler = Sampler(nvml, args.interval).start()
    try:
        p = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    finally:
        sampler.stop()
        nvml.close()
    at, doc = _last_json_line(p.stdout or "")
    if doc is None:
        sys.stdout.write(p.stdout or "")
        return p.returncode
    samples, summary = utilization_result(sampler.ticks, nvml.error, len(nvml.handles),
                                          args.interval, sampler.failed)
    lines = (p.stdout or "").splitlines()
    lines[at] = json.dumps(merge(doc, samples, summary), sort_keys=True)
    print("\n".join(lines))
    return p.returncode


if __name__ == "__main__":
    sys.exit(main())
