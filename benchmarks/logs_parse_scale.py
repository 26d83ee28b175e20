"""Kernel-log parsing at scale: 1k, 10k and 100k lines, as logged and as pasted from a ticket.

    .venv/bin/python benchmarks/logs_parse_scale.py [--sizes 1000,10000,100000] [--repeats 3]
        [--module PATH] [--json]

Issue 13. The parser is `fleet.probe.hostprobe.parse_kernel_log`, the one `fleet logs parse`, the
probe on a host and `fleet facts import` use. Each log repeats a 20-line block built from the
shapes of the real captures in tests/data/realdata/kernel-logs: Xid lines (79, 48, 13, 31), the
fallen-off-the-bus message with dmesg's aligned continuation lines, an AER report (received,
PCIe Bus Error, device, bit lines) and ordinary driver lines. Three shapes of the same log:

- `dmesg`: as `dmesg` prints it, a `[seconds]` timestamp on every record;
- `indented`: as pasted into a ticket, timestamps cut and every line indented by 4 spaces (the
  shape that used to merge into one record, quadratically);
- `quoted`: the dmesg shape quoted in a mail reply ("> " on every line).

For each shape and size it prints the best of --repeats wall times, the time per line, the
number of events found (it must be the same for every shape) and the growth ratio from the
previous size: for a linear parser it stays near the size ratio (10). `--module` times another
copy of hostprobe.py instead (e.g. `git show OLD:fleet/probe/hostprobe.py > /tmp/old.py`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BLOCK = [
    "NVRM: GPU at PCI:0000:a1:00: GPU-979426f2-893a-7cbb-c4cf-81472f89a462",
    "NVRM: Xid (PCI:0000:a1:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    "NVRM: GPU 0000:a1:00.0: GPU has fallen off the bus.",
    "NVRM: A GPU crash dump has been created. If possible, please run",
    "+NVRM: nvidia-bug-report.sh as root to collect this data before",
    "+NVRM: the NVIDIA kernel module is unloaded.",
    "NVRM: Xid (PCI:0000:38:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception "
    "on (GPC 8, TPC 5, SM 0): Out Of Range Address",
    "NVRM: Xid (PCI:0000:9b:00): 48, pid=2024380, name=python3, An uncorrectable double bit "
    "error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.",
    "NVRM: Xid (PCI:0000:63:00): 31, pid=4411, name=plasmashell, Ch 00000018, intr 00000000. "
    "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f5e_3c000000. Fault is of type "
    "FAULT_PDE ACCESS_TYPE_VIRT_READ",
    "pcieport 0000:00:03.1: AER: Correctable error message received from 0000:00:00.0",
    "pcieport 0000:00:03.1: PCIe Bus Error: severity=Correctable, type=Data Link Layer, "
    "(Transmitter ID)",
    "pcieport 0000:00:03.1:   device [1022:1453] error status/mask=00001000/00006000",
    "pcieport 0000:00:03.1:    [12] Timeout               ",
    "nvidia 0000:07:00.0: PCIe Bus Error: severity=Correctable, type=Data Link Layer, "
    "(Transmitter ID)",
    "nvidia 0000:07:00.0:   device [10de:2184] error status/mask=00001000/0000a000",
    "nvidia 0000:07:00.0:    [12] Timeout               ",
    "xhci_hcd 0000:09:00.2: Refused to change power state, currently in D3",
    "nvidia-nvswitch0: open (major=508)",
    "EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode. Quota mode: none.",
    "audit: type=1400 audit(1712345678.123:456): apparmor=\"STATUS\" operation=\"profile_load\"",
]
STAMP = "[1084456.074591] "
SHAPES = ("dmesg", "indented", "quoted")


def make_log(lines: int, shape: str) -> str:
    """`lines` lines of the block, repeated, in one of SHAPES. A block line starting with "+" is
    a continuation the kernel prints aligned under the previous line's text."""
    out = []
    for i in range(lines):
        text = BLOCK[i % len(BLOCK)]
        cont = text.startswith("+")
        text = text.lstrip("+")
        if shape == "indented":
            out.append(("          " if cont else "    ") + text)
        else:
            line = (" " * len(STAMP) if cont else STAMP) + text
            out.append("> " + line if shape == "quoted" else line)
    return "\n".join(out) + "\n"


def load_parser(module: str | None) -> Callable[[str], list[dict[str, Any]]]:
    if module is None:
        from fleet.probe.hostprobe import parse_kernel_log

        return parse_kernel_log
    spec = importlib.util.spec_from_file_location("hostprobe_under_test", module)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fn: Callable[[str], list[dict[str, Any]]] = mod.parse_kernel_log
    return fn


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--module", help="time parse_kernel_log from this hostprobe.py instead")
    ap.add_argument("--json", action="store_true", help="the figures as JSON on stdout")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    parse = load_parser(args.module)
    rows = []
    for shape in SHAPES:
        prev = None
        for n in sizes:
            text = make_log(n, shape)
            best, events = float("inf"), 0
            for _ in range(max(1, args.repeats)):
                t0 = time.perf_counter()
                events = len(parse(text))
                best = min(best, time.perf_counter() - t0)
            row = {"shape": shape, "lines": n, "seconds": round(best, 4),
                   "us_per_line": round(best / n * 1e6, 2), "events": events,
                   "growth": round(best / prev[1], 1) if prev else None,
                   "size_ratio": round(n / prev[0], 1) if prev else None}
            rows.append(row)
            prev = (n, best)
            if not args.json:
                growth = (f"x{row['growth']} for x{row['size_ratio']} lines" if prev and
                          row["growth"] is not None else "")
                print(f"{shape:9} {n:>7} lines  {best:8.3f} s  {row['us_per_line']:6.2f} us/line"
                      f"  {events:>6} events  {growth}", flush=True)
    if args.json:
        print(json.dumps({"benchmark": "logs_parse_scale", "rows": rows}, indent=2))
    by_size: dict[int, set[int]] = {}
    for r in rows:
        by_size.setdefault(r["lines"], set()).add(r["events"])
    same = all(len(v) == 1 for v in by_size.values())
    if not same:
        print("the shapes disagree on the number of events: "
              + ", ".join(f"{n}: {sorted(v)}" for n, v in by_size.items()), file=sys.stderr)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
