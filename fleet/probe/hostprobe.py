#!/usr/bin/env python3
"""fleet host probe: print one JSON document of GPU host facts on stdout.

Shipped to hosts and run with the host's own python3 (3.9+):

    python3 hostprobe.py [--since CURSOR] [--root DIR] [--kernel-log auto|journal|file|dmesg|none]

Self-contained on purpose: stdlib plus pynvml when the host has it, nothing from the `fleet`
package. The controller imports this same file (as `fleet.probe.hostprobe`) to reuse its pure
parsers, so the kernel log and `nvidia-smi -q -x` are parsed by one code path whether the text was
read on a host or from a support bundle:

    parse_kernel_log(text) -> list of event dicts        (Xid, fallen off the bus, PCIe AER)
    parse_kernel_log_lines(lines, indent=common_indent(lines)) -> the same, line by line
    parse_nvsmi_xml(text) -> dict of host facts           (nvidia-smi -q -x, schema v10..v13)
    gpu_from_tree(tree, labels) -> dict of GPU facts      (shared by the XML and `-q` text parsers)
    parse_aer_counters(text) -> dict                      (sysfs aer_dev_* files)

Contract: nothing is raised for a fact that cannot be read; the field holds
`{"error": "<reason>", "detail": "..."}` instead. `source` says where GPU facts came from:
"nvml", then "nvidia-smi" (`-q -x`) when NVML is missing, then "none".
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import time

PROBE_SCHEMA = 1
MAX_EVENTS = 2000
MAX_LOG_BYTES = 8 * 1024 * 1024
MAX_LINE_CHARS = 8192
"""Characters of one kernel-log line the parser reads; the rest of a longer line is ignored.
The kernel's own records are at most 1 KiB (printk's LOG_LINE_MAX), a journal or syslog line
a little more with its prefixes; a longer line is not a kernel message as printed, and cutting
it keeps parsing linear in the size of the text whatever a host or a bundle sends."""
CMD_TIMEOUT_S = 20.0

# --------------------------------------------------------------------------------------------
# Xid classes. Kept in step with fleet/data/xid.json by a unit test; the probe cannot read
# package data, so it carries this small copy.
# --------------------------------------------------------------------------------------------
XID_CLASSES = {
    8: "driver",
    13: "application",
    31: "application",
    32: "driver",
    38: "driver",
    43: "application",
    45: "application",
    46: "driver",
    48: "memory",
    54: "hardware",
    56: "hardware",
    57: "hardware",
    58: "hardware",
    61: "hardware",
    62: "hardware",
    63: "memory",
    64: "memory",
    68: "application",
    69: "application",
    73: "hardware",
    74: "nvlink",
    79: "hardware",
    92: "memory",
    93: "hardware",
    94: "memory",
    95: "memory",
    109: "driver",
    119: "driver",
    120: "driver",
    121: "nvlink",
    136: "hardware",
    140: "memory",
    143: "hardware",
    144: "nvlink",
    145: "nvlink",
    146: "nvlink",
    147: "nvlink",
    148: "nvlink",
    149: "nvlink",
    150: "nvlink",
    154: "informational",
    155: "nvlink",
    158: "driver",
}

CLOCK_EVENT_BITS = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
]


def err(reason, detail=None):
    """The one shape for a fact that could not be read."""
    out = {"error": reason}
    if detail:
        out["detail"] = str(detail)[:300]
    return out


def is_err(value):
    return isinstance(value, dict) and "error" in value and len(value) <= 2


# --------------------------------------------------------------------------------------------
# PCI address normalization: "0000:9b:00.0" (4-digit domain, lower case, with function)
# --------------------------------------------------------------------------------------------
_BDF = re.compile(r"(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.([0-7]))?")


def norm_pci(text):
    """`00000000:9B:00.0`, `PCI:0000:9b:00`, `0000:9b:00.0`, `9b:00.0` -> `0000:9b:00.0`."""
    if not text:
        return None
    text = text.strip()
    if text.upper().startswith("PCI:"):
        text = text[4:]
    m = _BDF.fullmatch(text)
    if not m:
        return None
    domain = (m.group(1) or "0000")[-4:]
    return "{}:{}:{}.{}".format(
        domain.lower(), m.group(2).lower(), m.group(3).lower(), m.group(4) or "0"
    )


# --------------------------------------------------------------------------------------------
# Kernel log parser (pure). One event dict per Xid line, fallen-off-the-bus message, AER error.
# --------------------------------------------------------------------------------------------
_TS_PREFIXES = [
    re.compile(r"<\d{1,3}>"),  # syslog priority (dmesg -r)
    re.compile(r"\d+,\d+,\d+,[^;]*;"),  # /dev/kmsg record header
    re.compile(r"[a-z]+\s*:[a-z]+\s*: "),  # dmesg --decode "kern  :warn  : "
    re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s+"),  # ISO
    re.compile(r"[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d(?:\.\d+)?\s+"),  # syslog/journal short
    re.compile(r"\[\s*(?:[+]?\d+[.,]\d+(?:\s*<[^>]*>)?|[A-Z][a-z]{2}[A-Za-z0-9: ]*\d)\]\s?"),
    re.compile(r"\S+\s+kernel(?:\[\d+\])?:\s"),  # "host kernel: " after a syslog/journal date
]
_TS_ANY = re.compile(r"[\[<0-9A-Za-z]")

_XID = re.compile(
    r"NVRM: Xid \(PCI:([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)\): (\d+),\s*(.*)"
)
_XID_PID = re.compile(r"pid=('?<unknown>'?|\d+)")
_XID_NAME = re.compile(r"name=(<unknown>|[^,\s]+)")
_GPU_AT = re.compile(r"NVRM: GPU at PCI:([0-9a-fA-F:]+): (GPU-[0-9a-fA-F-]+)")
_FOB_GPU = re.compile(
    r"NVRM: GPU ([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): GPU has fallen off the bus"
)
_FOB_PROBE = re.compile(
    r"NVRM: The NVIDIA GPU ([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])"
)
_PCI_ID = re.compile(r"\(PCI ID: ([0-9a-fA-F]{4}:[0-9a-fA-F]{4})\)")
_BDF_IN = re.compile(r"\b([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\b")
_SEV = r"(Corrected|Correctable|Uncorrected|Uncorrectable)\s*(\((?:Non-)?Fatal\))?"
# The AER patterns are searched, not anchored: whatever precedes the device message (a host
# name from pdsh, a quote marker, a prefix this parser does not know) leaves the event whole.
_AER_BUS = re.compile(
    r"\b([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]):\s+(?:AER:\s+)?"
    r"PCIe Bus Error:\s*(?:severity=)?" + _SEV
)
_AER_RECV = re.compile(
    r"\b([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]):\s+AER:\s+(?:Multiple )?"
    + _SEV
    + r"\s+error (?:message )?received(?: from|:)\s*(?:id=)?(\S+)?"
)
_AER_DEV = re.compile(
    r"([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]):\s+(?:AER:\s+)?device "
    r"\[([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\] error status/mask=([0-9a-fA-F]+)/([0-9a-fA-F]+)"
)
_AER_BIT = re.compile(r"\[\s*(\d+)\]\s+([A-Za-z][A-Za-z0-9_]*)")
_AER_BIT_LINE = re.compile(
    r"\b([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]):\s+(?:AER:\s+)?\[\s*\d+\]"
)


def _aer_severity(word, qualifier):
    word = word.lower()
    if word.startswith("correct"):
        return "corrected"
    if qualifier and "non" in qualifier.lower():
        return "nonfatal"
    if qualifier:
        return "fatal"
    return "nonfatal"  # "Uncorrected" with no qualifier: treat as the milder uncorrectable


def _split_prefix(raw):
    """Strip timestamp/facility/host prefixes; return (timestamp text or None, message).

    Matches at a moving position in the one string (never a copy of the rest per prefix
    stripped), so a line of many prefixes costs time linear in its length."""
    pos = 0
    n = len(raw)
    stamps = []
    changed = True
    while changed and pos < n and _TS_ANY.match(raw, pos):
        changed = False
        for rx in _TS_PREFIXES:
            m = rx.match(raw, pos)
            if m and m.end() > pos:
                stamps.append(m.group(0).strip())
                pos = m.end()
                changed = True
                break
    stamp = " ".join(s for s in stamps if s and not s.endswith("kernel:")) or None
    return stamp, raw[pos:] if pos else raw


# A line that starts a kernel message of its own wherever it sits: an NVRM event line, any AER
# line, or a device message ("driver 0000:01:00.0: ..."). Such a line never continues the one
# before it, however it is indented (a log pasted into a ticket, every line indented).
_RECORD_START = re.compile(
    r"NVRM: (?:Xid |GPU at PCI:|GPU [0-9a-fA-F]{4,8}:|The NVIDIA GPU )|PCIe Bus Error|\bAER: "
    r"|^\S+ [0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]:"
)
_QUOTE = re.compile(r"[ \t]*>(?:[ \t]?>)*[ \t]?")  # "> " quote markers of a mail or ticket


def _is_comment(line):
    return line.startswith("# SOURCE:") or line.startswith("# COMMAND:")


def _rows(lines):
    """(line number, line) of the non-blank lines of an iterable of lines (a generator: a log
    read line by line is never held whole), without quote markers ("> ")."""
    for lineno, raw in enumerate(lines, 1):
        if len(raw) > MAX_LINE_CHARS:
            raw = raw[:MAX_LINE_CHARS]  # see MAX_LINE_CHARS
        if raw[:1] in (">", " ", "\t"):
            m = _QUOTE.match(raw)
            if m:
                raw = raw[m.end() :]
        if raw.strip():
            yield lineno, raw


def common_indent(lines):
    """Characters of indentation common to every non-blank, non-comment line (a log pasted
    into a ticket or mail, indented as a block); stops reading at the first line without any."""
    prefix = None
    for _, r in _rows(lines):
        if _is_comment(r.lstrip()):
            continue
        indent = r[: len(r) - len(r.lstrip())]
        prefix = indent if prefix is None else os.path.commonprefix([prefix, indent])
        if not prefix:
            return 0
    return len(prefix) if prefix else 0


def log_rows(lines, cut):
    """`_rows` of `lines` with the common indentation (`cut` characters) removed."""
    if not cut:
        return _rows(lines)
    return ((n, r[cut:]) for n, r in _rows(lines))


def _lines(text):
    """(line number, line) of the non-blank lines of `text`, without quote markers and without
    the indentation common to every line."""
    lines = text.splitlines()
    return list(log_rows(lines, common_indent(lines)))


def _iter_records(rows):
    """Logical records: (first line number, timestamp, message), one at a time.

    The kernel continues a record on indented lines without a timestamp: dmesg prints the lines
    of a multi-line message aligned under the first one's text (the NVRM crash-dump notice), and
    abbreviated AER reports indent their bit and TLP-header lines. An indented line that starts
    a message of its own (an Xid, AER or device line, see _RECORD_START) is a new record. A
    record is given out once the next one starts, its continuations joined once: linear in the
    size of the log, holding one record.
    """
    current = None
    more = []
    for lineno, raw in rows:
        line = raw.lstrip()
        if line[:1] == "#" and _is_comment(line):
            continue
        stamp, msg = _split_prefix(line)
        if stamp is None and current and raw[:1] in (" ", "\t") and not _RECORD_START.search(msg):
            more.append(msg.strip())
            continue
        if current is not None:
            yield (current[0], current[1], " ".join([current[2]] + more)) if more else current
        current, more = (lineno, stamp, msg.rstrip()), []
    if current is not None:
        yield (current[0], current[1], " ".join([current[2]] + more)) if more else current


def _records(text):
    """Every logical record of `text` (see _iter_records)."""
    return list(_iter_records(_lines(text)))


def _windows(records, before=3, after=3):
    """(record, up to `before` records before it, up to `after` after it) for each record,
    holding only those: the parser's look-back and look-ahead without the whole log."""
    prev = collections.deque(maxlen=before)
    ahead = collections.deque()
    for rec in records:
        ahead.append(rec)
        if len(ahead) > after:
            cur = ahead.popleft()
            yield cur, prev, ahead
            prev.append(cur)
    while ahead:
        cur = ahead.popleft()
        yield cur, prev, ahead
        prev.append(cur)


def _event(kind, line, pci, text, stamp, xid=None, severity=None):
    return {
        "kind": kind,
        "line": line,
        "pci": pci,
        "xid": xid,
        "severity": severity,
        "text": text,
        "timestamp": stamp,
        "uuid": None,
        "pid": None,
        "process": None,
        "device_id": None,
        "bits": [],
    }


def parse_kernel_log(text, xid_classes=None):
    """Parse kernel log text of any common shape into event dicts (see module docstring).

    Keys of every event: kind ("xid" | "aer" | "fallen_off_bus"), line (1-based, first line),
    pci ("0000:9b:00.0" or None), xid (int or None), severity (AER: corrected/nonfatal/fatal;
    Xid: the catalog class; fallen off the bus: "hardware"), text, timestamp (as printed),
    uuid, pid, process, device_id ("10de:2184"), bits (AER status bit names).
    """
    return kernel_events(_iter_records(_lines(text)), xid_classes)


def parse_kernel_log_lines(lines, xid_classes=None, indent=0):
    """`parse_kernel_log` of a log given as an iterable of lines (a file read line by line),
    `indent` the characters of common indentation to cut (`common_indent`, from a first pass):
    the same events, holding the events and a few records, never the whole log."""
    return kernel_events(_iter_records(log_rows(lines, indent)), xid_classes)


def kernel_events(records, xid_classes=None):
    """The events of a stream of records (see parse_kernel_log), reading it once and holding
    only a few records around the current one (an AER event's device and bit lines, read
    later, complete the event already in the list)."""
    classes = XID_CLASSES if xid_classes is None else xid_classes
    events = []
    uuids = {}
    last_aer = {}
    for (line, stamp, msg), before, after in _windows(records):
        m = _XID.search(msg)
        if m:
            xid = int(m.group(2))
            pci = norm_pci(m.group(1))
            ev = _event(
                "xid", line, pci, msg[msg.index("NVRM:") :], stamp, xid, classes.get(xid, "unknown")
            )
            head = m.group(3)
            pm = _XID_PID.match(head)
            nm = _XID_NAME.match(head[pm.end() :].lstrip(", ") if pm else head)
            if pm and pm.group(1).isdigit():
                ev["pid"] = int(pm.group(1))
            if nm and nm.group(1) != "<unknown>":
                ev["process"] = nm.group(1)
            ev["uuid"] = uuids.get(pci)
            events.append(ev)
            continue
        m = _GPU_AT.search(msg)
        if m:
            uuids[norm_pci(m.group(1))] = m.group(2)
            continue
        m = _FOB_GPU.search(msg)
        if m:
            pci = norm_pci(m.group(1))
            ev = _event(
                "fallen_off_bus", line, pci, msg[msg.index("NVRM:") :], stamp, severity="hardware"
            )
            ev["uuid"] = uuids.get(pci)
            events.append(ev)
            continue
        m = _FOB_PROBE.search(msg)
        if m:
            window = [msg] + [r[2] for r in after]
            joined = " ".join(
                w[w.find("NVRM:") + 5 :].strip() if "NVRM:" in w else w for w in window
            )
            if "fallen off the bus" in joined:
                ev = _event(
                    "fallen_off_bus",
                    line,
                    norm_pci(m.group(1)),
                    "NVRM: " + joined,
                    stamp,
                    severity="hardware",
                )
                pid = _PCI_ID.search(joined)
                ev["device_id"] = pid.group(1).lower() if pid else None
                events.append(ev)
            continue
        if "fallen off the bus" in msg and "NVRM:" in msg:
            if any(r[2].startswith("NVRM: The NVIDIA GPU") for r in before):
                continue  # the probe-time message, already reported at its first line
            bdf = _BDF_IN.search(msg)
            events.append(
                _event(
                    "fallen_off_bus",
                    line,
                    norm_pci(bdf.group(1)) if bdf else None,
                    msg,
                    stamp,
                    severity="hardware",
                )
            )
            continue
        m = _AER_BUS.search(msg) if "PCIe Bus Error" in msg else None
        if m:
            pci = norm_pci(m.group(1))
            ev = _event(
                "aer", line, pci, msg, stamp, severity=_aer_severity(m.group(2), m.group(3))
            )
            ev["bits"] = [b[1] for b in _AER_BIT.findall(msg[m.end() :])]
            events.append(ev)
            last_aer[pci] = ev
            continue
        m = _AER_RECV.search(msg) if "received" in msg else None
        if m:
            following = [r[2] for r in after]
            if any("PCIe Bus Error" in f for f in following):
                continue  # the detailed "PCIe Bus Error" record that follows is the event
            src = norm_pci(m.group(4)) if m.group(4) else None
            pci = src if src and src != "0000:00:00.0" else norm_pci(m.group(1))
            ev = _event(
                "aer", line, pci, msg, stamp, severity=_aer_severity(m.group(2), m.group(3))
            )
            events.append(ev)
            last_aer[pci] = ev
            continue
        m = _AER_DEV.search(msg) if "status/mask" in msg else None
        if m:
            ev = last_aer.get(norm_pci(m.group(1)))
            if ev is not None:
                ev["device_id"] = (m.group(2) + ":" + m.group(3)).lower()
            continue
        m = _AER_BIT_LINE.search(msg) if "[" in msg else None
        if m:
            ev = last_aer.get(norm_pci(m.group(1)))
            if ev is not None:
                ev["bits"].extend(b[1] for b in _AER_BIT.findall(msg[m.end(1) :]))
    return events


# A prefix only the kernel's own logs carry: a dmesg stamp ("[  12.3]", "[Mon Dec  1 ...]"), a
# syslog priority or /dev/kmsg header, dmesg --decode's facility, or "kernel:" (syslog, journal).
_KERNEL_MARK = re.compile(
    r"^<\d{1,3}>|^\d+,\d+,\d+,|^[a-z]+\s*:[a-z]+\s*: |\[\s*[+]?\d+[.,]\d+"
    r"|\[[A-Z][a-z]{2} [A-Za-z0-9: ]*\d\]|\bkernel(?:\[\d+\])?:"
)


def kernel_log_lines(text):
    """How many lines read as kernel log lines: a kernel prefix (see _KERNEL_MARK), or a kernel
    message of its own (NVRM, AER, a device message). Zero: the text is no kernel log (or is
    empty), so finding no event in it says nothing about the host."""
    return count_kernel_lines(_lines(text))


def count_kernel_lines(rows):
    """`kernel_log_lines` of rows (`_lines`, or `log_rows` of a file read line by line)."""
    n = 0
    for _, raw in rows:
        line = raw.lstrip()
        if _is_comment(line):
            continue
        _, msg = _split_prefix(line)
        prefix = line[: len(line) - len(msg)]
        if (prefix and _KERNEL_MARK.search(prefix)) or "NVRM:" in msg or _RECORD_START.search(msg):
            n += 1
    return n


# --------------------------------------------------------------------------------------------
# sysfs AER counters (pure parser + reader)
# --------------------------------------------------------------------------------------------
def parse_aer_counters(text):
    """`Receiver Error 2\\nBad TLP 0\\n...\\nTOTAL_ERR_COR 2` -> {"Receiver Error": 2, ...}."""
    out = {}
    for raw in text.splitlines():
        parts = raw.rsplit(None, 1)
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0].strip()] = int(parts[1])
    return out


# --------------------------------------------------------------------------------------------
# nvidia-smi -q -x (pure). XML and `-q` text are both turned into a tree of dicts with
# normalized keys; gpu_from_tree() reads GPU facts from either.
# --------------------------------------------------------------------------------------------
_NA = {
    "n/a",
    "[n/a]",
    "not supported",
    "[not supported]",
    "unknown error",
    "[unknown error]",
    "requested functionality has been deprecated",
    "[requested functionality has been deprecated]",
    "insufficient permissions",
    "[insufficient permissions]",
    "not available",
    "",
}


def na_reason(value):
    v = (value or "").strip().lower()
    if v in ("n/a", "[n/a]", ""):
        return "not_available"
    if "not supported" in v:
        return "not_supported"
    if "deprecated" in v:
        return "deprecated"
    if "permission" in v:
        return "no_permission"
    return "unreadable"


def _num(value, kind=int):
    """'43.89 W' -> 43.89, '16x' -> 16, '0x1' -> 1; error dict when not a number."""
    if value is None:
        return None
    if isinstance(value, dict):
        return err("unexpected_structure")
    v = value.strip()
    if v.lower() in _NA or v.startswith("["):
        return err(na_reason(v))
    token = v.split()[0].rstrip("x") if v else v
    try:
        if token.lower().startswith("0x"):
            return int(token, 16)
        return kind(float(token)) if kind is int else kind(token)
    except ValueError:
        return err("unparsable", v)


# The words nvidia-smi writes for a boolean (-q, -q -x, --format=csv). Anything else, such as
# "Yes <note>", is unparsable: read as False it would pass a check it should fail.
FLAG_TRUE = frozenset(("enabled", "yes", "active", "on", "true", "1"))
FLAG_FALSE = frozenset(("disabled", "no", "not active", "inactive", "off", "false", "0"))


def flag_word(v):
    """True/False for a word nvidia-smi writes for a boolean, an error dict for anything else."""
    w = " ".join(v.split()).lower()
    if w in FLAG_TRUE:
        return True
    if w in FLAG_FALSE:
        return False
    return err("unparsable", v)


def _unrecognised(value):
    return is_err(value) and value["error"] in ("unparsable", "unexpected_structure")


def _flag(value):
    if value is None:
        return None
    if isinstance(value, dict):
        return err("unexpected_structure")
    v = value.strip()
    if v.lower() in _NA or v.startswith("["):
        return err(na_reason(v))
    return flag_word(v)


def _text(value):
    if value is None:
        return None
    if isinstance(value, dict):
        return err("unexpected_structure")
    v = value.strip()
    if v.lower() in _NA or v.startswith("["):
        return err(na_reason(v))
    return v


def _get(tree, *paths):
    """First present value among alternative paths ("a/b/c")."""
    for path in paths:
        node = tree
        for part in path.split("/"):
            if not isinstance(node, dict) or part not in node:
                node = None
                break
            node = node[part]
        if node is not None:
            return node
    return None


def _sum_present(*values):
    nums = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    if nums:
        return sum(nums)
    errs = [v for v in values if is_err(v)]
    return errs[0] if errs else None


# Paths are written for the XML tag names; `-q` labels are mapped onto the same keys by the text
# parser (fleet.domain.nvsmi.q_text) before calling gpu_from_tree.
def gpu_from_tree(g, index=None):
    """GPU facts from a normalized `nvidia-smi -q[ -x]` GPU subtree."""
    out = {"index": index}
    out["name"] = _text(_get(g, "product_name"))
    out["uuid"] = _text(_get(g, "uuid"))
    out["serial"] = _text(_get(g, "serial"))
    out["minor_number"] = _num(_get(g, "minor_number"))
    bus = _text(_get(g, "pci/pci_bus_id", "@id"))
    out["pci_bus_id"] = norm_pci(bus) if isinstance(bus, str) else bus
    out["pci_device_id"] = _text(_get(g, "pci/pci_device_id"))
    out["pcie_gen_current"] = _num(_get(g, "pci/pci_gpu_link_info/pcie_gen/current_link_gen"))
    out["pcie_gen_max"] = _num(_get(g, "pci/pci_gpu_link_info/pcie_gen/max_link_gen"))
    out["pcie_width_current"] = _num(
        _get(g, "pci/pci_gpu_link_info/link_widths/current_link_width")
    )
    out["pcie_width_max"] = _num(_get(g, "pci/pci_gpu_link_info/link_widths/max_link_width"))
    out["pcie_replay_counter"] = _num(_get(g, "pci/replay_counter"))
    out["clock_graphics_mhz"] = _num(_get(g, "clocks/graphics_clock"))
    out["clock_sm_mhz"] = _num(_get(g, "clocks/sm_clock"))
    out["clock_mem_mhz"] = _num(_get(g, "clocks/mem_clock"))
    out["clock_max_graphics_mhz"] = _num(_get(g, "max_clocks/graphics_clock"))
    out["clock_max_sm_mhz"] = _num(_get(g, "max_clocks/sm_clock"))
    out["clock_max_mem_mhz"] = _num(_get(g, "max_clocks/mem_clock"))
    reasons = _get(g, "clocks_event_reasons", "clocks_throttle_reasons")
    if isinstance(reasons, dict):
        active, mask, bad = [], 0, None
        for key, val in reasons.items():
            name = re.sub(r"^clocks_(?:(?:event|throttle)_)?reason_", "", key)
            name = {"display_clocks_setting": "display_clock_setting"}.get(name, name)
            state = _flag(val) if isinstance(val, str) else err("unexpected_structure")
            if state is True:
                active.append(name)
                mask |= dict((n, b) for b, n in CLOCK_EVENT_BITS).get(name, 0)
            elif state is not False and bad is None:
                bad = state  # one reason unreadable: the set of active ones is unknown
        out["clock_event_reasons"] = sorted(active) if bad is None else bad
        out["clock_event_reasons_mask"] = mask if bad is None else None
    else:
        out["clock_event_reasons"] = err("not_available") if reasons is None else reasons
        out["clock_event_reasons_mask"] = None
    out["temperature_c"] = _num(_get(g, "temperature/gpu_temp"))
    out["power_draw_w"] = _num(
        _get(
            g,
            "gpu_power_readings/average_power_draw",
            "gpu_power_readings/power_draw",
            "power_readings/power_draw",
            "gpu_power_readings/instant_power_draw",
        ),
        float,
    )
    out["power_limit_w"] = _num(
        _get(
            g,
            "gpu_power_readings/current_power_limit",
            "power_readings/enforced_power_limit",
            "power_readings/power_limit",
        ),
        float,
    )
    out["ecc_mode_current"] = _flag(_get(g, "ecc_mode/current_ecc"))
    out["ecc_mode_pending"] = _flag(_get(g, "ecc_mode/pending_ecc"))
    for scope in ("volatile", "aggregate"):
        e = _get(g, "ecc_errors/" + scope)
        if isinstance(e, dict) and ("single_bit" in e or "double_bit" in e):
            corr = _num(_get(e, "single_bit/total"))
            unc = _num(_get(e, "double_bit/total"))
        elif isinstance(e, dict):
            corr = _sum_present(_num(e.get("sram_correctable")), _num(e.get("dram_correctable")))
            unc = _sum_present(
                _num(e.get("sram_uncorrectable")),
                _num(e.get("sram_uncorrectable_parity")),
                _num(e.get("sram_uncorrectable_secded")),
                _num(e.get("dram_uncorrectable")),
            )
        else:
            corr = unc = err("not_available")
        out[f"ecc_{scope}_corrected"] = corr
        out[f"ecc_{scope}_uncorrected"] = unc
    sram = _get(g, "ecc_errors/aggregate")
    out["ecc_sram_threshold_exceeded"] = (
        _flag(sram.get("sram_threshold_exceeded"))
        if isinstance(sram, dict) and "sram_threshold_exceeded" in sram
        else None
    )
    out["retired_pages_sbe"] = _num(
        _get(g, "retired_pages/multiple_single_bit_retirement/retired_count")
    )
    out["retired_pages_dbe"] = _num(_get(g, "retired_pages/double_bit_retirement/retired_count"))
    out["retired_pages_pending"] = _flag(
        _get(g, "retired_pages/pending_retirement", "retired_pages/pending_blacklist")
    )
    rr = _get(g, "remapped_rows")
    if isinstance(rr, dict):
        out["remapped_rows_correctable"] = _num(rr.get("remapped_row_corr"))
        out["remapped_rows_uncorrectable"] = _num(rr.get("remapped_row_unc"))
        out["remapped_rows_pending"] = _flag(rr.get("remapped_row_pending"))
        out["remapped_rows_failure"] = _flag(rr.get("remapped_row_failure"))
        hist = rr.get("row_remapper_histogram")
        if isinstance(hist, dict):
            h = {}
            for k in ("max", "high", "partial", "low", "none"):
                h[k] = _num(hist.get("row_remapper_histogram_" + k))
            out["remap_histogram"] = h if all(isinstance(v, int) for v in h.values()) else None
        else:
            out["remap_histogram"] = None
    else:
        for k in ("correctable", "uncorrectable", "pending", "failure"):
            out["remapped_rows_" + k] = err("not_available") if rr is None else _text(rr)
        out["remap_histogram"] = None
    out["mig_mode_current"] = _flag(_get(g, "mig_mode/current_mig"))
    out["mig_mode_pending"] = _flag(_get(g, "mig_mode/pending_mig"))
    out["persistence_mode"] = _flag(_get(g, "persistence_mode"))
    action = _get(g, "gpu_recovery_action")
    if action is None:
        status = _get(g, "gpu_reset_status")
        if isinstance(status, dict):
            reset = _flag(status.get("reset_required"))
            drain = _flag(status.get("drain_and_reset_recommended"))
            if reset is True:
                action = "Reset"
            elif drain is True:
                action = "Drain and Reset"
            elif _unrecognised(reset) or _unrecognised(drain):
                # a value nvidia-smi does not write: unreadable, not "None" (N/A stays "None",
                # GPUs without the field print it)
                action = reset if _unrecognised(reset) else drain
            else:
                action = "None"
    action = _text(action) if isinstance(action, str) else action
    out["recovery_action"] = action.lower() if isinstance(action, str) else action
    out.update(node_state_from_tree(g))
    return out


_COMPUTE_MODES = {
    "default": "default",
    "exclusive_process": "exclusive_process",
    "exclusive_thread": "exclusive_thread",
    "prohibited": "prohibited",
}


def _absent(value, what):
    """A field this capture has no element for is unreadable, never a healthy default."""
    return err("not_in_capture", what) if value is None else value


def node_state_from_tree(g):
    """Node-state fields (fleet.domain.node_facts) from a normalized `nvidia-smi -q[ -x]` GPU
    subtree. What a capture has no element for is unreadable ("not_in_capture")."""
    out = {}
    out["vbios_version"] = _absent(_text(_get(g, "vbios_version")), "vbios_version")
    for key, tag in (("inforom_image", "img_version"), ("inforom_oem", "oem_object"),
                     ("inforom_ecc", "ecc_object"), ("inforom_pwr", "pwr_object")):
        out[key] = _absent(_text(_get(g, "inforom_version/" + tag)), "inforom_version/" + tag)
    gsp = _get(g, "gsp_firmware_version")
    if gsp is None:
        out["gsp_firmware_version"] = out["gsp_mode"] = err("not_in_capture",
                                                            "gsp_firmware_version")
    else:
        version = _text(gsp)
        out["gsp_firmware_version"] = version
        if isinstance(version, str):
            out["gsp_mode"] = True
        elif version.get("error") == "not_available":
            out["gsp_mode"] = False  # nvidia-smi prints N/A when the GPU runs no GSP firmware
        else:
            out["gsp_mode"] = version
    mode = _text(_get(g, "compute_mode"))
    if isinstance(mode, str):
        mode = _COMPUTE_MODES.get(mode.lower().replace(" ", "_"), err("unparsable", mode))
    out["compute_mode"] = _absent(mode, "compute_mode")
    for key, tag in (("power_limit_default_w", "default_power_limit"),
                     ("power_limit_min_w", "min_power_limit"),
                     ("power_limit_max_w", "max_power_limit")):
        value = _get(g, "gpu_power_readings/" + tag, "power_readings/" + tag)
        out[key] = _absent(_num(value, float), tag)
    for section in ("applications_clocks", "default_applications_clocks"):
        prefix = "clocks_" + ("default_applications" if section.startswith("default")
                              else "applications")
        for kind, tag in (("graphics", "graphics_clock"), ("memory", "mem_clock")):
            out[f"{prefix}_{kind}_mhz"] = _absent(_num(_get(g, section + "/" + tag)),
                                                  section + "/" + tag)
    # Neither -q nor -q -x shows clocks locked with -lgc or the NVLink states.
    out["clocks_locked_graphics_mhz"] = err("not_in_capture", "locked clocks")
    out["nvlink_links"] = err("not_in_capture", "nvlink states")
    out["mig_devices"] = _mig_devices(_get(g, "mig_devices"))
    for key in ("state", "status"):
        value = _text(_get(g, "fabric/" + key))
        out["fabric_" + key] = _absent(value.lower() if isinstance(value, str) else value,
                                       "fabric/" + key)
    return out


def _mig_devices(node):
    if node is None:
        return err("not_in_capture", "mig_devices")
    if isinstance(node, str):
        return [] if node.strip().lower() == "none" else err(na_reason(node))
    items = node.get("mig_device", [])
    devices = []
    for d in items if isinstance(items, list) else [items]:
        if not isinstance(d, dict):
            continue
        mem = _num(_get(d, "fb_memory_usage/total", "shared_fb_memory_usage/total"))
        sms = _num(_get(d, "device_attributes/shared/multiprocessor_count"))
        gi = _num(_get(d, "gpu_instance_id"))
        ci = _num(_get(d, "compute_instance_id"))
        devices.append({
            "gpu_instance_id": gi if isinstance(gi, int) else None,
            "compute_instance_id": ci if isinstance(ci, int) else None,
            "profile": None,  # nvidia-smi -q[ -x] names no profile
            "memory_mib": mem if isinstance(mem, int) else None,
            "multiprocessor_count": sms if isinstance(sms, int) else None,
        })
    return devices


def _etree_to_tree(elem):
    """ElementTree element -> nested dict of tag -> text or subtree; repeated tags become lists
    (only `gpu` matters, and it is handled by the caller)."""
    node = {}
    for k, v in elem.attrib.items():
        node["@" + k] = v
    for child in elem:
        value = _etree_to_tree(child) if len(child) or child.attrib else (child.text or "").strip()
        if child.tag == "mig_device":  # every MIG device counts
            node.setdefault("mig_device", []).append(value)
            continue
        if child.tag in node:
            continue  # keep the first (e.g. repeated process_info)
        node[child.tag] = value
    return node


MAX_XML_DEPTH = 64
"""nvidia-smi's XML nests about six elements deep; the tree readers here recurse per level."""


class XmlTooDeep(ValueError):
    """An XML document nested deeper than MAX_XML_DEPTH elements (not a RecursionError later)."""


def xml_root(body, limit=MAX_XML_DEPTH):
    """The root element of an XML text, refusing one nested deeper than `limit` elements while
    it is parsed (expat itself does not recurse; `_etree_to_tree` would)."""
    import xml.etree.ElementTree as ET  # noqa: N817  (lazy: only the fallback pays for it)

    class _Bounded(ET.TreeBuilder):
        depth = 0

        def start(self, tag, attrs):
            self.depth += 1
            if self.depth > limit:
                raise XmlTooDeep(f"XML nested deeper than {limit} elements (<{tag}>)")
            return super().start(tag, attrs)

        def end(self, tag):
            self.depth -= 1
            return super().end(tag)

    parser = ET.XMLParser(target=_Bounded())
    parser.feed(body.encode("utf-8") if isinstance(body, str) else body)
    return parser.close()


def parse_nvsmi_xml(text):
    """`nvidia-smi -q -x` output -> {"driver_version", "cuda_version", "gpus": [...], "dtd"}."""
    body = re.sub(r"<!DOCTYPE[^>]*>", "", text, count=1)
    root = xml_root(body)
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"not an nvidia-smi XML log (root <{root.tag}>)")
    dtd = re.search(r"nvsmi_device_(v\d+)\.dtd", text)
    gpus = []
    for i, g in enumerate(root.findall("gpu")):
        gpus.append(gpu_from_tree(_etree_to_tree(g), index=i))
    driver = root.findtext("driver_version")
    kmd = root.findtext("kmd_version")
    return {
        "dtd": dtd.group(1) if dtd else None,
        "timestamp": (root.findtext("timestamp") or "").strip() or None,
        "driver_version": _clean_version(kmd or driver),
        "cuda_version": _clean_version(
            root.findtext("cuda_umd_version") or root.findtext("cuda_version")
        ),
        "attached_gpus": _num(root.findtext("attached_gpus")),
        "gpus": gpus,
    }


def _clean_version(value):
    if not value:
        return None
    m = re.match(r"\s*(\d+(?:\.\d+)*)", value)
    return m.group(1) if m else None


# --------------------------------------------------------------------------------------------
# Readers (I/O). Everything below may fail; failures become err(...).
# --------------------------------------------------------------------------------------------
class Host:
    """File and command access, rooted so tests can point it at a fake tree."""

    def __init__(self, root="/"):
        self.root = root

    def path(self, p):
        return p if self.root in ("", "/") else os.path.join(self.root, p.lstrip("/"))

    def read(self, p, limit=1 << 20):
        try:
            with open(self.path(p), "rb") as f:
                return f.read(limit).decode("utf-8", "replace")
        except FileNotFoundError:
            return err("not_found", p)
        except PermissionError:
            return err("no_permission", p)
        except OSError as e:
            return err("os_error", f"{p}: {e}")

    def run(self, argv, timeout=CMD_TIMEOUT_S):
        try:
            r = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
        except FileNotFoundError:
            return err("command_not_found", argv[0])
        except subprocess.TimeoutExpired:
            return err("timeout", f"{argv[0]} after {timeout}s")
        except OSError as e:
            return err("os_error", f"{argv[0]}: {e}")
        return (
            r.returncode,
            r.stdout.decode("utf-8", "replace"),
            r.stderr.decode("utf-8", "replace"),
        )


def probe_identity(h):
    u = os.uname()
    out = {"hostname": u.nodename, "kernel": u.release, "arch": u.machine}
    osr = h.read("/etc/os-release")
    if is_err(osr):
        out["os"] = osr
    else:
        kv = dict(re.findall(r'^([A-Z_]+)="?([^"\n]*)"?$', osr, re.M))
        out["os"] = (
            kv.get("PRETTY_NAME")
            or ("{} {}".format(kv.get("ID", ""), kv.get("VERSION_ID", ""))).strip()
        )
    boot = h.read("/proc/sys/kernel/random/boot_id")
    out["boot_id"] = boot if is_err(boot) else boot.strip()
    up = h.read("/proc/uptime")
    out["uptime_s"] = up if is_err(up) else float(up.split()[0])
    return out


def parse_proc_version(text):
    """/proc/driver/nvidia/version -> (version, flavor)."""
    m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    if not m:
        return err("unparsable", text.splitlines()[0] if text else ""), None
    flavor = "open" if "Open Kernel Module" in text else "proprietary"
    return m.group(1), flavor


PACKAGE_RX = re.compile(
    r"^(nvidia|libnvidia|cuda|libcuda|libcudnn|cudnn|datacenter-gpu-manager|dcgm|libnvinfer|"
    r"tensorrt|nvidia-fabricmanager|libxnvctrl|xserver-xorg-video-nvidia|kmod-nvidia|"
    r"nvidia-container)"
)


def parse_dpkg(text):
    items = []
    for raw in text.splitlines():
        parts = raw.split("\t")
        if len(parts) < 3 or not PACKAGE_RX.match(parts[0]):
            continue
        status = parts[2].split()
        if not status or status[-1] != "installed":
            continue
        items.append(
            {"name": parts[0].split(":")[0], "version": parts[1], "held": status[0] == "hold"}
        )
    return items


def parse_dpkg_residual(text):
    """Packages dpkg keeps that are not installed: configuration left (`rc`) or held."""
    items = []
    for raw in text.splitlines():
        parts = raw.split("\t")
        if len(parts) < 3 or not PACKAGE_RX.match(parts[0]):
            continue
        status = parts[2].split()
        if len(status) == 3 and (status[2] == "config-files"
                                 or (status[0] == "hold" and status[2] == "not-installed")):
            items.append({"name": parts[0].split(":")[0], "version": parts[1],
                          "held": status[0] == "hold"})
    return items


def parse_rpm(text, locks=""):
    items = []
    lock_names = {parse_lock_entry(ln.strip())[0] for ln in locks.splitlines()
                  if ln.strip() and not ln.strip().startswith(("#", "!"))}
    for raw in text.splitlines():
        parts = raw.split("\t")
        if len(parts) < 2 or not PACKAGE_RX.match(parts[0]):
            continue
        name, ver = parts[0], parts[1]
        if ver.startswith("0:"):
            ver = ver[2:]
        items.append({"name": name, "version": ver, "held": name in lock_names})
    return items


def parse_lock_entry(entry):
    """(name, version) of a versionlock entry, `name-[epoch:]version-release.*` (a name may
    hold dashes and digits: `cuda-toolkit-12-8-0:12.8.1-1.*` is cuda-toolkit-12-8's)."""
    if re.match(r"^\d+:\D", entry):  # yum's `epoch:name-version-release.*`
        entry = entry.split(":", 1)[1]
    if ":" in entry:
        head, rest = entry.split(":", 1)
        name, epoch = head.rsplit("-", 1)
        version = epoch + ":" + rest
    else:
        parts = entry.rsplit("-", 2)
        name, version = parts[0], "-".join(parts[1:])
    return name, version[:-2] if version.endswith(".*") else version


def parse_rpm_stale_locks(items, locks):
    """versionlock entries (`name-[epoch:]version-release.*`) of NVIDIA packages that are not
    installed: a lock left behind by a release the host no longer runs."""
    installed = {p["name"] for p in items}
    out = []
    for ln in locks.splitlines():
        entry = ln.strip()
        if not entry or entry.startswith(("#", "!")):
            continue
        name, version = parse_lock_entry(entry)
        if PACKAGE_RX.match(name) and name not in installed:
            out.append({"name": name, "version": version, "held": True})
    return out


RPM_FAMILY = {"rhel", "fedora", "centos", "rocky", "almalinux", "ol", "amzn", "suse", "sles",
              "opensuse"}
DEB_FAMILY = {"debian", "ubuntu"}


def package_managers(os_release):
    """The package databases to ask, in order, from /etc/os-release's ID and ID_LIKE: an EL
    host may carry dpkg too (EPEL ships it), and asking dpkg first there reads an empty or
    foreign database instead of the rpm one that holds the driver."""
    kv = dict(re.findall(r'^([A-Z_]+)="?([^"\n]*)"?$', os_release or "", re.M))
    ids = {kv.get("ID", "").lower()} | set(kv.get("ID_LIKE", "").lower().split())
    if ids & RPM_FAMILY and not ids & DEB_FAMILY:
        return ["rpm", "dpkg"]
    return ["dpkg", "rpm"]


def _dpkg_packages(h):
    r = h.run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${Status}\n"])
    if not is_err(r) and r[0] in (0, 1) and r[1]:
        return {"manager": "dpkg", "items": sorted(parse_dpkg(r[1]), key=lambda p: p["name"]),
                "residual": sorted(parse_dpkg_residual(r[1]), key=lambda p: p["name"])}
    return None


def _rpm_packages(h):
    r2 = h.run(["rpm", "-qa", "--qf", "%{NAME}\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\n"])
    if not is_err(r2) and r2[0] == 0:
        locks = ""
        for p in ("/etc/dnf/plugins/versionlock.list", "/etc/yum/pluginconf.d/versionlock.list"):
            t = h.read(p)
            if not is_err(t):
                locks += t
        items = sorted(parse_rpm(r2[1], locks), key=lambda p: p["name"])
        return {"manager": "rpm", "items": items,
                "residual": sorted(parse_rpm_stale_locks(items, locks), key=lambda p: p["name"])}
    return None


def probe_packages(h):
    osr = h.read("/etc/os-release")
    readers = {"dpkg": _dpkg_packages, "rpm": _rpm_packages}
    for manager in package_managers("" if is_err(osr) else osr):
        got = readers[manager](h)
        if got is not None:
            return got
    return err("no_package_manager", "dpkg-query/rpm unavailable")


def probe_toolkits(h):
    import glob

    out = []
    for d in sorted(glob.glob(h.path("/usr/local/cuda-*"))):
        if not os.path.isdir(d):
            continue
        ver = None
        vj = os.path.join(d, "version.json")
        if os.path.exists(vj):
            try:
                with open(vj) as f:
                    ver = json.load(f).get("cuda", {}).get("version")
            except (OSError, ValueError):
                ver = None
        if ver is None:
            vt = os.path.join(d, "version.txt")
            try:
                with open(vt) as f:
                    m = re.search(r"(\d+\.\d+(?:\.\d+)?)", f.read())
                    ver = m.group(1) if m else None
            except OSError:
                ver = None
        name = os.path.basename(d)
        out.append({"path": "/usr/local/" + name, "version": ver or name[len("cuda-") :]})
    return out


def _nvml_reason(e):
    name = type(e).__name__
    mapping = {
        "NVMLError_NotSupported": "not_supported",
        "NVMLError_FunctionNotFound": "function_not_found",
        "NVMLError_NoPermission": "no_permission",
        "NVMLError_GpuIsLost": "gpu_is_lost",
        "NVMLError_LibraryNotFound": "library_not_found",
        "NVMLError_DriverNotLoaded": "driver_not_loaded",
        "NVMLError_LibRmVersionMismatch": "driver_library_mismatch",
        "NVMLError_InvalidArgument": "invalid_argument",
        "NVMLError_Unknown": "unknown",
        "NVMLError_ResetRequired": "reset_required",
    }
    return mapping.get(name, "nvml_error")


def _call(N, fn, *args):
    try:
        return getattr(N, fn)(*args)
    except N.NVMLError as e:
        return err(_nvml_reason(e), f"{fn}: {e}")
    except AttributeError:
        return err("function_not_found", fn)
    except Exception as e:  # a ctypes surprise must not sink the whole probe
        return err("error", f"{fn}: {e}")


def _decode_reasons(mask):
    if not isinstance(mask, int):
        return mask
    return sorted(name for bit, name in CLOCK_EVENT_BITS if mask & bit)


def _nvml_gpu(N, i):
    h = _call(N, "nvmlDeviceGetHandleByIndex", i)
    if is_err(h):
        return {"index": i, "handle": h}
    g = {"index": i}
    g["name"] = _call(N, "nvmlDeviceGetName", h)
    g["uuid"] = _call(N, "nvmlDeviceGetUUID", h)
    g["serial"] = _call(N, "nvmlDeviceGetSerial", h)
    g["minor_number"] = _call(N, "nvmlDeviceGetMinorNumber", h)
    pci = _call(N, "nvmlDeviceGetPciInfo", h)
    if is_err(pci):
        g["pci_bus_id"] = pci
        g["pci_device_id"] = pci
    else:
        g["pci_bus_id"] = norm_pci(pci.busId)
        g["pci_device_id"] = f"0x{pci.pciDeviceId:08X}"
    g["pcie_gen_current"] = _call(N, "nvmlDeviceGetCurrPcieLinkGeneration", h)
    g["pcie_gen_max"] = _call(N, "nvmlDeviceGetMaxPcieLinkGeneration", h)
    g["pcie_width_current"] = _call(N, "nvmlDeviceGetCurrPcieLinkWidth", h)
    g["pcie_width_max"] = _call(N, "nvmlDeviceGetMaxPcieLinkWidth", h)
    g["pcie_replay_counter"] = _call(N, "nvmlDeviceGetPcieReplayCounter", h)
    for key, clk in (("graphics", 0), ("sm", 1), ("mem", 2)):
        g[f"clock_{key}_mhz"] = _call(N, "nvmlDeviceGetClockInfo", h, clk)
        g[f"clock_max_{key}_mhz"] = _call(N, "nvmlDeviceGetMaxClockInfo", h, clk)
    mask = _call(N, "nvmlDeviceGetCurrentClocksEventReasons", h)
    if is_err(mask) and mask["error"] == "function_not_found":
        mask = _call(N, "nvmlDeviceGetCurrentClocksThrottleReasons", h)
    g["clock_event_reasons_mask"] = mask
    g["clock_event_reasons"] = _decode_reasons(mask)
    g["temperature_c"] = _call(N, "nvmlDeviceGetTemperature", h, 0)
    pw = _call(N, "nvmlDeviceGetPowerUsage", h)
    g["power_draw_w"] = pw / 1000.0 if isinstance(pw, int) else pw
    pl = _call(N, "nvmlDeviceGetEnforcedPowerLimit", h)
    g["power_limit_w"] = pl / 1000.0 if isinstance(pl, int) else pl
    ecc = _call(N, "nvmlDeviceGetEccMode", h)
    if isinstance(ecc, (list, tuple)):
        g["ecc_mode_current"], g["ecc_mode_pending"] = bool(ecc[0]), bool(ecc[1])
    else:
        g["ecc_mode_current"] = g["ecc_mode_pending"] = ecc
    for scope, sc in (("volatile", 0), ("aggregate", 1)):
        g[f"ecc_{scope}_corrected"] = _call(N, "nvmlDeviceGetTotalEccErrors", h, 0, sc)
        g[f"ecc_{scope}_uncorrected"] = _call(N, "nvmlDeviceGetTotalEccErrors", h, 1, sc)
    g["ecc_sram_threshold_exceeded"] = None
    for key, cause in (("sbe", 0), ("dbe", 1)):
        pages = _call(N, "nvmlDeviceGetRetiredPages", h, cause)
        g["retired_pages_" + key] = len(pages) if isinstance(pages, list) else pages
    pend = _call(N, "nvmlDeviceGetRetiredPagesPendingStatus", h)
    g["retired_pages_pending"] = bool(pend) if isinstance(pend, int) else pend
    rr = _call(N, "nvmlDeviceGetRemappedRows", h)
    if isinstance(rr, (list, tuple)) and len(rr) >= 4:
        g["remapped_rows_correctable"], g["remapped_rows_uncorrectable"] = int(rr[0]), int(rr[1])
        g["remapped_rows_pending"], g["remapped_rows_failure"] = bool(rr[2]), bool(rr[3])
    else:
        for k in ("correctable", "uncorrectable", "pending", "failure"):
            g["remapped_rows_" + k] = rr
    hist = _call(N, "nvmlDeviceGetRowRemapperHistogram", h)
    g["remap_histogram"] = (
        None
        if is_err(hist)
        else {k: int(getattr(hist, k)) for k in ("max", "high", "partial", "low", "none")}
    )
    mig = _call(N, "nvmlDeviceGetMigMode", h)
    if isinstance(mig, (list, tuple)):
        g["mig_mode_current"], g["mig_mode_pending"] = mig[0] == 1, mig[1] == 1
    else:
        g["mig_mode_current"] = g["mig_mode_pending"] = mig
    pm = _call(N, "nvmlDeviceGetPersistenceMode", h)
    g["persistence_mode"] = pm == 1 if isinstance(pm, int) else pm
    g["recovery_action"] = None
    _nvml_node_state(N, h, g)
    return g


COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}
FABRIC_STATES = {1: "not started", 2: "in progress", 3: "completed"}  # nvidia-smi's words
NVLINK_MAX = 18  # NVML_NVLINK_MAX_LINKS


def _text_of(v):
    return v.decode(errors="replace") if isinstance(v, bytes) else v


def _watts(v):
    return v / 1000.0 if isinstance(v, int) else v


def _nvml_node_state(N, h, g):
    """Firmware, settings, links and MIG devices (fleet.domain.node_facts): what NVML said, or
    the error it gave, never a default."""
    g["vbios_version"] = _text_of(_call(N, "nvmlDeviceGetVbiosVersion", h))
    g["inforom_image"] = _text_of(_call(N, "nvmlDeviceGetInforomImageVersion", h))
    for key, obj in (("oem", 0), ("ecc", 1), ("pwr", 2)):
        g["inforom_" + key] = _text_of(_call(N, "nvmlDeviceGetInforomVersion", h, obj))
    mode = _call(N, "nvmlDeviceGetGspFirmwareMode", h)
    g["gsp_mode"] = bool(mode[0]) if isinstance(mode, (list, tuple)) else mode
    g["gsp_firmware_version"] = (_text_of(_call(N, "nvmlDeviceGetGspFirmwareVersion", h))
                                 if g["gsp_mode"] is True else
                                 err("not_available", "no GSP firmware") if g["gsp_mode"] is False
                                 else g["gsp_mode"])
    cm = _call(N, "nvmlDeviceGetComputeMode", h)
    g["compute_mode"] = COMPUTE_MODES.get(cm, err("unparsable", cm)) if isinstance(cm, int) else cm
    g["power_limit_default_w"] = _watts(_call(N, "nvmlDeviceGetPowerManagementDefaultLimit", h))
    lim = _call(N, "nvmlDeviceGetPowerManagementLimitConstraints", h)
    if isinstance(lim, (list, tuple)):
        g["power_limit_min_w"], g["power_limit_max_w"] = _watts(lim[0]), _watts(lim[1])
    else:
        g["power_limit_min_w"] = g["power_limit_max_w"] = lim
    for key, clk in (("graphics", 0), ("memory", 2)):
        g[f"clocks_applications_{key}_mhz"] = _call(N, "nvmlDeviceGetApplicationsClock", h, clk)
        g[f"clocks_default_applications_{key}_mhz"] = _call(
            N, "nvmlDeviceGetDefaultApplicationsClock", h, clk)
    # NVML has no getter for `-lgc` locked clocks: a GPU held by them shows the
    # applications_clocks_setting (user-defined clocks) event reason and a capped clock
    g["clocks_locked_graphics_mhz"] = err("not_supported", "NVML reads no locked clocks")
    g["nvlink_links"] = _nvml_nvlinks(N, h)
    g["fabric_state"], g["fabric_status"] = _nvml_fabric(N, h)
    mig = g.get("mig_mode_current")
    g["mig_devices"] = _nvml_mig_devices(N, h) if mig is True else [] if mig is False else mig


def _nvml_nvlinks(N, h):
    links = []
    for link in range(NVLINK_MAX):
        st = _call(N, "nvmlDeviceGetNvLinkState", h, link)
        if is_err(st):
            # link 0 not supported: a GPU without NVLink; past the last link: the end
            if st["error"] in ("not_supported", "invalid_argument") or links:
                break
            return st
        links.append({"link": link, "active": bool(st)})
    return links


def _nvml_fabric(N, h):
    try:
        info = N.c_nvmlGpuFabricInfo_t()
        N.nvmlDeviceGetGpuFabricInfo(h, N.byref(info))
    except N.NVMLError as e:
        return (err(_nvml_reason(e), f"nvmlDeviceGetGpuFabricInfo: {e}"),) * 2
    except Exception as e:  # an old pynvml without the struct
        return (err("function_not_found", f"nvmlDeviceGetGpuFabricInfo: {e}"),) * 2
    state = FABRIC_STATES.get(info.state, err("unparsable", info.state))
    if state != "completed":
        return state, err("not_available", "fabric registration not completed")
    return state, "success" if info.status == 0 else err("fabric_error", info.status)


def _nvml_mig_devices(N, h):
    """One entry per GPU instance of every profile, by id (compute instances: not read)."""
    out = []
    for idx in range(10):  # NVML_GPU_INSTANCE_PROFILE_1_SLICE .. _1_SLICE_REV2
        prof = _call(N, "nvmlDeviceGetGpuInstanceProfileInfo", h, idx)
        if is_err(prof):
            if prof["error"] in ("not_supported", "invalid_argument"):
                continue
            return prof
        try:
            count = N.c_uint(0)
            arr = (N.c_nvmlGpuInstance_t * max(1, prof.instanceCount))()
            N.nvmlDeviceGetGpuInstances(h, prof.id, arr, N.byref(count))
            infos = [N.nvmlGpuInstanceGetInfo(arr[i]) for i in range(count.value)]
        except N.NVMLError as e:
            return err(_nvml_reason(e), f"nvmlDeviceGetGpuInstances: {e}")
        except Exception as e:
            return err("error", f"nvmlDeviceGetGpuInstances: {e}")
        name = _text_of(prof.name).replace("MIG ", "")
        out += [{"gpu_instance_id": int(i.id), "compute_instance_id": None, "profile": name,
                 "gi_profile_id": int(prof.id), "placement_start": int(i.placement.start),
                 "memory_mib": int(prof.memorySizeMB),
                 "multiprocessor_count": int(prof.multiprocessorCount)} for i in infos]
    return sorted(out, key=lambda d: d["gpu_instance_id"])


def probe_nvml():
    """(facts dict, None) from NVML, or (None, error) when NVML cannot be used at all."""
    try:
        import pynvml as N
    except ImportError as e:
        return None, err("pynvml_not_installed", e)
    try:
        N.nvmlInit()
    except Exception as e:  # NVMLError subclasses, OSError from a broken library
        return None, err(_nvml_reason(e) if hasattr(e, "value") else "init_failed", e)
    try:
        out = {
            "driver_version": _call(N, "nvmlSystemGetDriverVersion"),
            "nvml_version": _call(N, "nvmlSystemGetNVMLVersion"),
        }
        cuda = _call(N, "nvmlSystemGetCudaDriverVersion_v2")
        if is_err(cuda):
            cuda = _call(N, "nvmlSystemGetCudaDriverVersion")
        out["cuda_version"] = cuda if is_err(cuda) else f"{cuda // 1000}.{(cuda % 1000) // 10}"
        count = _call(N, "nvmlDeviceGetCount")
        out["gpu_count"] = count
        out["gpus"] = [_nvml_gpu(N, i) for i in range(count)] if isinstance(count, int) else []
        return out, None
    finally:
        with contextlib.suppress(Exception):
            N.nvmlShutdown()


PCI_GPU_CLASSES = ("0x0300", "0x0302")  # VGA-compatible and 3D controllers (not NVSwitch)


def probe_pci_gpus(h):
    """NVIDIA GPUs the PCI bus lists (sysfs), whatever NVML can open: the checks compare them
    with NVML's GPUs, so a GPU NVML lost or never saw is a finding, not a silent gap."""
    base = h.path("/sys/bus/pci/devices")
    try:
        names = sorted(os.listdir(base))
    except OSError as e:
        return err("not_found" if isinstance(e, FileNotFoundError) else "os_error", e)
    out = []
    for n in names[:4096]:
        v = h.read(f"/sys/bus/pci/devices/{n}/vendor", 64)
        if not isinstance(v, str) or v.strip().lower() != "0x10de":
            continue
        cls = h.read(f"/sys/bus/pci/devices/{n}/class", 64)
        if isinstance(cls, str) and not cls.strip().lower().startswith(PCI_GPU_CLASSES):
            continue
        dev = h.read(f"/sys/bus/pci/devices/{n}/device", 64)
        out.append({"pci": norm_pci(n), "pci_class": cls.strip() if isinstance(cls, str) else cls,
                    "device_id": dev.strip() if isinstance(dev, str) else dev})
    return out


APT_CONF = ("/etc/apt/apt.conf", "/etc/apt/apt.conf.d")
DNF_AUTOMATIC = "/etc/dnf/automatic.conf"
GUARD_MAX_BYTES = 64 * 1024


def probe_upgrade_guard(h, managers):
    """The text that keeps unattended-upgrades (apt.conf files naming its Package-Blacklist)
    or dnf-automatic (automatic.conf) off the pinned packages; the audit parses and judges it."""
    out = {}
    if "dpkg" in managers:
        files = {}
        paths = [APT_CONF[0]]
        try:
            paths += [f"{APT_CONF[1]}/{n}" for n in sorted(os.listdir(h.path(APT_CONF[1])))[:256]]
        except FileNotFoundError:
            pass
        except OSError as e:
            return {"apt_conf": err("os_error", e)}
        for p in paths:
            t = h.read(p, GUARD_MAX_BYTES)
            if isinstance(t, str):
                if "Package-Blacklist" in t:
                    files[p] = t
            elif t["error"] != "not_found":
                return {"apt_conf": t}
        out["apt_conf"] = files
    if "rpm" in managers:
        t = h.read(DNF_AUTOMATIC, GUARD_MAX_BYTES)
        out["dnf_automatic"] = None if is_err(t) and t["error"] == "not_found" else t
    return out


def probe_nvidia_smi(h):
    r = h.run(["nvidia-smi", "-q", "-x"], timeout=60)
    if is_err(r):
        return None, r
    if r[0] != 0:
        return None, err("nvidia_smi_failed", (r[2] or r[1]).strip()[:300])
    try:
        return parse_nvsmi_xml(r[1]), None
    except Exception as e:
        return None, err("unparsable", e)


FM_BINARIES = ("/usr/bin/nv-fabricmanager", "/usr/sbin/nv-fabricmanager")


def probe_fabric_manager(h):
    """Fabric Manager (NVSwitch systems): the service's state, the daemon's version, the
    NVSwitch devices. None on a host with neither NVSwitch devices nor the daemon installed
    (nothing to run); each value otherwise read or the error object."""
    try:
        switches = sum(1 for n in os.listdir(h.path("/dev"))
                       if n.startswith("nvidia-nvswitch") and n[15:].isdigit())
    except OSError as e:
        switches = err("os_error", e)
    binary = next((b for b in FM_BINARIES if os.path.exists(h.path(b))), None)
    if binary is None and not switches:
        return None
    out = {"nvswitch_count": switches}
    if binary is None:
        out["version"] = err("not_found", "nv-fabricmanager is not installed")
    else:
        r = h.run([binary, "--version"], timeout=10)
        m = re.search(r"version is\s*:\s*(\d+(?:\.\d+)+)", r[1] + r[2]) if not is_err(r) else None
        out["version"] = r if is_err(r) else m.group(1) if m else err("unparsable",
                                                                      (r[1] + r[2])[:200])
    r = h.run(["systemctl", "is-active", "nvidia-fabricmanager"], timeout=10)
    state = r if is_err(r) else r[1].strip() or err("unparsable", r[2][:200])
    out["service"] = state
    out["running"] = state == "active" if isinstance(state, str) else state
    return out


# fleet's boot unit (fleet.domain.node_plan.BOOT_*; a unit test keeps the paths equal) and
# NVIDIA's MIG tools: nvidia-mig-parted, and nvidia-mig-manager.service, which applies its own
# MIG config at every boot (mig-parted deployments/systemd: unit in /usr/lib/systemd/system,
# `systemctl enable` link, the selected config in a drop-in's MIG_PARTED_SELECTED_CONFIG).
NODE_BOOT_FILES = (("boot_unit_sha256", "/etc/systemd/system/fleet-node-state.service"),
                   ("boot_script_sha256", "/usr/local/sbin/fleet-node-state"),
                   ("mig_parted_file_sha256", "/etc/fleet/mig-parted.yaml"))
NODE_BOOT_WANTS = "/etc/systemd/system/multi-user.target.wants/fleet-node-state.service"
MIG_PARTED_BINARIES = ("/usr/bin/nvidia-mig-parted", "/usr/local/bin/nvidia-mig-parted",
                       "/usr/sbin/nvidia-mig-parted")
MIG_MANAGER = "nvidia-mig-manager.service"
SYSTEMD_UNIT_DIRS = ("/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system")
_SELECTED = re.compile(r'^\s*Environment\s*=\s*(.*)$', re.M)


def parse_selected_config(dropins):
    """The MIG config nvidia-mig-manager applies at boot: MIG_PARTED_SELECTED_CONFIG as the
    unit's drop-ins set it (texts in systemd's order: a later one wins); None when none does."""
    chosen = None
    for text in dropins:
        for line in _SELECTED.findall(text):
            for item in re.findall(r'"([^"]*)"|(\S+)', line):
                word = item[0] or item[1]
                if word.startswith("MIG_PARTED_SELECTED_CONFIG="):
                    chosen = word.split("=", 1)[1] or None
    return chosen


def probe_node_tools(h):
    """fleet's boot unit as it is on the host (sha256 of each file, None when absent; enabled
    or not) and NVIDIA's MIG tools: nvidia-mig-parted's path (None: not installed) and the
    nvidia-mig-manager service (unit path, enabled, the config it applies). Never raises."""
    out = {}
    for key, path in NODE_BOOT_FILES:
        data = _read_bytes(h, path, 1 << 20)
        if is_err(data):
            out[key] = None if data["error"] == "not_found" else data
        else:
            out[key] = hashlib.sha256(data).hexdigest()
    out["boot_enabled"] = os.path.lexists(h.path(NODE_BOOT_WANTS))
    out["mig_parted"] = next((b for b in MIG_PARTED_BINARIES if os.path.exists(h.path(b))), None)
    unit = next((f"{d}/{MIG_MANAGER}" for d in SYSTEMD_UNIT_DIRS
                 if os.path.exists(h.path(f"{d}/{MIG_MANAGER}"))), None)
    out["mig_manager_unit"] = unit
    if unit is None:
        return out
    out["mig_manager_enabled"] = any(
        os.path.lexists(h.path(f"/etc/systemd/system/{t}.wants/{MIG_MANAGER}"))
        for t in ("multi-user.target", "nvidia-gpu-reset.target"))
    dropins = {}  # systemd: every folder's *.conf in name order; /etc's hides a same name
    for d in SYSTEMD_UNIT_DIRS[::-1]:
        try:
            names = os.listdir(h.path(f"{d}/{MIG_MANAGER}.d"))
        except FileNotFoundError:
            continue
        except OSError as e:
            out["mig_manager_config"] = err("os_error", e)
            return out
        dropins.update({n: f"{d}/{MIG_MANAGER}.d/{n}" for n in names if n.endswith(".conf")})
    texts = []
    for n in sorted(dropins):
        t = h.read(dropins[n], 1 << 16)
        if is_err(t):
            out["mig_manager_config"] = t
            return out
        texts.append(t)
    out["mig_manager_config"] = parse_selected_config(texts)
    return out


_BOOT_LINE = re.compile(rb"kernel: \[\s*0\.\d+\] Linux version ")


DRIVER_ROOT = "/run/nvidia/driver"
NV_VALIDATIONS = "/run/nvidia/validations"
DRIVER_MARKS = (".driver-ctr-ready", "host-driver-ready", "driver-ready")


def probe_driver_container(h):
    """Is the driver the GPU Operator's container: /run/nvidia/driver (its root, mounted on
    the host) and the operator's marks under /run/nvidia/validations. The shape of
    fleet.domain.driver_owner.DriverContainer (the same as the pyinfra fact DriverRoot)."""
    out = {"root": None, "entries": [], "marks": [], "driver_ready": None}
    p = h.path(DRIVER_ROOT)
    try:
        if os.path.islink(p) and os.path.realpath(p) == os.path.realpath(h.path("/")):
            out["root"] = "host-root"
        elif os.path.isdir(p):
            names = sorted(os.listdir(p))
            out["root"] = "populated" if names else "empty"
            out["entries"] = [n[:100] for n in names[:64]]
        elif os.path.lexists(p):
            out["root"] = "not-a-directory"
        else:
            out["root"] = "absent"
    except OSError as e:
        out["root"] = err("os_error", f"{DRIVER_ROOT}: {e}")
    for m in DRIVER_MARKS:
        if os.path.lexists(h.path(NV_VALIDATIONS + "/" + m)):
            out["marks"].append(m)
    if "driver-ready" in out["marks"]:
        text = h.read(NV_VALIDATIONS + "/driver-ready", 4096)
        if is_err(text):
            out["driver_ready"] = text
        else:
            ready = {}
            for line in text.splitlines():
                key, sep, value = line.strip().partition("=")
                if sep and key.replace("_", "").isalnum():
                    ready[key] = value.strip().strip('"')
            out["driver_ready"] = ready
    return out


def current_boot(data):
    """The part of a syslog kernel file since the last boot: kern.log keeps every boot, and a
    first probe (no cursor) must not judge this boot by the last one's errors."""
    last = None
    for m in _BOOT_LINE.finditer(data):
        last = m
    if last is None:
        return data
    return data[data.rfind(b"\n", 0, last.start()) + 1 :]


KERN_LOG = "/var/log/kern.log"
ROTATED_SUFFIXES = (".1", ".0", "-old")
"""Where logrotate (".1"), newsyslog (".0") and some hand-made rotations leave the file a cursor
points into; a compressed rotation (".2.gz") is never the one just rotated (delaycompress)."""
DMESG_ANCHOR_LINES = 5
"""Lines of un-timestamped dmesg output a cursor fingerprints to find where the last probe
stopped (one line alone repeats too often: the same Xid, printed twice)."""


def _file_cursor(since):
    """(inode, offset) of a "file:INODE:OFFSET" cursor; ValueError when malformed."""
    _, ino, off = since.split(":")
    ino, off = int(ino), int(off)
    if ino < 0 or off < 0:
        raise ValueError(since)
    return ino, off


def _read_from(p, start, limit=None):
    """Whole lines of file `p` from byte `start` to its last newline, at most the last `limit`
    (MAX_LOG_BYTES) bytes: (bytes, offset after them, bytes skipped over the limit)."""
    limit = MAX_LOG_BYTES if limit is None else limit
    with open(p, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        begin = max(start, size - limit)
        partial = begin > start and begin > 0
        f.seek(begin - 1 if partial else begin)
        data = f.read(size - begin + (1 if partial else 0))
    end = begin + len(data) - (1 if partial else 0)
    if partial:  # started inside a line (over the limit): the first whole line follows a newline
        data = data.split(b"\n", 1)[1] if b"\n" in data else b""
    cut = data.rfind(b"\n") + 1
    if cut < len(data) and cut > 0:  # a line still being written: the next probe reads it whole
        end -= len(data) - cut
        data = data[:cut]
    return data, end, begin - start


def _rotated_tail(h, ino, off):
    """The unread end of the file a cursor points into, once logrotate renamed it (same inode
    under a rotated name): (bytes, name) or (None, None) when no rotated file has that inode."""
    for suffix in ROTATED_SUFFIXES:
        p = h.path(KERN_LOG + suffix)
        try:
            st = os.stat(p)
        except OSError:
            continue
        if st.st_ino == ino and st.st_size >= off:
            data, _, _ = _read_from(p, off)
            return data, KERN_LOG + suffix
    return None, None


def read_kern_file(h, since):
    """kern.log since a "file:INODE:OFFSET" cursor: (text, cursor, notes).

    The cursor is the inode and byte offset of the end of what was read, so a probe reads each
    line once: after a rotation (a new inode) the rotated file (same inode, new name) is read
    from the offset to its end first, then the new file from its start; a file truncated in
    place (copytruncate: same inode, shorter) is read from its start. Without a cursor only the
    current boot is read. Notes say what could not be read ("rotated_tail_missing", bytes over
    MAX_LOG_BYTES skipped).
    """
    p = h.path(KERN_LOG)
    st = os.stat(p)
    notes = {}
    head = b""
    start = 0
    if since is not None:
        ino, off = since
        if ino == st.st_ino:
            start = off if off <= st.st_size else 0
            if off > st.st_size:
                notes["truncated_in_place"] = True
        else:
            head, name = _rotated_tail(h, ino, off)
            if head is None:
                notes["rotated_tail_missing"] = True
                head = b""
            else:
                notes["rotated_from"] = name
    data, end, skipped = _read_from(p, start)
    if skipped:
        notes["skipped_bytes"] = skipped
    if since is None:
        data = current_boot(data)
    return (head + data).decode("utf-8", "replace"), f"file:{st.st_ino}:{end}", notes


def _dmesg_stamp(line):
    m = re.match(r"\[\s*(\d+\.\d+)\]", line)
    return float(m.group(1)) if m else None


def _dmesg_anchor(lines):
    tail = "\n".join(lines[-DMESG_ANCHOR_LINES:])
    return hashlib.sha1(tail.encode("utf-8", "replace")).hexdigest()[:16]


def dmesg_since(lines, boot, since):
    """The dmesg lines after cursor `since` (None: all) and the new cursor.

    With [seconds] stamps the cursor is the last stamp ("dmesg:BOOT:SECONDS"); a line without a
    stamp goes with the stamped line before it. Without stamps (printk.time=0) it is the line
    count and a fingerprint of the last lines ("dmesg:BOOT:nCOUNT:SHA", only characters the
    controller's cursor check allows): the buffer only grows at its end and loses lines at its
    start, so the new lines follow the fingerprinted ones; when they are gone (the ring buffer
    wrapped, `dmesg -c`) every line is new. A cursor of another boot, or one that does not
    parse, reads the whole buffer.
    """
    stamps = [t for t in (_dmesg_stamp(ln) for ln in lines) if t is not None]
    parts = (since or "").split(":")
    same_boot = len(parts) >= 3 and parts[0] == "dmesg" and parts[1] == boot
    if stamps:
        cursor = f"dmesg:{boot}:{stamps[-1]:.6f}"
        cut = None
        if same_boot and not parts[2].startswith("n"):
            try:
                cut = float(parts[2])
            except ValueError:
                cut = None
        if cut is not None:
            kept, keep = [], False
            for ln in lines:
                t = _dmesg_stamp(ln)
                if t is not None:
                    keep = t > cut
                if keep:
                    kept.append(ln)
            lines = kept
        return lines, cursor
    cursor = f"dmesg:{boot}:n{len(lines)}:{_dmesg_anchor(lines)}" if lines else since
    if not same_boot or not parts[2].startswith("n") or len(parts) != 4:
        return lines, cursor
    try:
        count = int(parts[2][1:])
    except ValueError:
        return lines, cursor
    anchor = parts[3]
    k = DMESG_ANCHOR_LINES
    if len(lines) >= count and count and _dmesg_anchor(lines[:count]) == anchor:
        return lines[count:], cursor  # nothing lost at the start: the common case
    for end in range(len(lines), 0, -1):
        if _dmesg_anchor(lines[max(0, end - k):end]) == anchor:
            return lines[end:], cursor
    return lines, cursor


def read_kernel_log(h, since=None, mode="auto"):
    """Events since `since` (a cursor this probe returned before) and the new cursor.

    A cursor that does not parse is reported in `tried` and read as no cursor (this boot)."""
    kind = (since or "").split(":", 1)[0]
    boot = h.read("/proc/sys/kernel/random/boot_id")
    boot = boot.strip() if isinstance(boot, str) else ""
    journal = os.path.isdir(h.path("/run/systemd/journal")) or os.path.isdir(
        h.path("/var/log/journal")
    )
    order = {
        "auto": ["journal", "file", "dmesg"] if journal else ["file", "dmesg"],
        "journal": ["journal"],
        "file": ["file"],
        "dmesg": ["dmesg"],
        "none": [],
    }.get(mode, [])
    tried = {}
    for src in order:
        if src == "journal":
            argv = ["journalctl", "-k", "-o", "short-iso", "--no-pager", "--show-cursor", "-q"]
            argv += ["--after-cursor", since[len("journal:") :]] if kind == "journal" else ["-b"]
            r = h.run(argv)
            if is_err(r) or r[0] != 0:
                tried[src] = r if is_err(r) else err("failed", r[2].strip()[:200])
                continue
            text, cursor = r[1], since
            m = re.search(r"^-- cursor: (.+)$", text, re.M)
            if m:
                cursor = "journal:" + m.group(1).strip()
                text = text[: m.start()]
            return src, text, cursor, tried
        if src == "file":
            pos = None
            if kind == "file":
                try:
                    pos = _file_cursor(since)
                except ValueError:
                    tried["cursor"] = err("bad_cursor", since[:100])
            try:
                text, cursor, notes = read_kern_file(h, pos)
            except OSError as e:
                tried[src] = err("not_found" if isinstance(e, FileNotFoundError) else "os_error", e)
                continue
            if notes:
                tried["notes"] = notes
            return src, text, cursor, tried
        if src == "dmesg":
            r = h.run(["dmesg"])
            if is_err(r) or r[0] != 0:
                tried[src] = r if is_err(r) else err("failed", r[2].strip()[:200])
                continue
            lines, cursor = dmesg_since(r[1].splitlines(), boot, since if kind == "dmesg" else None)
            return src, "\n".join(lines), cursor, tried
    return None, "", since, tried


def _event_key(e):
    return (e["kind"], e["pci"], e["xid"], e["severity"])


def keep_events(events, limit=MAX_EVENTS):
    """At most `limit` events, chosen so no kind of event disappears under a flood of another:
    every (kind, GPU, Xid code, severity) keeps its latest events, the scarce ones whole, the
    flood what room is left (a storm of Xid 13 never hides the one Xid 48). In log order."""
    if len(events) <= limit:
        return events
    groups = {}
    for i, e in enumerate(events):
        groups.setdefault(_event_key(e), []).append(i)
    room = limit
    share = {}
    pending = sorted(groups, key=lambda k: len(groups[k]))
    while pending:
        fair = max(1, room // len(pending))
        k = pending.pop(0)
        share[k] = min(len(groups[k]), fair, room)
        room -= share[k]
    keep = sorted(i for k, idx in groups.items() for i in idx[len(idx) - share[k]:])
    return [events[i] for i in keep]


def xid_counts(events):
    """Xid events per GPU (PCI address) and code, over every event read: the counts the trend
    records, whatever the event list kept."""
    out = {}
    for e in events:
        if e["kind"] == "xid" and e["xid"] is not None and e["pci"] is not None:
            per = out.setdefault(e["pci"], {})
            per[str(e["xid"])] = per.get(str(e["xid"]), 0) + 1
    return out


def probe_kernel_log(h, since, mode):
    src, text, cursor, tried = read_kernel_log(h, since, mode)
    notes = tried.pop("notes", {})
    out = {"source": src, "cursor": cursor, "since": since, "tried": tried, "notes": notes}
    if src is None:
        out["events"] = err("no_kernel_log", ", ".join(sorted(tried)) or "disabled")
        return out
    events = parse_kernel_log(text)
    out["xid_counts"] = xid_counts(events)
    kept = keep_events(events)
    out["truncated"] = len(events) - len(kept)
    out["events"] = kept
    return out


def probe_aer(h, gpu_bdfs):
    base = h.path("/sys/bus/pci/devices")
    try:
        names = sorted(os.listdir(base))
    except OSError as e:
        return err("not_found" if isinstance(e, FileNotFoundError) else "os_error", e)
    nvidia = []
    for n in names:
        v = h.read(f"/sys/bus/pci/devices/{n}/vendor", 64)
        if (isinstance(v, str) and v.strip().lower() == "0x10de") or norm_pci(n) in gpu_bdfs:
            nvidia.append(n)
    out, seen = [], {}
    for n in nvidia:
        entry = _aer_entry(h, n, "device")
        out.append(entry)
        real = os.path.realpath(os.path.join(base, n))
        parent = os.path.basename(os.path.dirname(real))
        if norm_pci(parent) and parent != n:
            if parent not in seen:
                seen[parent] = _aer_entry(h, parent, "upstream")
                seen[parent]["downstream"] = []
                out.append(seen[parent])
            seen[parent]["downstream"].append(norm_pci(n))
    return out


def _aer_entry(h, bdf, role):
    e = {"pci": norm_pci(bdf), "role": role}
    cls = h.read(f"/sys/bus/pci/devices/{bdf}/class", 64)
    e["pci_class"] = cls.strip() if isinstance(cls, str) else None
    for kind in ("correctable", "nonfatal", "fatal"):
        t = h.read(f"/sys/bus/pci/devices/{bdf}/aer_dev_{kind}", 8192)
        e[kind] = t if is_err(t) else parse_aer_counters(t)
    return e


def probe_device_nodes(h):
    import glob
    import stat

    out = []
    for p in sorted(glob.glob(h.path("/dev/nvidia*"))):
        try:
            st = os.lstat(p)
        except OSError:
            continue
        rel = "/dev/" + os.path.basename(p)
        if stat.S_ISDIR(st.st_mode):
            for q in sorted(glob.glob(os.path.join(p, "*"))):
                try:
                    sq = os.lstat(q)
                except OSError:
                    continue
                out.append(
                    {
                        "path": rel + "/" + os.path.basename(q),
                        "mode": f"{stat.S_IMODE(sq.st_mode):04o}",
                        "char_device": stat.S_ISCHR(sq.st_mode),
                    }
                )
            continue
        out.append(
            {
                "path": rel,
                "mode": f"{stat.S_IMODE(st.st_mode):04o}",
                "char_device": stat.S_ISCHR(st.st_mode),
            }
        )
    return out


def _which(name, h):
    for d in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep) + [
        "/usr/sbin",
        "/usr/local/bin",
    ]:
        p = os.path.join(d, name)
        if os.path.isfile(h.path(p)) and os.access(h.path(p), os.X_OK):
            return p
    return None


def probe_container_runtime(h):
    out = {
        "docker_installed": _which("dockerd", h) is not None or _which("docker", h) is not None,
        "containerd_installed": _which("containerd", h) is not None,
        "nvidia_ctk": _which("nvidia-ctk", h),
        "nvidia_container_runtime": _which("nvidia-container-runtime", h),
    }
    daemon = h.read("/etc/docker/daemon.json")
    if is_err(daemon):
        out["docker"] = daemon
    else:
        try:
            d = json.loads(daemon or "{}")
            runtimes = d.get("runtimes") or {}
            out["docker"] = {
                "nvidia_runtime": "nvidia" in runtimes
                or any("nvidia" in json.dumps(v) for v in runtimes.values()),
                "default_runtime": d.get("default-runtime"),
            }
        except ValueError as e:
            out["docker"] = err("unparsable", e)
    texts = []
    for p in ["/etc/containerd/config.toml"] + _glob_rel(h, "/etc/containerd/conf.d/*.toml"):
        t = h.read(p)
        if isinstance(t, str):
            texts.append(t)
    out["containerd"] = (
        {
            "nvidia_runtime": any(
                "nvidia-container-runtime" in t
                or "runtimes.nvidia" in t
                or 'runtimes."nvidia"' in t
                for t in texts
            )
        }
        if texts
        else err("not_found", "/etc/containerd/config.toml")
    )
    out["cdi_specs"] = _glob_rel(h, "/etc/cdi/nvidia*.y*ml") + _glob_rel(
        h, "/var/run/cdi/nvidia*.y*ml"
    )
    docker_ok = isinstance(out["docker"], dict) and out["docker"].get("nvidia_runtime") is True
    ctd_ok = isinstance(out["containerd"], dict) and out["containerd"].get("nvidia_runtime") is True
    out["configured"] = bool(docker_ok or ctd_ok or out["cdi_specs"])
    return out


def _glob_rel(h, pattern):
    import glob

    root = h.path("/").rstrip("/")
    return sorted(p[len(root) :] if root else p for p in glob.glob(h.path(pattern)))


# --------------------------------------------------------------------------------------------
# NVIDIA container toolkit configuration and CDI specs. A CDI spec lists the driver's library
# files by version (libnvidia-ml.so.580.95.05); after a driver upgrade an old spec names files
# that are gone and every container that asks for the GPUs fails to start. The probe reports what
# the specs name and which of their host files are missing; the check judges (checks/cdi.py).
# --------------------------------------------------------------------------------------------
TOOLKIT_CONFIG = "/etc/nvidia-container-runtime/config.toml"
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
CDI_MAX_BYTES = 4 << 20
CDI_MAX_LISTED = 20
# (table, key) -> fact name: the settings that decide how containers get the GPUs
_TOOLKIT_KEYS = {
    ("nvidia-container-runtime", "mode"): "mode",
    ("nvidia-container-runtime", "runtimes"): "runtimes",
    ("nvidia-container-runtime.modes.cdi", "spec-dirs"): "cdi_spec_dirs",
    ("nvidia-container-runtime.modes.cdi", "default-kind"): "cdi_default_kind",
    ("nvidia-container-cli", "root"): "cli_root",
    ("nvidia-container-cli", "ldconfig"): "ldconfig",
    ("nvidia-container-cli", "no-cgroups"): "no_cgroups",
    ("nvidia-container-cli", "load-kmods"): "load_kmods",
    ("", "disable-require"): "disable_require",
}
# a driver library named by its driver version: libnvidia-ml.so.580.95.05, libcuda.so.570.86.15;
# not libnvidia-egl-wayland.so.1.1.19 (its own version)
_CDI_DRIVER_LIB = re.compile(
    r"^lib[\w+-]*?(?:nvidia|cuda|nvcuvid|nvoptix)[\w+-]*\.so\.(\d{3,}\.\d+(?:\.\d+)?)$"
)
_CDI_HOST_DRIVER = re.compile(r"--host-driver-version=(\d+\.\d+(?:\.\d+)?)")


def _toml_scalar(text, lineno):
    """One TOML value of the kinds the toolkit writes: string, bool, number, array of those."""
    s = text.strip()
    if s.startswith("["):
        end = s.rfind("]")
        if end < 0:
            raise ValueError(f"line {lineno}: array not closed on its line")
        inner = s[1:end].strip()
        out = []
        for m in re.finditer(r'"((?:[^"\\]|\\.)*)"|\'([^\']*)\'|([^,\s]+)', inner):
            if m.group(1) is not None:
                out.append(m.group(1).replace('\\"', '"').replace("\\\\", "\\"))
            elif m.group(2) is not None:
                out.append(m.group(2))
            else:
                out.append(_toml_scalar(m.group(3), lineno))
        return out
    m = re.match(r'^"((?:[^"\\]|\\.)*)"\s*(?:#.*)?$', s)
    if m:
        return m.group(1).replace('\\"', '"').replace("\\\\", "\\")
    m = re.match(r"^'([^']*)'\s*(?:#.*)?$", s)
    if m:
        return m.group(1)
    s = s.split("#", 1)[0].strip()
    if s in ("true", "false"):
        return s == "true"
    if re.fullmatch(r"[+-]?\d+", s):
        return int(s)
    raise ValueError(f"line {lineno}: value {s[:60]!r} not understood")


def _toml_lite(text):
    """Tables of key = value lines (no tomllib before Python 3.11); ValueError names the line."""
    tables, cur = {}, ""
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^\[\s*([\w.\"-]+)\s*\]\s*(?:#.*)?$", line)
        if m:
            cur = m.group(1).replace('"', "")
            tables.setdefault(cur, {})
            continue
        m = re.match(r'^("[^"]+"|[\w-]+)\s*=\s*(.+)$', line)
        if not m:
            raise ValueError(f"line {n}: {line[:80]!r} is not key = value")
        tables.setdefault(cur, {})[m.group(1).strip('"')] = _toml_scalar(m.group(2), n)
    return tables


def _toml_tables(text):
    try:
        import tomllib  # Python 3.11+
    except ImportError:
        return _toml_lite(text)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(str(e)) from None
    tables = {}

    def walk(prefix, d):
        for k, v in d.items():
            if isinstance(v, dict):
                walk(f"{prefix}.{k}" if prefix else k, v)
            else:
                tables.setdefault(prefix, {})[k] = v

    walk("", doc)
    return tables


def parse_toolkit_config(text):
    """config.toml of the NVIDIA container toolkit -> the settings in _TOOLKIT_KEYS that are set
    (commented-out lines are the toolkit's defaults and are left out)."""
    try:
        tables = _toml_tables(text)
    except ValueError as e:
        return err("unparsable", str(e))
    out = {}
    for (table, key), name in _TOOLKIT_KEYS.items():
        if key in tables.get(table, {}):
            out[name] = tables[table][key]
    return out


def parse_ctk_version(text):
    """`nvidia-ctk --version` -> "1.17.8" ("NVIDIA Container Toolkit CLI version 1.17.8")."""
    m = re.search(r"version\s+v?(\d+\.\d+\.\d+(?:[-~][\w.]+)?)", text)
    return m.group(1) if m else err("unparsable", text.strip()[:120])


def probe_toolkit(h, ctk_path):
    out = {"config_path": TOOLKIT_CONFIG}
    text = h.read(TOOLKIT_CONFIG)
    out["config"] = text if is_err(text) else parse_toolkit_config(text)
    if ctk_path is None:
        out["version"] = err("not_found", "nvidia-ctk")
    else:
        r = h.run([ctk_path, "--version"], timeout=10.0)
        if is_err(r):
            out["version"] = r
        elif r[0] != 0:
            out["version"] = err("failed", f"nvidia-ctk --version exited {r[0]}")
        else:
            out["version"] = parse_ctk_version(r[1] + r[2])
    return out


def _unquote(v):
    v = v.strip()
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
        return v[1:-1]
    return re.split(r"\s+#", v, maxsplit=1)[0].strip()


def _cdi_summary(fmt, cdi_version, kind, names, host_paths, nodes, hook_args):
    versions = {}
    for p in host_paths:
        m = _CDI_DRIVER_LIB.match(p.rsplit("/", 1)[-1])
        if m:
            first = versions.get(m.group(1))
            # the example kept for a version: libnvidia-ml when the spec has it
            if first is None or ("libnvidia-ml.so" in p and "libnvidia-ml.so" not in first):
                versions[m.group(1)] = p
    host_driver = None
    for a in hook_args:
        m = _CDI_HOST_DRIVER.search(a)
        if m:
            host_driver = m.group(1)
    return {
        "format": fmt,
        "cdi_version": cdi_version,
        "kind": kind,
        "devices": names[:64],
        "device_count": len(names),
        "device_nodes": sorted(set(nodes))[:64],
        "mount_count": len(host_paths),
        "driver_versions": versions,
        "host_driver_version": host_driver,
        "host_paths": host_paths,
    }


def _cdi_from_json(doc):
    if not isinstance(doc, dict):
        return err("unparsable", "top level is not an object")
    names, paths, nodes, args = [], [], [], []

    def edits(ce):
        if not isinstance(ce, dict):
            return
        for m in ce.get("mounts") or []:
            if isinstance(m, dict) and isinstance(m.get("hostPath"), str):
                paths.append(m["hostPath"])
        for d in ce.get("deviceNodes") or []:
            if isinstance(d, dict) and isinstance(d.get("path"), str):
                nodes.append(d["path"])
        for hk in ce.get("hooks") or []:
            if isinstance(hk, dict):
                args.extend(str(a) for a in hk.get("args") or [])

    edits(doc.get("containerEdits"))
    for d in doc.get("devices") or []:
        if isinstance(d, dict):
            if d.get("name") is not None:
                names.append(str(d["name"]))
            edits(d.get("containerEdits"))
    if not doc.get("kind") or not doc.get("cdiVersion"):
        return err("unparsable", "no kind or no cdiVersion")
    return _cdi_summary(
        "json", str(doc["cdiVersion"]), str(doc["kind"]), names, paths, nodes, args
    )


def parse_cdi_spec(text, name=""):
    """A CDI spec (JSON, or YAML as `nvidia-ctk cdi generate` writes it) -> summary dict.

    JSON is parsed in full. YAML is read line by line, without a YAML library (the probe is
    stdlib only): the top-level `cdiVersion` and `kind`, device `name`s under `devices`, every
    `hostPath`, `path` values under /dev/, and `--host-driver-version=` hook arguments. Anything
    else in the file is not looked at. A file without `kind` and `cdiVersion` is unparsable.
    """
    if name.endswith(".json") or text.lstrip().startswith("{"):
        try:
            return _cdi_from_json(json.loads(text))
        except ValueError as e:
            return err("unparsable", f"{name}: {e}")
    top, section = {}, None
    names, paths, nodes, args = [], [], [], []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#") or line.strip() in ("---", "..."):
            continue
        if "hostPath" in line and not re.match(r"^\s+(?:-\s+)?hostPath\s*:\s*\S", line):
            # flow style ({hostPath: ...}) or a split line: not read here, so not judged either
            return err("unparsable", f"{name}: line {n}: hostPath in a form this reader skips")
        m = re.match(r"^([A-Za-z][\w-]*)\s*:\s*(.*)$", line)
        if m:  # a top-level key (column 0)
            section = m.group(1)
            if m.group(2).strip():
                top[section] = _unquote(m.group(2))
            continue
        m = re.match(r"^\s+(?:-\s+)?([A-Za-z][\w-]*)\s*:\s*(.*)$", line)
        if m:
            key, val = m.group(1), _unquote(m.group(2))
            if key == "hostPath" and val:
                paths.append(val)
            elif key == "path" and val.startswith("/dev/"):
                nodes.append(val)
            elif key == "name" and section == "devices" and val:
                names.append(val)
        if "--host-driver-version=" in line:
            args.append(line)
    if not top.get("kind") or not top.get("cdiVersion"):
        return err("unparsable", f"{name}: no top-level kind or cdiVersion line")
    return _cdi_summary("yaml", top["cdiVersion"], top["kind"], names, paths, nodes, args)


def read_cdi_spec(h, path):
    """One spec file: its summary plus the host files it mounts that do not exist."""
    text = h.read(path, limit=CDI_MAX_BYTES)
    if is_err(text):
        return {"path": path, "parsed": text}
    spec = parse_cdi_spec(text, path)
    if is_err(spec):
        return {"path": path, "parsed": spec}
    host_paths = spec.pop("host_paths")
    missing = [p for p in host_paths if not os.path.lexists(h.path(p))]
    spec.update(
        path=path,
        parsed=True,
        missing_host_paths=missing[:CDI_MAX_LISTED],
        missing_count=len(missing),
    )
    return spec


def probe_cdi_specs(h):
    paths = []
    for d in CDI_DIRS:
        for ext in ("yaml", "json"):
            paths += _glob_rel(h, f"{d}/*.{ext}")
    return [read_cdi_spec(h, p) for p in sorted(set(paths))]


_TORCH = (
    "import json,torch;c=torch.cuda.is_available();print(json.dumps({'version':torch.__version__,"
    "'cuda_version':torch.version.cuda,'cuda_available':c,"
    "'device_count':torch.cuda.device_count() if c else 0}))"
)
_ORT = (
    "import json,onnxruntime as o;p=o.get_available_providers();"
    "print(json.dumps({'version':o.__version__,'providers':p,"
    "'cuda_available':'CUDAExecutionProvider' in p or 'TensorrtExecutionProvider' in p}))"
)


def probe_frameworks(h, python=None, timeout=30.0):
    import importlib.util

    out = []
    for name, code in (("torch", _TORCH), ("onnxruntime", _ORT)):
        try:
            present = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            present = False
        if not present:
            continue
        r = h.run([python or sys.executable, "-c", code], timeout=timeout)
        entry = {"name": name, "python": python or sys.executable}
        if is_err(r):
            entry["result"] = r
        elif r[0] != 0:
            entry["result"] = err("import_failed", (r[2].strip().splitlines() or [""])[-1])
        else:
            try:
                entry["result"] = json.loads(r[1].strip().splitlines()[-1])
            except (ValueError, IndexError) as e:
                entry["result"] = err("unparsable", e)
        out.append(entry)
    return out


# --------------------------------------------------------------------------------------------
# Boot: the kernel the host boots next, its nvidia module, Secure Boot (the pre-reboot gate's
# facts). Pure parsers first, then the readers. Nothing here knows the target driver: the
# controller judges (fleet.domain.reboot_gate).
# --------------------------------------------------------------------------------------------
MAX_KERNELS = 8
"""Installed kernels inspected with modinfo (newest first): each costs one short command."""
SB_EFIVAR = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-e0a9f67e4d5c"
MODPROBE_DIRS = ("/etc/modprobe.d", "/run/modprobe.d", "/usr/lib/modprobe.d", "/lib/modprobe.d")
_KVER_KEY = re.compile(r"(\d+|\D+)")


def kernel_sort_key(version):
    """Natural order of kernel release strings: 6.8.0-100-generic after 6.8.0-49-generic."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in _KVER_KEY.findall(version)]


def parse_grubenv(text):
    """A GRUB environment block (`grub-editenv list` output or the file itself) -> dict.
    Lines are NAME=VALUE; the block is padded with '#'."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#") or "=" not in line:
            continue
        k, v = line.split("=", 1)
        out[k.strip()] = v
    return out


def parse_default_grub(text):
    """GRUB_DEFAULT from /etc/default/grub (a shell fragment); None when not set."""
    value = None
    for line in text.splitlines():
        m = re.match(r"\s*GRUB_DEFAULT=(.*)$", line)
        if m:
            v = m.group(1).strip()
            v = re.sub(r"\s+#.*$", "", v)
            if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
                v = v[1:-1]
            value = v
    return value


def kernel_in_entry(entry, kernels):
    """The installed kernel a GRUB entry (menu id, title, BLS id, path) names, or None.
    Longest version first, so 6.8.0-49-generic is not taken for 6.8.0-4."""
    for k in sorted(kernels, key=len, reverse=True):
        if re.search(r"(?<![0-9A-Za-z.])" + re.escape(k) + r"(?![0-9A-Za-z])", entry):
            return k
    return None


def resolve_next_kernel(kernels, grubenv=None, grub_default=None, grubby=None):
    """(kernel, source, detail) for the next boot, or (err, source, detail).

    EL: `grubby --default-kernel` ("/boot/vmlinuz-KVER") is authoritative when it answered.
    GRUB: GRUB_DEFAULT=saved means grubenv's next_entry (one boot, `grub-reboot`) else
    saved_entry; a numeric 0 (GRUB's default) is the first menu entry, which grub-mkconfig makes
    the newest kernel; a title or id names its kernel. Else the newest installed kernel."""
    if not kernels:
        return err("no_kernels", "no /boot/vmlinuz-* and no /lib/modules/*/vmlinuz"), "none", None
    newest = max(kernels, key=kernel_sort_key)
    if grubby:
        path = grubby.strip().splitlines()[-1].strip() if grubby.strip() else ""
        k = kernel_in_entry(path, kernels)
        if k:
            return k, "grubby", path
        return err("unresolved", f"grubby --default-kernel: {path!r}"), "grubby", path
    if grubenv is not None or grub_default is not None:
        env = grubenv or {}
        dflt = "0" if grub_default in (None, "") else grub_default
        if dflt == "saved":
            entry = env.get("next_entry") or env.get("saved_entry") or "0"
            source = "grubenv next_entry" if env.get("next_entry") else "grubenv saved_entry"
        else:
            entry, source = dflt, "GRUB_DEFAULT"
        if entry.strip() == "0":
            return newest, source, entry
        k = kernel_in_entry(entry, kernels)
        if k:
            return k, source, entry
        return err("unresolved", f"{source} {entry!r} names no installed kernel"), source, entry
    return newest, "newest", None


def parse_modinfo(text):
    """`modinfo -k KVER nvidia` -> the fields the gate reads (None when absent).
    Continuation lines (a multi-line `signature:`) belong to the field above."""
    fields = {}
    last = None
    for line in text.splitlines():
        if line[:1] in (" ", "\t"):
            if last == "sig_key":
                fields[last] += line.strip()
            continue
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*):\s*(.*)$", line)
        if not m:
            continue
        last = m.group(1)
        if last in fields:  # alias, parm: repeated; only single-valued fields are kept
            continue
        fields[last] = m.group(2).strip()
    if "filename" not in fields:
        return err("unparsable", (text.strip().splitlines() or [""])[0][:200])
    lic = fields.get("license")
    flavor = None
    if lic:
        flavor = "open" if "GPL" in lic or "MIT" in lic else "proprietary"
    return {
        "filename": fields.get("filename"),
        "version": fields.get("version") or None,
        "vermagic": fields.get("vermagic") or None,
        "license": lic,
        "flavor": flavor,
        "signer": fields.get("signer") or None,
        "sig_key": fields.get("sig_key") or None,
        "sig_hashalgo": fields.get("sig_hashalgo") or None,
    }


_DKMS_TAIL = r"(?:,\s*(?P<k>[^,\s:]+))?(?:,\s*(?P<a>[^,\s:]+))?:\s*(?P<s>.*)$"
_DKMS_NEW = re.compile(r"^(?P<m>[^/,\s]+)/(?P<v>[^,\s:]+)" + _DKMS_TAIL)
_DKMS_OLD = re.compile(r"^(?P<m>[^/,\s]+),\s*(?P<v>[^,\s:]+)" + _DKMS_TAIL)


def parse_dkms_status(text):
    """`dkms status` (DKMS 3 "nvidia/VER, KVER, ARCH: state" and DKMS 2 "nvidia, VER, KVER,
    ARCH: state") -> list of {module, version, kernel, arch, state}."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        m = _DKMS_NEW.match(line) or _DKMS_OLD.match(line)
        if not m:
            continue
        out.append({"module": m.group("m"), "version": m.group("v"), "kernel": m.group("k"),
                    "arch": m.group("a"), "state": m.group("s").strip()})
    return out


def parse_sb_state(text):
    """`mokutil --sb-state` -> True / False, or err when the answer is not recognised.
    "EFI variables are not supported on this system" is a BIOS boot: no Secure Boot."""
    low = text.lower()
    if "secureboot enabled" in low:
        return True
    if "secureboot disabled" in low or "efi variables are not supported" in low:
        return False
    return err("unparsable", (text.strip().splitlines() or [""])[0][:200])


def parse_sb_efivar(data):
    """The SecureBoot EFI variable's bytes (4 attribute bytes, then 1 value byte)."""
    if len(data) < 5:
        return err("unparsable", f"{len(data)} bytes")
    return data[4] == 1


def _hexid(text):
    """Key ids compared the same way: hex digits only, lower case, no leading zero bytes."""
    h = re.sub(r"[^0-9a-fA-F]", "", text or "").lower()
    return h.lstrip("0") or ("0" if h else "")


def parse_mok_list(text):
    """`mokutil --list-enrolled` (an `openssl x509 -text` dump per key) -> list of
    {sha1, serial, skid, subject_cn}; [] for "MokListRT is empty"."""
    keys = []
    cur = None
    want = None
    for raw in text.splitlines():
        line = raw.strip()
        if re.match(r"^\[key \d+\]$", line):
            cur = {"sha1": None, "serial": None, "skid": None, "subject_cn": None}
            keys.append(cur)
            want = None
            continue
        if cur is None:
            continue
        if want and line:
            cur[want] = _hexid(line.split()[0])
            want = None
            continue
        m = re.match(r"SHA1 Fingerprint:\s*(\S+)", line)
        if m:
            cur["sha1"] = _hexid(m.group(1))
            continue
        m = re.match(r"Serial Number:\s*(.*)$", line)
        if m:
            rest = m.group(1).strip()
            if not rest:
                want = "serial"
            else:
                mm = re.search(r"\(0x([0-9a-fA-F]+)\)", rest)
                cur["serial"] = _hexid(mm.group(1) if mm else rest)
            continue
        if line.startswith("X509v3 Subject Key Identifier"):
            want = "skid"
            continue
        m = re.match(r"Subject:\s*(.*)$", line)
        if m:
            cn = re.search(r"CN\s*=\s*([^,/]+(?:,\s*(?![A-Za-z]+\s*=)[^,/]+)*)", m.group(1))
            cur["subject_cn"] = cn.group(1).strip() if cn else m.group(1).strip()
    return keys


def parse_proc_keys(text):
    """Asymmetric keys the running kernel holds (/proc/keys) -> list of {name, skid}."""
    out = []
    for line in text.splitlines():
        parts = line.split(None, 8)
        if len(parts) < 9 or parts[7] != "asymmetri":
            continue
        m = re.match(r"(.*?):\s+([0-9a-fA-F]{8,})\b", parts[8])
        if m:
            out.append({"name": m.group(1).strip(), "skid": _hexid(m.group(2))})
    return out


def parse_nouveau_blacklist(files, cmdline):
    """(blacklisted, where) from modprobe.d files {path: text} and /proc/cmdline."""
    where = []
    for path in sorted(files):
        for line in files[path].splitlines():
            w = line.split("#", 1)[0].split()
            if (w[:2] == ["blacklist", "nouveau"]
                    or (w[:2] == ["install", "nouveau"] and len(w) > 2
                        and w[2] in ("/bin/false", "/bin/true", "/usr/bin/false"))):
                where.append(path)
                break
    for tok in (cmdline or "").split():
        k, _, v = tok.partition("=")
        if k in ("modprobe.blacklist", "rd.driver.blacklist", "module_blacklist") \
                and "nouveau" in v.split(","):
            where.append("/proc/cmdline")
            break
    return bool(where), where


def _installed_kernels(h):
    import glob

    names = set()
    for p in glob.glob(h.path("/boot/vmlinuz-*")):
        names.add(os.path.basename(p)[len("vmlinuz-"):])
    for p in (glob.glob(h.path("/lib/modules/*/vmlinuz"))
              + glob.glob(h.path("/usr/lib/modules/*/vmlinuz"))):
        names.add(os.path.basename(os.path.dirname(p)))
    return sorted((n for n in names if n and not n.endswith((".old", ".bak"))), key=kernel_sort_key)


def _kernel_module(h, kver):
    r = h.run(["modinfo", "-k", kver, "nvidia"])
    if is_err(r):
        return r
    if r[0] != 0:
        text = (r[2] or r[1]).strip()
        if "not found" in text:
            return None  # no nvidia module for this kernel
        return err("modinfo_failed", f"exit {r[0]}: {text[:200]}")
    return parse_modinfo(r[1])


def _read_bytes(h, p, limit=64):
    try:
        with open(h.path(p), "rb") as f:
            return f.read(limit)
    except FileNotFoundError:
        return err("not_found", p)
    except OSError as e:
        return err("os_error", f"{p}: {e}")


def probe_secure_boot(h):
    """(state, source): mokutil --sb-state, else the EFI variable, else no EFI = off."""
    r = h.run(["mokutil", "--sb-state"])
    if not is_err(r):
        state = parse_sb_state((r[1] or "") + "\n" + (r[2] or ""))
        if not is_err(state):
            return state, "mokutil"
    if not os.path.isdir(h.path("/sys/firmware/efi")):
        return False, "no-efi"
    data = _read_bytes(h, SB_EFIVAR)
    if is_err(data):
        return data, "efivar"
    return parse_sb_efivar(data), "efivar"


def installed_kernels(h):
    """Kernels with an image: /boot/vmlinuz-KVER, or /lib/modules/KVER/vmlinuz (Fedora)."""
    return _installed_kernels(h)


def read_next_kernel(h, kernels):
    """(kernel, source, entry): GRUB's files and grubby, resolved by resolve_next_kernel."""
    import glob

    grubenv = None
    for p in ("/boot/grub/grubenv", "/boot/grub2/grubenv", "/boot/efi/EFI/grub/grubenv"):
        text = h.read(p, 4096)
        if not is_err(text):
            grubenv = parse_grubenv(text)
            break
    grub_default = None
    dg = h.read("/etc/default/grub")
    if not is_err(dg):
        grub_default = parse_default_grub(dg)
    for p in sorted(glob.glob(h.path("/etc/default/grub.d/*.cfg"))):
        t = h.read("/etc/default/grub.d/" + os.path.basename(p))
        if not is_err(t):
            grub_default = parse_default_grub(t) or grub_default
    grubby = None
    if _which("grubby", h):
        r = h.run(["grubby", "--default-kernel"])
        if not is_err(r) and r[0] == 0:
            grubby = r[1]
    return resolve_next_kernel(kernels, grubenv, grub_default, grubby)


def running_kernel(h):
    """The running kernel: /proc/sys/kernel/osrelease (what `uname -r` prints)."""
    text = h.read("/proc/sys/kernel/osrelease", 256)
    return text.strip() if not is_err(text) and text.strip() else os.uname().release


def probe_boot(h, running=None):
    """The pre-reboot gate's facts. Never raises."""
    import glob

    out = {"running_kernel": running or running_kernel(h)}
    kernels = _installed_kernels(h)
    out["installed_kernels"] = kernels
    nxt, source, entry = read_next_kernel(h, kernels)
    out["next_kernel"], out["next_source"], out["next_entry"] = nxt, source, entry
    wanted = set(sorted(kernels, key=kernel_sort_key, reverse=True)[:MAX_KERNELS])
    if isinstance(nxt, str):
        wanted.add(nxt)
    wanted.add(out["running_kernel"])
    out["kernels"] = [
        {"version": k,
         "module": _kernel_module(h, k),
         "headers": os.path.isdir(h.path(f"/lib/modules/{k}/build"))}
        for k in sorted(wanted, key=kernel_sort_key)
    ]
    r = h.run(["dkms", "status"])
    if is_err(r):
        out["dkms"] = r
    elif r[0] != 0:
        out["dkms"] = err("dkms_failed", (r[2] or r[1]).strip()[:200])
    else:
        out["dkms"] = [d for d in parse_dkms_status(r[1]) if "nvidia" in d["module"]]
    out["secure_boot"], out["secure_boot_source"] = probe_secure_boot(h)
    if out["secure_boot"] is False:
        out["enrolled_keys"] = []
    else:
        r = h.run(["mokutil", "--list-enrolled"])
        if is_err(r):
            out["enrolled_keys"] = r
        elif r[0] != 0 and "is empty" not in (r[1] + r[2]):
            out["enrolled_keys"] = err("mokutil_failed", (r[2] or r[1]).strip()[:200])
        else:
            out["enrolled_keys"] = parse_mok_list(r[1])
    keys = h.read("/proc/keys")
    out["kernel_keys"] = keys if is_err(keys) else parse_proc_keys(keys)
    files = {}
    for d in MODPROBE_DIRS:
        for p in sorted(glob.glob(os.path.join(h.path(d), "*.conf"))):
            rel = d + "/" + os.path.basename(p)
            t = h.read(rel, 65536)
            if not is_err(t):
                files[rel] = t
    cmdline = h.read("/proc/cmdline")
    bl, where = parse_nouveau_blacklist(files, "" if is_err(cmdline) else cmdline)
    out["nouveau_blacklisted"], out["nouveau_blacklist"] = bl, where
    return out


def probe(since=None, root="/", kernel_log="auto", frameworks=True):
    """Collect every fact. Never raises for a fact it cannot read."""
    t0 = time.process_time()
    h = Host(root)
    facts = {
        "schema": PROBE_SCHEMA,
        "collected_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    facts["identity"] = probe_identity(h)
    nv, nv_err = probe_nvml()
    source, smi_err = "nvml", None
    if nv is None:
        nv, smi_err = probe_nvidia_smi(h)
        source = "nvidia-smi" if nv is not None else "none"
    facts["source"] = source
    facts["source_errors"] = {k: v for k, v in (("nvml", nv_err), ("nvidia_smi", smi_err)) if v}
    nv = nv or {}
    proc = h.read("/proc/driver/nvidia/version")
    kmod, flavor = (proc, None) if is_err(proc) else parse_proc_version(proc)
    facts["versions"] = {
        "driver_library": nv.get(
            "driver_version", err("not_available", "no NVML and no nvidia-smi")
        ),
        "driver_kernel_module": kmod,
        "kernel_module_flavor": flavor,
        "cuda_driver_api": nv.get(
            "cuda_version", err("not_available", "no NVML and no nvidia-smi")
        ),
        "nvml_library": nv.get("nvml_version"),
        "packages": probe_packages(h),
        "toolkits": probe_toolkits(h),
    }
    facts["gpus"] = nv.get("gpus", [])
    facts["gpu_count"] = nv.get(
        "gpu_count", nv.get("attached_gpus", len(facts["gpus"]) if nv else None)
    )
    facts["pci_gpus"] = probe_pci_gpus(h)
    facts["fabric_manager"] = probe_fabric_manager(h)
    facts["node_tools"] = probe_node_tools(h)
    facts["driver_container"] = probe_driver_container(h)
    pk = facts["versions"]["packages"]
    facts["upgrade_guard"] = probe_upgrade_guard(
        h, {pk.get("manager")} if isinstance(pk, dict) and not is_err(pk) else set())
    bdfs = {g.get("pci_bus_id") for g in facts["gpus"] if isinstance(g.get("pci_bus_id"), str)}
    facts["kernel_log"] = probe_kernel_log(h, since, kernel_log)
    facts["aer"] = probe_aer(h, bdfs)
    facts["device_nodes"] = probe_device_nodes(h)
    facts["container_runtime"] = probe_container_runtime(h)
    cr = facts["container_runtime"]
    cr["toolkit"], cr["cdi"] = probe_toolkit(h, cr["nvidia_ctk"]), probe_cdi_specs(h)
    facts["frameworks"] = probe_frameworks(h) if frameworks else []
    facts["boot"] = probe_boot(h)
    facts["probe_cpu_ms"] = round((time.process_time() - t0) * 1000.0, 1)
    return facts


def main(argv=None):
    import argparse

    ap = argparse.ArgumentParser(description="Print GPU host facts as one JSON document.")
    ap.add_argument("--since", help="kernel-log cursor returned by a previous run")
    ap.add_argument("--root", default="/", help="read files under this root (tests)")
    ap.add_argument(
        "--kernel-log", default="auto", choices=["auto", "journal", "file", "dmesg", "none"]
    )
    ap.add_argument("--no-frameworks", action="store_true", help="skip the torch/onnxruntime check")
    ap.add_argument("--boot-only", action="store_true",
                    help="only the boot section (kernels, modules, Secure Boot), for bundles")
    args = ap.parse_args(argv)
    if args.boot_only:
        facts = {"schema": PROBE_SCHEMA,
                 "collected_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "boot": probe_boot(Host(args.root))}
    else:
        facts = probe(args.since, args.root, args.kernel_log, not args.no_frameworks)
    sys.stdout.write(json.dumps(facts, sort_keys=True, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
