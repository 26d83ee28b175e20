"""The lab fault `operator-driver`: a host that looks as if the GPU Operator ran its driver in a
container. The container's root is mounted at /run/nvidia/driver, its startup probe wrote
/run/nvidia/validations/.driver-ctr-ready and the operator's validator driver-ready with
IS_HOST_DRIVER=false (see fleet.domain.driver_owner). /run is the host's own tmpfs (one per
boot, as on a real host), so the files are written inside the host's mount namespace; a reboot
or `fleet lab reset` removes them. The host's packages and loaded module stay as they were: what
fleet must decide from is the operator's marks."""

from __future__ import annotations

from pathlib import Path

from fleet.lab.sysutil import run

READY = ("IS_HOST_DRIVER=false\nNVIDIA_DRIVER_ROOT=/run/nvidia/driver\n"
         "DRIVER_ROOT_CTR_PATH=/driver-root\nNVIDIA_DEV_ROOT=/run/nvidia/driver\n"
         "DEV_ROOT_CTR_PATH=/driver-root\n")

_INSTALL = r"""set -eu
r=$1/run/nvidia
mkdir -p "$r/driver/usr/bin" "$r/driver/usr/lib/x86_64-linux-gnu" "$r/driver/lib/modules" \
  "$r/validations"
printf '#!/bin/sh\necho "NVIDIA-SMI (the GPU Operator driver container, fleet lab)"\n' \
  > "$r/driver/usr/bin/nvidia-smi"
chmod 0755 "$r/driver/usr/bin/nvidia-smi"
printf '%s' "$2" > "$r/validations/driver-ready"
: > "$r/validations/.driver-ctr-ready"
: > "$r/validations/toolkit-ready"
"""


def install(root: Path, pid: int | None) -> None:
    """Write the operator's driver root and marks into the running host (`pid`: its PID 1)."""
    if pid is None:
        raise RuntimeError("operator-driver: the host is not running")
    run(["nsenter", "-t", str(pid), "-m", "sh", "-c", _INSTALL, "sh", str(root), READY])


def remove(root: Path, pid: int | None) -> None:
    """Take them away again (`fleet lab reset`); nothing to do on a host that is down."""
    if pid is not None:
        run(["nsenter", "-t", str(pid), "-m", "rm", "-rf", f"{root}/run/nvidia"], check=False)
