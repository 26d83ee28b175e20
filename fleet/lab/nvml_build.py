"""Compile the fake NVML (`nvml/fakenvml.c`) into `libnvidia-ml.so.1` with gcc."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from fleet.errors import CouldNotComplete

SOURCE = Path(__file__).with_name("nvml") / "fakenvml.c"
SONAME = "libnvidia-ml.so.1"
CFLAGS = [
    "-O2",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-fPIC",
    "-shared",
    "-fvisibility=hidden",
    f"-Wl,-soname,{SONAME}",
]


def source_hash() -> str:
    return hashlib.sha256(SOURCE.read_bytes() + " ".join(CFLAGS).encode()).hexdigest()[:12]


def build(out_dir: Path) -> Path:
    """Build `out_dir/libnvidia-ml.so.1` unless an identical build is already there."""
    cc = os.environ.get("CC", "gcc")
    if shutil.which(cc) is None:
        raise CouldNotComplete(f"no C compiler ({cc}): apt-get install -y gcc libc6-dev")
    out_dir.mkdir(parents=True, exist_ok=True)
    lib = out_dir / SONAME
    stamp = out_dir / f".{SONAME}.src"
    if lib.is_file() and stamp.is_file() and stamp.read_text() == source_hash():
        return lib
    tmp = out_dir / f".{SONAME}.tmp"
    cp = subprocess.run(
        [cc, *CFLAGS, "-o", str(tmp), str(SOURCE), "-lpthread"],
        capture_output=True,
        text=True,
        check=False,
    )
    if cp.returncode != 0:
        raise CouldNotComplete(f"compiling the fake NVML failed:\n{cp.stderr[-3000:]}")
    os.replace(tmp, lib)
    stamp.write_text(source_hash())
    return lib


def exported_symbols(lib: Path) -> set[str]:
    """The dynamic symbols the library exports (for tests and `fleet lab status`)."""
    cp = subprocess.run(
        ["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True
    )
    return {ln.split()[-1] for ln in cp.stdout.splitlines() if " T " in ln}
