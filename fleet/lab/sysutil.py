"""Small system helpers: commands, root check, mounts. The only place the lab shells out."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from fleet.errors import BadInput, CouldNotComplete

REQUIRED_TOOLS = {
    "mmdebstrap": "mmdebstrap",
    "gcc": "gcc",
    "dpkg-deb": "dpkg",
    "dpkg-scanpackages": "dpkg-dev",
    "apt-ftparchive": "apt-utils",
    "zstd": "zstd",
    "ip": "iproute2",
    "unshare": "util-linux",
    "ssh-keygen": "openssh-client",
}


def is_root() -> bool:
    return os.geteuid() == 0


def require_root(what: str = "the lab") -> None:
    if not is_root():
        raise BadInput.single(
            f"{what} needs root: it mounts overlays, creates network/PID/mount namespaces and "
            "starts sshd hosts. Run it as root, e.g. `sudo .venv/bin/fleet lab up`, or use the "
            "simulated fleet (no root) instead."
        )


def missing_tools() -> list[str]:
    """Debian packages that provide tools the lab needs but this machine lacks."""
    return sorted({pkg for tool, pkg in REQUIRED_TOOLS.items() if shutil.which(tool) is None})


def require_tools() -> None:
    missing = missing_tools()
    if missing:
        raise BadInput.single(
            "the lab needs these Debian packages: "
            + " ".join(missing)
            + f". Install them: apt-get install -y --no-install-recommends {' '.join(missing)}"
        )


def run(
    cmd: Sequence[str | Path],
    *,
    check: bool = True,
    input: bytes | None = None,
    timeout: float | None = 600,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run a command (never through a shell); a failure raises CouldNotComplete with its stderr."""
    args = [str(c) for c in cmd]
    try:
        cp = subprocess.run(
            args, input=input, capture_output=True, timeout=timeout, env=env, cwd=cwd, check=False
        )
    except FileNotFoundError as exc:
        raise CouldNotComplete(f"command not found: {args[0]}") from exc
    if check and cp.returncode != 0:
        err = cp.stderr.decode(errors="replace").strip()[-2000:]
        raise CouldNotComplete(f"`{' '.join(args)}` failed ({cp.returncode}): {err}")
    return cp


def mounts_under(prefix: Path) -> list[str]:
    """Mount points at or below `prefix` in this mount namespace, deepest first."""
    pre = str(prefix).rstrip("/")
    out: list[str] = []
    with open("/proc/self/mounts") as f:
        for line in f:
            mp = line.split()[1].replace("\\040", " ")
            if mp == pre or mp.startswith(pre + "/"):
                out.append(mp)
    return sorted(out, key=lambda m: (m.count("/"), m), reverse=True)


def umount_all(prefix: Path) -> None:
    for mp in mounts_under(prefix):
        if run(["umount", mp], check=False).returncode != 0:
            run(["umount", "-l", mp], check=False)


def atomic_write(path: Path, data: str | bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    if isinstance(data, str):
        data = data.encode()
    tmp.write_bytes(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
