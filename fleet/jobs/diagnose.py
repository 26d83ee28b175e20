"""`fleet diagnose`: read a bundle folder (or collect one from a host) and run the questions.

The reading and the collecting are here and in `fleet.remote.bundle`; the analysis is pure
(`fleet.domain.diagnose`), so a live run and a bundle of the same host give the same verdict.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet.domain.diagnose.bundle import BUNDLE_FILES, evidence
from fleet.domain.diagnose.model import Diagnosis
from fleet.domain.diagnose.questions import diagnose
from fleet.errors import BadInput, CouldNotComplete
from fleet.local_files import create_file, fresh_folder

MAX_FILE_BYTES = 64 << 20
"""A bundle file larger than this is not a capture (a kernel log of a month is ~10 MiB)."""


@dataclass(frozen=True)
class DiagnoseResult:
    target: str
    mode: str  # "bundle" | "live"
    diagnosis: Diagnosis
    seconds: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"target": self.target, "mode": self.mode, "seconds": self.seconds,
                **self.diagnosis.as_dict()}


def read_bundle(folder: Path) -> dict[str, str]:
    """The bundle's known files (name -> text). Unknown files are ignored; a folder with none of
    the known names is bad input (a typo in the path, or the wrong folder)."""
    if not folder.exists():
        raise BadInput.single("no such folder", file=str(folder), field="BUNDLE_DIR")
    if not folder.is_dir():
        raise BadInput.single("not a folder (give the bundle folder, or -i INVENTORY for a "
                              "host)", file=str(folder), field="BUNDLE_DIR")
    files: dict[str, str] = {}
    for name in BUNDLE_FILES:
        p = folder / name
        if not p.is_file():
            continue
        if p.stat().st_size > MAX_FILE_BYTES:
            raise BadInput.single(f"{p.stat().st_size} bytes: larger than a capture "
                                  f"({MAX_FILE_BYTES >> 20} MiB at most)", file=str(p))
        try:
            # kernel logs carry the odd non-UTF-8 byte (firmware strings): keep the rest
            files[name] = p.read_bytes().decode("utf-8", errors="replace")
        except OSError as exc:
            raise BadInput.single(f"cannot read: {exc.strerror}", file=str(p)) from None
    if not files:
        raise BadInput.single("none of the bundle's files is here; expected any of "
                              + ", ".join(BUNDLE_FILES), file=str(folder), field="BUNDLE_DIR")
    return files


def diagnose_files(files: Mapping[str, str], where: str = "") -> Diagnosis:
    return diagnose(evidence(files, where))


def diagnose_bundle(folder: Path) -> DiagnoseResult:
    return DiagnoseResult(str(folder), "bundle", diagnose_files(read_bundle(folder), str(folder)))


def diagnose_live(inventory: Path, host: str, seconds: int = 10) -> DiagnoseResult:
    """Collect HOST's bundle over SSH and diagnose it: the same analysis a bundle gets."""
    from fleet.remote.bundle import collect_host

    start = time.monotonic()
    files = collect_host(inventory, host, seconds)
    return DiagnoseResult(host, "live", diagnose_files(files, host),
                          round(time.monotonic() - start, 1))


def bundle_folder(out: Path, *, create: bool = True) -> Path:
    """The folder a bundle goes to: new, or empty. A folder holding files is refused (an older
    capture left there would be read as this host's, now), and so is a symlink. `create=False`
    checks only (before collecting: a host that cannot be reached leaves no folder)."""
    return fresh_folder(out, field="--output", create=create)


def write_bundle(files: Mapping[str, str], out: Path) -> list[Path]:
    """Write a collected bundle (exactly the files collected, nothing else) into a new or empty
    folder; each file is created, never opened as found (no symlink followed)."""
    bundle_folder(out)
    written = []
    for name, text in sorted(files.items()):
        if name not in BUNDLE_FILES:
            continue
        p = out / name
        try:
            create_file(p, text)
        except OSError as exc:
            raise CouldNotComplete(f"cannot write the bundle: {exc.strerror}",
                                   file=str(p)) from None
        written.append(p)
    return written
