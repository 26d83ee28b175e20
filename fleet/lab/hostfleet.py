"""`fleet` inside the lab hosts: the controller's fleet package and its dependencies, bound
read-only into each host at the same paths (fleet.lab.slurm's services script does the binds at
every boot), and `/usr/local/bin/fleet`, which runs them with the host's own python3. Slurm's
HealthCheckProgram uses it for `fleet node-check`; `ssh root@HOST fleet --help` works too."""

from __future__ import annotations

import shlex
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path

from fleet.lab.sysutil import atomic_write

FLEET_WRAPPER = "/usr/local/bin/fleet"


def fleet_wrapper(pythonpath: Sequence[Path]) -> str:
    """/usr/local/bin/fleet in the host: the host's python3 on the controller's fleet."""
    pp = ":".join(str(p) for p in pythonpath)
    return (
        "#!/bin/sh\n"
        "# fleet lab: the controller's fleet (bound read-only into this host) on this host's "
        "python3\n"
        f"PYTHONPATH={shlex.quote(pp)}${{PYTHONPATH:+:$PYTHONPATH}} exec /usr/bin/python3 -m fleet "
        '"$@"\n'
    )


def fleet_dirs() -> list[Path]:
    """Directories that hold the controller's `fleet` and its dependencies: the folder above the
    fleet package (the source tree when installed editable) and this interpreter's
    site-packages. Nested ones are dropped (one bind covers them)."""
    import fleet

    cands = [Path(fleet.__file__).resolve().parent.parent]
    for key in ("purelib", "platlib"):
        cands.append(Path(sysconfig.get_paths()[key]).resolve())
    out: list[Path] = []
    for c in cands:
        if c not in out and c.is_dir():
            out.append(c)
    return [c for c in out if not any(o != c and o in c.parents for o in out)]


def fleet_pythonpath() -> list[Path]:
    """The PYTHONPATH for the host's python3: the fleet source folder, then site-packages."""
    import fleet

    src = Path(fleet.__file__).resolve().parent.parent
    paths = [src]
    for key in ("purelib", "platlib"):
        p = Path(sysconfig.get_paths()[key]).resolve()
        if p not in paths:
            paths.append(p)
    return paths


_SYSTEM_DIRS = ("/usr", "/etc", "/lib", "/bin", "/sbin", "/var", "/boot", "/dev", "/proc", "/sys")


def fleet_runs_in_hosts() -> bool:
    """The hosts run Debian 12's python3 (3.11): compiled dependencies need the same ABI; and a
    fleet installed into a system folder would hide the host's own files if bound over them."""
    return sys.version_info[:2] == (3, 11) and not any(
        str(d) == "/" or str(d) == s or str(d).startswith(s + "/")
        for d in fleet_dirs()
        for s in _SYSTEM_DIRS
    )


def write_wrapper(layer: Path) -> None:
    """Install the wrapper into the lab layer, when fleet can run in the hosts."""
    if fleet_runs_in_hosts():
        atomic_write(layer / FLEET_WRAPPER.lstrip("/"), fleet_wrapper(fleet_pythonpath()), 0o755)
