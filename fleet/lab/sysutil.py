"""Small system helpers: commands, root check, mounts. The only place the lab shells out."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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


def require_free_ports(ports: Sequence[tuple[int, str]], service: str,
                       host: str = "127.0.0.1") -> None:
    """Refuse to start a lab service when something (another lab, a service of the machine)
    holds one of its fixed ports: `ports` is (port, what the lab runs there)."""
    for port, what in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError as exc:
                raise CouldNotComplete(
                    f"port {port} (the lab's {what}) is in use ({exc.strerror}): is another lab "
                    f"with {service} up?") from None


def mount_overlay(lower: str | Path, upper: Path, work: Path, target: Path) -> None:
    """An overlay of `upper` over `lower` (one directory or several joined with `:`)."""
    run(["mount", "-t", "overlay", "overlay", "-o",
         f"lowerdir={lower},upperdir={upper},workdir={work}", target])


@contextmanager
def overlay_build(lower: Path, upper: Path, scratch: Path) -> Iterator[Path]:
    """A throwaway merged view that writes into `upper` (a shared layer being built): the mount
    point is `scratch`-build, its workdir `scratch`-work; both are gone afterwards."""
    build, work = Path(f"{scratch}-build"), Path(f"{scratch}-work")
    build.mkdir(exist_ok=True)
    work.mkdir(exist_ok=True)
    mount_overlay(lower, upper, work, build)
    try:
        yield build
    finally:
        run(["umount", build], check=False)
        shutil.rmtree(work, ignore_errors=True)
        build.rmdir()
