"""`nvidia-smi dmon`, `nvidia-smi pmon` and `nvidia-smi topo -m` -> samples and topology.

dmon and pmon print a `#` header naming their columns (which columns depends on `-s` and on the
driver), a `#` units line, then one row per GPU (or process) per interval; the header repeats.
Columns are read by name, so any `-s` selection and any driver's column set parses; `-` is "not
reported". A row that does not fit its header is a located error.
"""

from __future__ import annotations

import re

from fleet.domain.diagnose.model import DmonSample, PmonSample, TopoGpu
from fleet.errors import BadInput

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TEXT_COLS = {"date", "time", "type", "command"}


def _header(line: str) -> list[str] | None:
    """Column names of a `# gpu ...` header line (None for units lines and comments)."""
    cols = line.lstrip("#").split()
    low = [c.lower() for c in cols]
    if "gpu" not in low or "idx" in low or low[:1] == ["source:"]:
        return None
    return low


def _number(tok: str, name: str, lineno: int, col: str) -> float | None:
    if tok in ("-", "N/A", "n/a"):
        return None
    try:
        return float(tok)
    except ValueError:
        raise BadInput.single(f"{tok!r} is not a number", file=name, line=lineno,
                              field=col) from None


def _rows(text: str, name: str, what: str) -> list[tuple[int, dict[str, str]]]:
    cols: list[str] | None = None
    rows: list[tuple[int, dict[str, str]]] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = _ANSI.sub("", raw).strip()
        if not line:
            continue
        if line.startswith("#"):
            cols = _header(line) or cols
            continue
        if cols is None:
            raise BadInput.single(f"data before any `# gpu ...` header line: not {what} output",
                                  file=name, line=lineno, field="header")
        toks = line.split()
        if cols[-1] == "command" and len(toks) > len(cols):
            toks = toks[: len(cols) - 1] + [" ".join(toks[len(cols) - 1:])]
        if len(toks) != len(cols):
            raise BadInput.single(f"{len(toks)} values for {len(cols)} columns "
                                  f"({' '.join(cols)})", file=name, line=lineno, field="row")
        rows.append((lineno, dict(zip(cols, toks, strict=True))))
    return rows


def parse_dmon(text: str, name: str = "dmon.txt") -> list[DmonSample]:
    """`nvidia-smi dmon [-s pucm] -c N`: one sample per GPU per interval."""
    out = []
    for lineno, row in _rows(text, name, "`nvidia-smi dmon`"):
        gpu = _number(row["gpu"], name, lineno, "gpu")
        if gpu is None:
            raise BadInput.single("gpu index missing", file=name, line=lineno, field="gpu")
        values = {}
        for col, tok in row.items():
            if col == "gpu" or col in _TEXT_COLS:
                continue
            v = _number(tok, name, lineno, col)
            if v is not None:
                values[col] = v
        out.append(DmonSample(int(gpu), values))
    return out


def parse_pmon(text: str, name: str = "pmon.txt") -> list[PmonSample]:
    """`nvidia-smi pmon [-s um] -c N`: the GPU processes of each pass (rows with pid `-` are
    GPUs without a process). Passes are told apart by a (gpu, pid) pair seen again, or by the
    GPU index going back down."""
    out: list[PmonSample] = []
    sample, last_gpu = 0, -1
    seen: set[tuple[int, float | None]] = set()
    for lineno, row in _rows(text, name, "`nvidia-smi pmon`"):
        gpu_f = _number(row["gpu"], name, lineno, "gpu")
        if gpu_f is None:
            raise BadInput.single("gpu index missing", file=name, line=lineno, field="gpu")
        gpu = int(gpu_f)
        pid_f = _number(row.get("pid", "-"), name, lineno, "pid")
        key = (gpu, pid_f)
        if key in seen or gpu < last_gpu:
            sample, seen = sample + 1, set()
        seen.add(key)
        last_gpu = gpu
        if pid_f is None:
            continue
        out.append(PmonSample(
            gpu=gpu, pid=int(pid_f), kind=row.get("type", "-"), command=row.get("command", ""),
            sm=_number(row.get("sm", "-"), name, lineno, "sm"),
            mem=_number(row.get("mem", "-"), name, lineno, "mem"),
            fb_mib=_number(row.get("fb", "-"), name, lineno, "fb"), sample=sample,
        ))
    return out


def cpu_list(text: str) -> frozenset[int] | None:
    """`0-55,112-167` -> the CPU numbers; None for `N/A`."""
    text = text.strip()
    if not text or text.upper() == "N/A":
        return None
    cpus: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(part)
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(cpus)


def _split(line: str) -> list[str]:
    parts = line.split("\t") if "\t" in line else re.split(r"\s{2,}", line)
    return [p.strip() for p in parts if p.strip()]


def parse_topo(text: str, name: str = "topo.txt") -> list[TopoGpu]:
    """`nvidia-smi topo -m`: per GPU its CPU and NUMA affinity and its link to each device."""
    header: list[str] | None = None
    out = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = _ANSI.sub("", raw).rstrip()
        if header is None:
            cols = _split(line)
            if cols and cols[0] == "GPU0":
                header = cols
            continue
        if not line.strip() or line.startswith("Legend"):
            break
        m = re.match(r"^(GPU(\d+))\s", line)
        if not m:
            continue  # NIC rows, MIG device rows
        toks = line.split()[1:]
        links = dict(zip(header, toks, strict=False))
        affinity = next((i for i, c in enumerate(header) if c.lower() == "cpu affinity"), None)
        numa_col = next((i for i, c in enumerate(header) if c.lower() == "numa affinity"), None)
        cpus, numa = None, None
        try:
            if affinity is not None and affinity < len(toks):
                cpus = cpu_list(toks[affinity])
            if numa_col is not None and numa_col < len(toks) and toks[numa_col].isdigit():
                numa = int(toks[numa_col])
        except ValueError as exc:
            raise BadInput.single(f"CPU affinity {exc} is not a CPU list", file=name,
                                  line=lineno, field="CPU Affinity") from None
        out.append(TopoGpu(int(m.group(2)), cpus, numa,
                           {k: v for k, v in links.items() if re.match(r"^(GPU|NIC)\d+$", k)}))
    if header is None:
        raise BadInput.single("no `GPU0 ...` header line: not `nvidia-smi topo -m` output",
                              file=name, line=1, field="header")
    return out
