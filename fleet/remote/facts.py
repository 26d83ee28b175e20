"""pyinfra facts about NVIDIA packaging: each a command plus a pure parser.

The parsers are plain functions (`parse_*`) so fixture tests exercise them without pyinfra.
"""

from __future__ import annotations

import base64
import binascii
import re
import shlex
from collections.abc import Iterable

from pyinfra.api.facts import FactBase

from fleet.domain.driver_owner import DriverContainer, parse_driver_root
from fleet.domain.kernel_hold import DEB_KERNEL_GLOBS, RPM_KERNEL_PACKAGES

# Families whose installed versions a pin can change or must remove.
PACKAGE_GLOBS = (
    "nvidia-*",
    "libnvidia-*",
    "cuda-*",
    "datacenter-gpu-manager*",
    "cudnn*",
    "libcudnn*",
    "tensorrt*",
    "libnvinfer*",
)


def parse_os_family(lines: Iterable[str]) -> str | None:
    words = " ".join(lines).lower().split()
    if any(w in {"debian", "ubuntu"} for w in words):
        return "debian"
    if any(w in {"rhel", "fedora", "centos", "rocky", "almalinux"} for w in words):
        return "rhel"
    return None


class OsFamily(FactBase[str | None]):
    """`debian` or `rhel`, from /etc/os-release's ID and ID_LIKE."""

    def command(self) -> str:
        return '. /etc/os-release && echo "$ID $ID_LIKE"'

    def process(self, output: list[str]) -> str | None:
        return parse_os_family(output)


def parse_dpkg_installed(lines: Iterable[str]) -> dict[str, str]:
    """`name<TAB>version<TAB>status-abbrev` rows; only installed packages count (ii, hi)."""
    out: dict[str, str] = {}
    for line in lines:
        parts = line.rstrip("\n").split("\t")
        if len(parts) >= 3 and parts[2][:2] in {"ii", "hi"}:
            out[parts[0]] = parts[1]
    return out


class DebNvidiaPackages(FactBase[dict[str, str]]):
    """Installed NVIDIA/CUDA packages and their distro versions (dpkg database)."""

    def requires_command(self) -> str:
        return "dpkg-query"

    def command(self) -> str:
        globs = " ".join(shlex.quote(g) for g in PACKAGE_GLOBS)
        return (
            "dpkg-query -W -f='${Package}\\t${Version}\\t${db:Status-Abbrev}\\n' "
            f"{globs} 2>/dev/null || true"
        )

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def process(self, output: list[str]) -> dict[str, str]:
        return parse_dpkg_installed(output)


def parse_dpkg_residual(lines: Iterable[str]) -> set[str]:
    """Names of packages removed with their configuration left (`rc`): invisible to apt."""
    out: set[str] = set()
    for line in lines:
        parts = line.rstrip("\n").split("\t")
        if len(parts) >= 3 and parts[2][:2] == "rc":
            out.add(parts[0])
    return out


class DebResidualPackages(DebNvidiaPackages):
    """NVIDIA/CUDA packages in dpkg's `rc` state (the same query, the other rows)."""

    def process(self, output: list[str]) -> dict[str, str]:
        return dict.fromkeys(parse_dpkg_residual(output), "")


def parse_names(lines: Iterable[str]) -> set[str]:
    return {line.strip() for line in lines if line.strip()}


class AptHeldPackages(FactBase[set[str]]):
    def requires_command(self) -> str:
        return "apt-mark"

    def command(self) -> str:
        return "apt-mark showhold"

    @staticmethod
    def default() -> set[str]:
        return set()

    def process(self, output: list[str]) -> set[str]:
        return parse_names(output)


class DebKernelPackages(DebNvidiaPackages):
    """Installed kernel packages (`linux-image-*`, `linux-headers-*`: meta and versioned), for a
    pool's kernel hold (`fleet.domain.kernel_hold` checks each name)."""

    def command(self) -> str:
        globs = " ".join(shlex.quote(g) for g in DEB_KERNEL_GLOBS)
        return (
            "dpkg-query -W -f='${Package}\\t${Version}\\t${db:Status-Abbrev}\\n' "
            f"{globs} 2>/dev/null || true"
        )


def parse_rpm_installed(lines: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in lines:
        parts = line.strip().split("\t")
        if len(parts) == 2 and not parts[0].startswith("package "):
            out[parts[0]] = parts[1]
    return out


class RpmNvidiaPackages(FactBase[dict[str, str]]):
    def requires_command(self) -> str:
        return "rpm"

    def command(self) -> str:
        globs = " ".join(shlex.quote(g) for g in PACKAGE_GLOBS)
        fmt = "'%{NAME}\\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n'"
        return f"rpm -qa --queryformat {fmt} {globs} || true"

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def process(self, output: list[str]) -> dict[str, str]:
        return parse_rpm_installed(output)


class RpmKernelPackages(RpmNvidiaPackages):
    """The installed EL kernel packages a kernel hold covers (`kernel`, `kernel-core`...)."""

    def command(self) -> str:
        names = " ".join(shlex.quote(n) for n in RPM_KERNEL_PACKAGES)
        fmt = "'%{NAME}\\t%{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n'"
        return f"rpm -q --queryformat {fmt} {names} || true"


def parse_versionlock(lines: Iterable[str]) -> set[str]:
    """Names from `dnf versionlock list` rows such as `nvidia-driver-3:550.54.15-1.el9.*`."""
    names: set[str] = set()
    for line in lines:
        entry = line.strip()
        if not entry or entry.startswith(("Last metadata", "Updating", "#")):
            continue
        head = entry.split(":", 1)[0] if ":" in entry else entry
        # name-EPOCH:... or name-VERSION-RELEASE: strip the trailing "-epoch" or "-version"
        names.add(head.rsplit("-", 1)[0] if ":" in entry else head.rsplit("-", 2)[0])
    return names


class DnfVersionLocks(FactBase[set[str]]):
    def requires_command(self) -> str:
        return "dnf"

    def command(self) -> str:
        return "dnf -q versionlock list 2>/dev/null || true"

    @staticmethod
    def default() -> set[str]:
        return set()

    def process(self, output: list[str]) -> set[str]:
        return parse_versionlock(output)


def parse_driver_streams(lines: Iterable[str]) -> dict[str, bool]:
    """`nvidia-driver` module streams -> enabled, from `dnf module list nvidia-driver` rows such
    as `nvidia-driver 580-open [d][e] default  ...`; empty when the repositories have none."""
    out: dict[str, bool] = {}
    for line in lines:
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nvidia-driver":
            flags = "".join(p for p in parts[2:4] if p.startswith("["))
            out[parts[1]] = "[e]" in flags
    return out


class DnfDriverStreams(FactBase[dict[str, bool]]):
    """The `nvidia-driver` module streams a dnf host's repositories offer, and which is enabled."""

    def requires_command(self) -> str:
        return "dnf"

    def command(self) -> str:
        return "dnf -q module list nvidia-driver 2>/dev/null || true"

    @staticmethod
    def default() -> dict[str, bool]:
        return {}

    def process(self, output: list[str]) -> dict[str, bool]:
        return parse_driver_streams(output)


def stream_args(wanted: str | None, streams: dict[str, bool]) -> dict[str, str | None]:
    """`plan_pin`'s stream arguments: the release's stream when the host's repositories offer
    it (NVIDIA's EL9 repository does; a repository without modules leaves versionlock alone
    to hold the driver), and the stream enabled now."""
    enabled = next((s for s, on in streams.items() if on), None)
    return {"module_stream": wanted if wanted in streams else None, "enabled_stream": enabled}


def parse_file_contents(lines: Iterable[str]) -> dict[str, str | None]:
    """`path base64` or `path -` per line, so exact bytes survive the trip."""
    out: dict[str, str | None] = {}
    for line in lines:
        path, _, payload = line.strip().partition(" ")
        if not path:
            continue
        if payload == "-":
            out[path] = None
            continue
        try:
            out[path] = base64.b64decode(payload).decode()
        except (binascii.Error, UnicodeDecodeError):
            out[path] = None
    return out


class FileContents(FactBase[dict[str, str | None]]):
    """The exact content of a few small managed files (None when absent)."""

    def command(self, paths: list[str]) -> str:
        quoted = " ".join(shlex.quote(p) for p in paths)
        return (
            f'for f in {quoted}; do if [ -f "$f" ]; then '
            'printf "%s %s\\n" "$f" "$(base64 < "$f" | tr -d "\\n")"; '
            'else printf "%s -\\n" "$f"; fi; done'
        )

    @staticmethod
    def default() -> dict[str, str | None]:
        return {}

    def process(self, output: list[str]) -> dict[str, str | None]:
        return parse_file_contents(output)


class PresentPaths(FactBase[list[str]]):
    """Which of a few paths exist, a dangling symlink included (`[ -f ]` misses one)."""

    def command(self, paths: list[str]) -> str:
        quoted = " ".join(shlex.quote(p) for p in paths)
        return f'for p in {quoted}; do if [ -e "$p" ] || [ -L "$p" ]; then echo "$p"; fi; done'

    @staticmethod
    def default() -> list[str]:
        return []

    def process(self, output: list[str]) -> list[str]:
        return [line.strip() for line in output if line.strip()]


_MODULE_VERSION = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)")


def parse_module_version(lines: Iterable[str]) -> str | None:
    """The loaded module's version from /proc/driver/nvidia/version; None when not loaded."""
    for line in lines:
        m = _MODULE_VERSION.search(line)
        if m:
            return m.group(1)
    return None


class LoadedModuleVersion(FactBase[str | None]):
    """The NVIDIA kernel module running now (it changes only at reboot)."""

    def command(self) -> str:
        return "cat /proc/driver/nvidia/version 2>/dev/null || true"

    def process(self, output: list[str]) -> str | None:
        return parse_module_version(output)


_DRIVER_ROOT_SH = r"""d=/run/nvidia/driver; v=/run/nvidia/validations
if [ -L "$d" ] && [ "$(readlink -f "$d")" = / ]; then echo "root host-root"
elif [ -d "$d" ]; then
  if l=$(ls -A "$d" 2>/dev/null); then
    if [ -n "$l" ]; then echo "root populated"
      printf '%s\n' "$l" | head -n 64 | cut -c1-100 | sed 's/^/entry /'
    else echo "root empty"; fi
  else echo "unreadable root"; fi
elif [ -e "$d" ] || [ -L "$d" ]; then echo "root not-a-directory"
else echo "root absent"; fi
for m in .driver-ctr-ready host-driver-ready driver-ready; do
  if [ -e "$v/$m" ]; then echo "mark $m"; fi; done
if [ -f "$v/driver-ready" ]; then
  if c=$(head -c 4096 "$v/driver-ready" 2>/dev/null); then printf '%s\n' "$c" | sed 's/^/ready /'
  else echo "unreadable driver-ready"; fi
fi
true"""


class DriverRoot(FactBase[DriverContainer]):
    """/run/nvidia/driver and the GPU Operator's validation marks: is the driver a container
    (parsed by `fleet.domain.driver_owner.parse_driver_root`)."""

    def command(self) -> str:
        return _DRIVER_ROOT_SH

    def process(self, output: list[str]) -> DriverContainer:
        return parse_driver_root(output)
