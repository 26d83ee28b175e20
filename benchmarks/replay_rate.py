"""Can the replay client hold an open-loop rate on one core? (target: 2,000 req/s, p99 < 1 ms)

    .venv/bin/python benchmarks/replay_rate.py [--rate 2000] [--duration 10] [--runs 3]

A no-op HTTP endpoint (asyncio, keep-alive, fixed 2-byte body) runs in its own process; the
replay client (`fleet/bench/replay.py`, exactly as shipped to hosts) runs in another, pinned to
one CPU when the machine has more than one. The trace is Poisson arrivals at `--rate`. Prints,
per run: requests, achieved vs target send rate, schedule error p50/p99/max (send time minus
intended time), latency p50/p99, the client's CPU use, and the machine's own timer wake-up
lateness on the same CPU (a bare select() loop, measured after the run): on a busy shared
machine that floor, not the client, dominates the schedule error tail. Then the median.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
            self.t.write(RESP)
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


TIMER_JITTER = r"""
import random, select, sys, time
rnd, errs = random.Random(0), []
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    d = rnd.expovariate(float(sys.argv[1]))
    due = time.monotonic() + d
    select.select([], [], [], d)
    errs.append(time.monotonic() - due)
errs.sort()
print(errs[int(len(errs) * 0.99)] * 1000)
"""


def timer_jitter_p99_ms(rate: float, seconds: float, cpu: int | None) -> float:
    """The machine's own wake-up lateness on that CPU: the floor under any schedule error."""
    cmd = [sys.executable, "-c", TIMER_JITTER, str(rate), str(seconds)]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    return float(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)


def one_run(rate: float, duration: float, seed: int, port: int, cpu: int | None) -> dict:
    sys.path.insert(0, str(REPLAY.parent))
    import replay  # the shipped file itself

    trace = replay.poisson_trace(rate, duration, seed=seed, path="/noop")
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for r in trace:
            f.write(json.dumps({"t": r["t"], "path": r["path"]}) + "\n")
    cmd = [sys.executable, str(REPLAY), "--trace", f.name, "--endpoint",
           f"http://127.0.0.1:{port}", "--warmup", "1", "--no-samples"]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    os.unlink(f.name)
    if not p.stdout.strip():
        raise SystemExit(f"replay failed: {p.stderr}")
    doc = json.loads(p.stdout)
    m = doc["metrics"]
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"timer_jitter_p99_ms": timer_jitter_p99_ms(rate, 3, cpu),
            "requests": m["requests"], "target_rps": m["target_rps"],
            "achieved_rps": m["achieved_rps"], "valid": doc["valid"],
            "sched_p50_ms": m["schedule_error_ms_p50"], "sched_p99_ms": m["schedule_error_ms_p99"],
            "sched_max_ms": m["schedule_error_ms_max"], "lat_p50_ms": m["latency_ms_p50"],
            "lat_p99_ms": m["latency_ms_p99"], "errors": m["errors"],
            "client_cpu": cpu_s / wall}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=2000)
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    port = free_port()
    cpus = sorted(os.sched_getaffinity(0))
    server_cmd = [sys.executable, "-c", NOOP_SERVER, str(port)]
    if len(cpus) > 1:  # server on one CPU, client on another
        server_cmd = ["taskset", "-c", str(cpus[0]), *server_cmd]
    server = subprocess.Popen(server_cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        rows = []
        for i in range(args.runs):
            row = one_run(args.rate, args.duration, i + 1, port,
                          cpus[1] if len(cpus) > 1 else None)
            rows.append(row)
            print(f"run {i + 1}: " + "  ".join(
                f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
        print(f"median of {args.runs} (client on 1 CPU of {len(cpus)}): "
              f"achieved {statistics.median(r['achieved_rps'] for r in rows):.1f}/s "
              f"(target {statistics.median(r['target_rps'] for r in rows):.1f}/s), "
              f"schedule error p99 {statistics.median(r['sched_p99_ms'] for r in rows):.3f} ms, "
              f"max {statistics.median(r['sched_max_ms'] for r in rows):.3f} ms, "
              f"latency p99 {statistics.median(r['lat_p99_ms'] for r in rows):.3f} ms, "
              f"client CPU {statistics.median(r['client_cpu'] for r in rows) * 100:.0f}%, "
              f"bare timer p99 {statistics.median(r['timer_jitter_p99_ms'] for r in rows):.3f} ms, "
              f"all valid: {all(r['valid'] for r in rows)}")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
