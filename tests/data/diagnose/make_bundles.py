"""Writes the derived bundles under bundles/ (run from this folder; the output is committed).

Every bundle starts from one real capture, `nvidia-smi -q` of an H100 under load
(../realdata/nvidia-smi-q-text/linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__load.txt, see
../realdata/SOURCES.md), and changes what its fault changes; the host files are written in the
exact shapes of `nvidia-smi dmon -s pucm`, `pmon -s um`, `topo -m`, /proc and `df -P`/`ps`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
REAL = HERE.parent / "realdata" / "nvidia-smi-q-text" / \
    "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__load.txt"

DMON_HEAD = (
    "# gpu    pwr  gtemp  mtemp     sm    mem    enc    dec    jpg    ofa   mclk   pclk     fb"
    "   bar1   ccpm \n"
    "# Idx      W      C      C      %      %      %      %      %      %    MHz    MHz     MB"
    "     MB     MB \n"
)
PMON_HEAD = (
    "# gpu         pid   type     fb   ccpm     sm    mem    enc    dec    jpg    ofa    command \n"
    "# Idx           #    C/G     MB     MB      %      %      %      %      %      %    name \n"
)
PROCS = [(11327, "memhog", 2566, 2), (11328, "memhog", 1542, 1), (11345, "gpu_burn", 15690, 97)]


def dmon(n: int = 10, pwr: int = 629, sm: int = 100, mem: int = 11, pclk: int = 1980) -> str:
    rows = "".join(
        f"    0 {pwr + (i % 3) * 4:6d} {59:6d} {55:6d} {sm - (i % 2):6d} {mem:6d}      0      0"
        f"      0      0   2619 {pclk:6d}  19818  19819      0 \n" for i in range(n))
    return DMON_HEAD + rows


def pmon(n: int = 5, leak: int = 0) -> str:
    out = PMON_HEAD
    for i in range(n):
        for pid, cmd, fb, sm in PROCS:
            grow = leak * i if pid == 11328 else 0
            out += (f"    0 {pid:11d}     C {fb + grow:6d}      0 {sm:6d} {sm // 4:6d}"
                    f"      -      -      -      -    {cmd:<14s}\n")
    return out


def topo(cpus: str = "0-15", numa: str = "0") -> str:
    return ("\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
            f"GPU0\t X \t{cpus}\t{numa}\t\tN/A\n\nLegend:\n\n  X    = Self\n"
            "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA "
            "nodes (e.g., QPI/UPI)\n")


def meminfo(total: int = 263_921_132, avail: int = 201_337_216, swap: int = 8_388_604,
            swap_free: int = 8_388_604) -> str:
    return (f"MemTotal:       {total} kB\nMemFree:        {avail - 4_000_000} kB\n"
            f"MemAvailable:   {avail} kB\nBuffers:          512044 kB\n"
            f"Cached:         9871220 kB\nSwapCached:            0 kB\n"
            f"SwapTotal:      {swap} kB\nSwapFree:       {swap_free} kB\n")


def stat(cpus: int = 16, busy_pct: int = 35, seconds: int = 10) -> str:
    def snap(user: int, idle: int) -> str:
        lines = [f"cpu  {user} 0 {user // 10} {idle} 120 0 31 0 0 0"]
        lines += [f"cpu{i} {user // cpus} 0 {user // cpus // 10} {idle // cpus} 7 0 2 0 0 0"
                  for i in range(cpus)]
        return "\n".join(lines) + "\nintr 123456 0 0\nctxt 9876543\nbtime 1783900000\n"
    total = cpus * 100 * seconds
    busy = total * busy_pct // 100
    user0, idle0 = 4_000_000, 30_000_000
    # busy counts user + system: user = busy / 1.1 keeps the sum at busy
    user1 = user0 + int(busy / 1.1)
    return snap(user0, idle0) + snap(user1, idle0 + (total - (user1 + user1 // 10 - user0 -
                                                                user0 // 10)))


def loadavg(one: float = 4.1) -> str:
    return f"{one:.2f} {one * 0.9:.2f} {one * 0.8:.2f} 3/611 11400\n"


def df(root_pct: int = 41) -> str:
    size = 959_863_856
    used = size * root_pct // 100
    return ("Filesystem     1024-blocks      Used Available Capacity Mounted on\n"
            "udev              131940748         0 131940748       0% /dev\n"
            "tmpfs              26392116      2340  26389776       1% /run\n"
            f"/dev/nvme0n1p2    {size} {used} {size - used}      {root_pct}% /\n"
            "tmpfs             131960564         0 131960564       0% /dev/shm\n"
            "/dev/loop3            65536     65536         0     100% /snap/core20/2318\n"
            "/dev/nvme0n1p1       523248      6220    517028       2% /boot/efi\n")


def ps(psr_burn: int = 3, extra: str = "") -> str:
    return ("    PID PSR %CPU   RSS COMMAND\n"
            "      1   0  0.0 13200 /sbin/init\n"
            "    812   5  0.1 24100 /usr/sbin/sshd -D\n"
            "  11327   1 12.0 802112 /root/tools/memhog 2560\n"
            "  11328   2 11.8 801840 /root/tools/memhog 1536\n"
            f"  11345  {psr_burn:2d} 99.5 1204992 ./gpu_burn 600\n" + extra)


def q(**subs: str) -> str:
    text = REAL.read_text()
    for old, new in subs.items():
        old_line = next(ln for ln in text.splitlines() if ln.strip().startswith(old))
        label = old_line.split(":")[0]
        text = text.replace(old_line, f"{label}: {new}", 1)
    return text


def write(name: str, files: dict[str, str]) -> None:
    d = HERE / "bundles" / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    for fname, text in files.items():
        (d / fname).write_text(text)


def base() -> dict[str, str]:
    return {
        "nvidia-smi-q.txt": REAL.read_text(), "dmon.txt": dmon(), "pmon.txt": pmon(),
        "topo.txt": topo(), "kernel.log": "[    0.000000] Linux version 6.8.0-60-generic\n"
        "[    5.118342] nvidia: loading out-of-tree module taints kernel.\n"
        "[    5.412118] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  590.48.01\n",
        "meminfo": meminfo(), "loadavg": loadavg(), "stat": stat(), "df.txt": df(),
        "ps.txt": ps(),
    }


def main() -> None:
    write("healthy", base())
    capped = base()
    capped["nvidia-smi-q.txt"] = q(**{"SW Power Cap": "Active", "Average Power Draw": "699.12 W",
                                      "SM   ": "1410 MHz", "Graphics  ": "1410 MHz"})
    capped["dmon.txt"] = dmon(pwr=696, pclk=1410)
    write("power-capped", capped)
    pcie = base()
    pad = " " * 16
    pcie["nvidia-smi-q.txt"] = REAL.read_text().replace(
        f"{pad}Current{' ' * 32}: 5\n{pad}Device Current{' ' * 25}: 5",
        f"{pad}Current{' ' * 32}: 3\n{pad}Device Current{' ' * 25}: 3").replace(
        f"{pad}Current{' ' * 32}: 16x", f"{pad}Current{' ' * 32}: 8x")
    write("pcie-downtrain", pcie)
    leak = base()
    leak["pmon.txt"] = pmon(n=6, leak=700)
    write("gpu-memory-leak", leak)
    far = base()
    far["topo.txt"] = topo(cpus="0-7", numa="0")
    far["ps.txt"] = ps(psr_burn=12)
    write("far-numa", far)
    cpu = base()
    cpu["stat"] = stat(busy_pct=99)
    cpu["loadavg"] = loadavg(37.5)
    cpu["ps.txt"] = ps(extra="  11502  9 1480.0 9120344 python3 tokenize_worker.py --procs 15\n")
    write("cpu-saturated", cpu)
    disk = base()
    disk["df.txt"] = df(root_pct=99)
    write("full-disk", disk)
    queue = base()
    queue["metrics.txt"] = (
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{model_name="llama-3-8b"} 37.0\n'
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="llama-3-8b"} 16.0\n'
        "# TYPE vllm:request_queue_time_seconds histogram\n"
        'vllm:request_queue_time_seconds_sum{model_name="llama-3-8b"} 1843.5\n'
        'vllm:request_queue_time_seconds_count{model_name="llama-3-8b"} 412.0\n')
    queue["metrics-url"] = "http://127.0.0.1:8000/metrics\n"
    write("queueing", queue)
    swap = base()
    swap["meminfo"] = meminfo(avail=9_100_000, swap_free=1_200_000)
    write("host-swapping", swap)
    write("driver-not-loaded", {
        "nvidia-smi-q.txt": "NVIDIA-SMI has failed because it couldn't communicate with the "
        "NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n\n",
        "ps.txt": ps(), "meminfo": meminfo(), "loadavg": loadavg(0.4), "df.txt": df()})
    write("host-only", {"meminfo": meminfo(), "loadavg": loadavg(0.4), "df.txt": df()})


if __name__ == "__main__":
    main()
