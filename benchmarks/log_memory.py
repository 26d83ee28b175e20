"""Peak memory of `fleet logs parse` and `fleet bench trace-from-log` on big generated logs.

    .venv/bin/python benchmarks/log_memory.py [--mb 200] [--runs 3] [--what logs,trace]
        [--dir DIR] [--root CHECKOUT] [--json]

Issue 28: both commands held the whole file (a 200 MB kernel log peaked at 1.5 GB, a 116 MB
nginx log at 700 MB). A weekly job on a controller must not need gigabytes for a big log; the
goal is under 300 MB peak whatever the size.

The logs are generated, `--mb` MB each (written once into --dir, default a temporary folder):

- kernel: a `dmesg` log of ordinary driver lines with the 20-line event block of
  benchmarks/logs_parse_scale.py (Xid 79/48/13/31, fallen off the bus, AER) once every 2,000
  lines: 7 events per block, about 0.35% of the lines, as on a host with a bad GPU;
- nginx: `combined` + `$request_time`, 100 requests per logged second, ending out of order (the
  arrival is the end minus the request time, so the trace must be sorted).

Each command runs --runs times as its own `python -m fleet` process; the peak RSS is the
process's own maximum resident set (getrusage via os.wait4, the kernel's high-water mark, so
no sampling can miss a spike). Printed: the file's size beside the median peak RSS and the
median wall time, and the exit code (logs parse exits 1: the events' findings fail).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from logs_parse_scale import BLOCK  # noqa: E402

NOISE = [
    "EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode. Quota mode: none.",
    "audit: type=1400 audit(1712345678.123:456): apparmor=\"STATUS\" operation=\"profile_load\"",
    "xhci_hcd 0000:09:00.2: Refused to change power state, currently in D3",
    "nvidia-nvswitch0: open (major=508)",
    "IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready",
    "systemd-journald[512]: Data hash table of /var/log/journal/system.journal has a fill level",
]
EVERY = 2000  # one event block per this many lines


def kernel_log(path: Path, size: int) -> None:
    """A dmesg-shaped log of about `size` bytes."""
    with path.open("w") as f:
        written, n, t = 0, 0, 1000.0
        while written < size:
            chunk = []
            for _ in range(1000):
                if n % EVERY < len(BLOCK):
                    text = BLOCK[n % EVERY]
                    cont = text.startswith("+")
                    text = text.lstrip("+")
                else:
                    text, cont = NOISE[n % len(NOISE)], False
                stamp = f"[{t:14.6f}] "
                chunk.append((" " * len(stamp) if cont else stamp) + text + "\n")
                n += 1
                t += 0.001
            block = "".join(chunk)
            f.write(block)
            written += len(block)


def nginx_log(path: Path, size: int) -> None:
    """An nginx combined log with $request_time of about `size` bytes."""
    base = 1764583200  # 2025-12-01T10:00:00Z
    with path.open("w") as f:
        written, n = 0, 0
        while written < size:
            chunk = []
            for _ in range(1000):
                sec = base + n // 100
                stamp = time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(sec))
                rt = (n * 7919 % 997) / 1000.0  # 0 to 0.996 s: requests end out of order
                chunk.append(f'10.0.{n % 250}.{n % 7} - - [{stamp}] "POST /v1/models/m{n % 5}/'
                             f'infer?req={n} HTTP/1.1" 200 {512 + n % 300} "-" '
                             f'"python-httpx/0.27.0" {rt:.3f}\n')
                n += 1
            block = "".join(chunk)
            f.write(block)
            written += len(block)


def run(argv: list[str], root: Path = ROOT) -> tuple[float, float, int]:
    """(peak RSS in MiB, wall seconds, exit code) of one fleet process, `root`'s fleet."""
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "fleet", *argv], cwd=root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_maxrss / 1024.0, time.monotonic() - t0, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=200.0, help="size of each generated log")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--what", default="logs,trace")
    ap.add_argument("--dir", help="where to write the logs (default: a temporary folder)")
    ap.add_argument("--root", type=Path, default=ROOT,
                    help="run the fleet of another checkout (e.g. one before the change)")
    ap.add_argument("--json", action="store_true", help="the figures as JSON on stdout")
    args = ap.parse_args()
    size = int(args.mb * 1024 * 1024)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        folder = Path(tmp)
        rows = []
        for what in args.what.split(","):
            if what == "logs":
                log = folder / "kern.log"
                kernel_log(log, size)
                argv = ["logs", "parse", str(log), "--json"]
            elif what == "trace":
                log = folder / "access.log"
                nginx_log(log, size)
                argv = ["bench", "trace-from-log", str(log), "-o", str(folder / "t.jsonl"),
                        "--json"]
            else:
                ap.error(f"--what: expected logs or trace, got {what!r}")
            runs = [run(argv, args.root) for _ in range(max(1, args.runs))]
            row = {"command": " ".join(argv[:2]), "file_mb": round(log.stat().st_size / 2**20, 1),
                   "peak_rss_mb": round(statistics.median(r[0] for r in runs), 1),
                   "wall_s": round(statistics.median(r[1] for r in runs), 2),
                   "exit": sorted({r[2] for r in runs}), "runs": len(runs)}
            rows.append(row)
            log.unlink()
            if not args.json:
                print(f"{row['command']:22} file {row['file_mb']:7.1f} MB   peak RSS "
                      f"{row['peak_rss_mb']:7.1f} MB (median of {len(runs)})   "
                      f"{row['wall_s']:6.2f} s   exit {row['exit']}", flush=True)
    if args.json:
        print(json.dumps({"benchmark": "log_memory", "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
