"""Can the replay client hold an open-loop schedule as well as the machine's bare timer can?

    .venv/bin/python benchmarks/replay_rate.py [--rate 2000] [--duration 10] [--runs 5]
        [--gpu-util] [--server-delay-ms MS] [--client OTHER/replay.py]

A no-op HTTP endpoint (asyncio, keep-alive, fixed 2-byte body, after `--server-delay-ms`) runs
in its own process; the replay client (`fleet/bench/replay.py`, exactly as shipped to hosts)
runs in another, pinned to one CPU when the machine has more than one. The trace is Poisson
arrivals at `--rate`.

The baseline, the *bare timer*, runs at the same time on the same CPU: a plain loop that sleeps
in select() (with the client's 1 ns timer slack) until each due time of its own Poisson schedule
at the same rate, and records the lateness of every due time exactly as the client records its
schedule error (the time it acts minus the intended time; due times that pass while it is held
up are all late). That is the
floor under any schedule error on that CPU at that moment; on a busy shared machine the floor
moves by 10x within seconds, so a baseline taken before or after the run says little. The
figure that matters is the ratio: client schedule-error p99 / bare-timer p99, per run, then the
median. The bare timer's per-wake lateness p99 (each sleep measured from its own start, as the
earlier version of this script did) is printed too: it hides stalls, since a 10 ms stall makes one
late wake-up there but 20 late requests in an open loop.

`--gpu-util` wraps the client in `fleet/bench/gpu_util.py` (NVML sampled every 0.2 s, as a
benchmark gate runs it) against the lab's fake NVML, both on the client's CPU, to show whether
the sampler disturbs the schedule.

Prints, per run: requests, achieved vs target send rate, schedule error p50/p99/max, the
requests due while all 256 connections were busy (the endpoint starved: their schedule error is
its backlog, not the client's timer), the bare timer's p99 (open loop and per wake), the ratio,
latency p50/p99, the client's CPU use. Then the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REPLAY = ROOT / "fleet" / "bench" / "replay.py"

NOOP_SERVER = r"""
import asyncio, sys
RESP = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/json\r\n\r\n{}"
class P(asyncio.Protocol):
    def connection_made(self, t):
        self.t, self.buf = t, b""
    def data_received(self, d):
        self.buf += d
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            self.buf = self.buf[end + 4:]  # requests here carry no body
            if DELAY:
                asyncio.get_running_loop().call_later(DELAY, self.t.write, RESP)
            else:
                self.t.write(RESP)
DELAY = float(sys.argv[2]) / 1000
async def main():
    srv = await asyncio.get_running_loop().create_server(P, "127.0.0.1", int(sys.argv[1]))
    print("ready", flush=True)
    await srv.serve_forever()
asyncio.run(main())
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


BARE_TIMER = r"""
import ctypes, json, random, select, sys, time
if sys.platform.startswith("linux"):  # the 1 ns timer slack the client asks for, too
    ctypes.CDLL(None).prctl(29, ctypes.c_ulong(1), 0, 0, 0)
rate, seconds, warmup = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
rnd, t, due = random.Random(int(sys.argv[4])), 0.0, []
while t < seconds:
    t += rnd.expovariate(rate)
    due.append(t)
start = time.monotonic() + 0.05
late, wake, k = [], [], 0
while k < len(due):
    now = time.monotonic()
    if start + due[k] > now:
        asked = now
        want = start + due[k] - now
        select.select([], [], [], want)
        now = time.monotonic()
        wake.append(now - asked - want)
    while k < len(due) and start + due[k] <= now:
        if due[k] >= warmup:
            late.append(now - start - due[k])
        k += 1
late.sort()
wake.sort()
print(json.dumps({"p99_ms": late[int(len(late) * 0.99)] * 1000,
                  "wake_p99_ms": wake[int(len(wake) * 0.99)] * 1000}))
"""


def fake_nvml_env(tmp: Path) -> dict[str, str]:
    """The lab's fake libnvidia-ml.so.1 (built from source) with two idle GPUs."""
    sys.path.insert(0, str(ROOT))
    from fleet.lab import nvml_build

    nvml_build.build(tmp)
    (tmp / "driver.conf").write_text("driver_version=595.58.03\ncuda_driver_version=13020\n")
    (tmp / "version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  595.58.03\n")
    (tmp / "state").write_text("gpu.count=2\n")
    return {"LD_LIBRARY_PATH": str(tmp), "GPUSIM_DRIVER_FILE": str(tmp / "driver.conf"),
            "GPUSIM_PROC_VERSION": str(tmp / "version"), "GPUSIM_STATE": str(tmp / "state"),
            "GPUSIM_WORK_DIR": str(tmp / "work.d")}


def one_run(rate: float, duration: float, seed: int, port: int, cpu: int | None,
            nvml_env: dict[str, str] | None, client: Path = REPLAY) -> dict[str, Any]:
    sys.path.insert(0, str(REPLAY.parent))
    import replay  # the shipped file itself

    warmup = 1.0
    trace = replay.poisson_trace(rate, duration, seed=seed, path="/noop")
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for r in trace:
            f.write(json.dumps({"t": r["t"], "path": r["path"]}) + "\n")
    cmd = [sys.executable, str(client), "--trace", f.name, "--endpoint",
           f"http://127.0.0.1:{port}", "--warmup", str(warmup), "--no-samples"]
    env = None
    if nvml_env is not None:
        cmd = [sys.executable, str(REPLAY.parent / "gpu_util.py"), "--interval", "0.2", "--", *cmd]
        env = {**os.environ, **nvml_env}
    timer = [sys.executable, "-c", BARE_TIMER, str(rate), str(duration + 0.2), str(warmup),
             str(seed + 1000)]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
        timer = ["taskset", "-c", str(cpu), *timer]
    bare = subprocess.Popen(timer, stdout=subprocess.PIPE, text=True)  # same CPU, same time
    with tempfile.TemporaryFile("w+") as err:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        assert p.stdout is not None
        out = p.stdout.read()
        _, _, usage = os.wait4(p.pid, 0)  # the client's own CPU time (and the wrapper's)
        p.returncode = 0
        wall = time.monotonic() - t0
        err.seek(0)
        stderr = err.read()
    bare_doc = json.loads(bare.communicate()[0])
    os.unlink(f.name)
    if not out.strip():
        raise SystemExit(f"replay failed: {stderr}")
    doc = json.loads(out.strip().splitlines()[-1])
    m = doc["metrics"]
    cpu_s = usage.ru_utime + usage.ru_stime
    util = doc.get("gpu_utilization")
    return {"requests": m["requests"], "target_rps": m["target_rps"],
            "achieved_rps": m["achieved_rps"], "valid": doc["valid"],
            "sched_p50_ms": m["schedule_error_ms_p50"], "sched_p99_ms": m["schedule_error_ms_p99"],
            "sched_max_ms": m["schedule_error_ms_max"], "conn_waits": m["connection_waits"],
            "bare_p99_ms": bare_doc["p99_ms"],
            "bare_wake_p99_ms": bare_doc["wake_p99_ms"],
            "ratio": m["schedule_error_ms_p99"] / bare_doc["p99_ms"],
            "lat_p50_ms": m["latency_ms_p50"], "lat_p99_ms": m["latency_ms_p99"],
            "errors": m["errors"], "client_cpu": cpu_s / wall,
            **({"util_ticks": util["ticks"]} if util else {})}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=2000)
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--client", type=Path, default=REPLAY,
                    help="another replay.py to measure (an older version, for A/B)")
    ap.add_argument("--server-delay-ms", type=float, default=0.0,
                    help="the endpoint answers after this long: ~rate x delay requests in flight")
    ap.add_argument("--gpu-util", action="store_true",
                    help="wrap the client in gpu_util.py against the lab's fake NVML")
    args = ap.parse_args()
    port = free_port()
    cpus = sorted(os.sched_getaffinity(0))
    server_cmd = [sys.executable, "-c", NOOP_SERVER, str(port), str(args.server_delay_ms)]
    if len(cpus) > 1:  # server on one CPU, client (and the bare timer) on another
        server_cmd = ["taskset", "-c", str(cpus[0]), *server_cmd]
    server = subprocess.Popen(server_cmd, stdout=subprocess.PIPE, text=True)
    with tempfile.TemporaryDirectory() as tmp:
        nvml_env = fake_nvml_env(Path(tmp)) if args.gpu_util else None
        try:
            assert server.stdout is not None and server.stdout.readline().strip() == "ready"
            rows = []
            for i in range(args.runs):
                row = one_run(args.rate, args.duration, i + 1, port,
                              cpus[1] if len(cpus) > 1 else None, nvml_env, args.client)
                rows.append(row)
                print(f"run {i + 1}: " + "  ".join(
                    f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in row.items()), flush=True)
        finally:
            server.terminate()
            server.wait()

    def med(key: str) -> float:
        return float(statistics.median(r[key] for r in rows))

    fed = [r["ratio"] for r in rows if not r["conn_waits"]]
    starved = (f"; {len(rows) - len(fed)} run(s) with requests waiting for a connection, the "
               f"others' ratio median {statistics.median(fed):.2f}" if fed else
               "; every run had requests waiting for a connection") if len(fed) < len(rows) else ""
    print(f"median of {args.runs} (client{' under gpu_util.py' if args.gpu_util else ''} and "
          f"bare timer on 1 CPU of {len(cpus)}): achieved {med('achieved_rps'):.1f}/s "
          f"(target {med('target_rps'):.1f}/s), schedule error p99 {med('sched_p99_ms'):.3f} ms "
          f"vs bare timer p99 {med('bare_p99_ms'):.3f} ms: ratio {med('ratio'):.2f} "
          f"(range {min(r['ratio'] for r in rows):.2f}-{max(r['ratio'] for r in rows):.2f}"
          f"{starved}); "
          f"bare per-wake p99 {med('bare_wake_p99_ms'):.3f} ms, schedule error p50 "
          f"{med('sched_p50_ms'):.3f} ms, max {med('sched_max_ms'):.3f} ms, latency p99 "
          f"{med('lat_p99_ms'):.3f} ms, client CPU {med('client_cpu') * 100:.0f}%, "
          f"all valid: {all(r['valid'] for r in rows)}")


if __name__ == "__main__":
    main()
