"""A support bundle: fixed file names, each optional, parsed into `Evidence`.

A missing file leaves its part of the evidence `None` (the questions that need it say they could
not judge); a file that is there but is not what its name says is a located `BadInput`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from fleet.domain.boot_facts import BootFacts, InstalledKernel
from fleet.domain.diagnose.model import Evidence
from fleet.domain.diagnose.parse_host import (
    parse_df,
    parse_loadavg,
    parse_meminfo,
    parse_prometheus,
    parse_ps,
    parse_stat,
)
from fleet.domain.diagnose.parse_smi import parse_smi_text, parse_smi_xml
from fleet.domain.diagnose.parse_streams import parse_dmon, parse_pmon, parse_topo
from fleet.domain.nesting import json_too_deep
from fleet.errors import BadInput
from fleet.probe.hostprobe import current_boot, kernel_log_lines, parse_kernel_log

# file name -> the command that produces it (docs/diagnose.md and the collector use these).
BUNDLE_FILES: dict[str, str] = {
    "nvidia-smi-q.xml": "nvidia-smi -q -x",
    "nvidia-smi-q.txt": "nvidia-smi -q",
    "dmon.txt": "nvidia-smi dmon -s pucm -c N",
    "pmon.txt": "nvidia-smi pmon -s um -c N",
    "topo.txt": "nvidia-smi topo -m",
    "kernel.log": "journalctl -k -b, else /var/log/kern.log, else dmesg",
    "meminfo": "cat /proc/meminfo",
    "loadavg": "cat /proc/loadavg",
    "stat": "cat /proc/stat; sleep N; cat /proc/stat",
    "df.txt": "df -P",
    "ps.txt": "ps -eo pid,psr,pcpu,rss,args",
    "metrics.txt": "curl -s <the pool's serving metrics URL>",
    "metrics-url": "the metrics URL itself (one line), written by `fleet bundle collect`",
    "boot.json": "python3 hostprobe.py --boot-only (fleet/probe/hostprobe.py, shipped inline)",
}


def evidence(files: Mapping[str, str], where: str = "") -> Evidence:
    """Parse the bundle's files (name -> text). `where` prefixes file names in errors (the
    bundle folder)."""

    def at(name: str) -> str:
        return f"{where.rstrip('/')}/{name}" if where else name

    ev = Evidence()
    for name in BUNDLE_FILES:
        ev.files[name] = "parsed" if name in files else "missing"
    # these commands always print a header: an empty capture is a failed one, never "no rows"
    # (which would read as no process, no busy GPU, no full disk)
    blank = {n for n in ("dmon.txt", "pmon.txt", "df.txt", "ps.txt")
             if n in files and not files[n].strip()}
    for name in blank:
        ev.files[name] = "unreadable: empty"
    files = {n: t for n, t in files.items() if n not in blank}
    if "nvidia-smi-q.xml" in files:
        ev.smi = parse_smi_xml(files["nvidia-smi-q.xml"], at("nvidia-smi-q.xml"))
        if "nvidia-smi-q.txt" in files:
            ev.files["nvidia-smi-q.txt"] = "unused (nvidia-smi-q.xml read instead)"
    elif "nvidia-smi-q.txt" in files:
        ev.smi = parse_smi_text(files["nvidia-smi-q.txt"], at("nvidia-smi-q.txt"))
    if ev.smi is not None and ev.smi.failure:
        key = "nvidia-smi-q.xml" if "nvidia-smi-q.xml" in files else "nvidia-smi-q.txt"
        ev.files[key] = f"nvidia-smi failed: {ev.smi.failure}"
    if "dmon.txt" in files:
        ev.dmon = parse_dmon(files["dmon.txt"], at("dmon.txt"))
    if "pmon.txt" in files:
        ev.pmon = parse_pmon(files["pmon.txt"], at("pmon.txt"))
    if "topo.txt" in files:
        ev.topo = parse_topo(files["topo.txt"], at("topo.txt"))
    if "kernel.log" in files and not kernel_log_lines(files["kernel.log"]):
        # empty, or another kind of log: no event in it says nothing (the questions that read
        # the kernel log could not judge)
        ev.files["kernel.log"] = "unreadable: no line reads as a kernel log line"
    elif "kernel.log" in files:
        # a syslog file keeps every boot: judge this boot only (the probe does the same);
        # event line numbers stay those of the file
        text = files["kernel.log"]
        ev.kernel_text = current_boot(text.encode()).decode()
        skipped = text[: len(text) - len(ev.kernel_text)].count("\n")
        ev.kernel_events = [{**e, "line": e["line"] + skipped}
                            for e in parse_kernel_log(ev.kernel_text)]
    if "meminfo" in files:
        ev.meminfo = parse_meminfo(files["meminfo"], at("meminfo"))
    if "loadavg" in files:
        ev.loadavg = parse_loadavg(files["loadavg"], at("loadavg"))
    if "stat" in files:
        ev.cpu = parse_stat(files["stat"], at("stat"))
    if "df.txt" in files:
        ev.df = parse_df(files["df.txt"], at("df.txt"))
    if "ps.txt" in files:
        ev.ps = parse_ps(files["ps.txt"], at("ps.txt"))
    if "metrics-url" in files:
        ev.queue_source = files["metrics-url"].strip() or None
    if "metrics.txt" in files:
        ev.queue = parse_prometheus(files["metrics.txt"], at("metrics.txt"))
        ev.queue_source = ev.queue_source or at("metrics.txt")
    if "boot.json" in files:
        ev.boot = boot_summary(parse_boot(files["boot.json"], at("boot.json")))
    return ev


def parse_boot(text: str, where: str) -> BootFacts:
    """The probe's `--boot-only` document (`{"boot": {...}}`) as boot facts; BadInput naming
    the file when it is not one."""
    if (line := json_too_deep(text)) is not None:
        raise BadInput.single(f"JSON nested too deep at line {line}", file=where)
    try:
        doc = json.loads(text)
        boot = doc["boot"] if isinstance(doc, dict) else None
        if not isinstance(boot, dict):
            raise ValueError("no 'boot' object")
        return BootFacts.model_validate(boot)
    except (ValueError, KeyError, ValidationError) as exc:
        first = str(exc).splitlines()[0][:200]
        raise BadInput.single(f"not the probe's boot facts: {first}", file=where) from None


def boot_summary(b: BootFacts) -> dict[str, Any]:
    """What the pre-reboot gate reads, for the report: the running and the next-boot kernel,
    each kernel's nvidia module (version, signer; None: none; the reason when unreadable) and
    headers, Secure Boot. An unreadable value is said as such, never left out."""
    def module(k: InstalledKernel) -> dict[str, Any] | str | None:
        if k.module is None:
            why = k.unreadable.get("module")
            return f"unreadable: {why}" if why else None
        return {"version": k.module.version, "flavor": k.module.flavor,
                "signer": k.module.signer}

    def value(name: str, v: Any) -> Any:
        why = b.unreadable.get(name)
        return f"unreadable: {why}" if v is None and why else v

    return {"running_kernel": value("running_kernel", b.running_kernel),
            "next_kernel": value("next_kernel", b.next_kernel), "next_source": b.next_source,
            "kernels": [{"version": k.version, "module": module(k), "headers": k.headers}
                        for k in b.kernels or []],
            "secure_boot": value("secure_boot", b.secure_boot)}
