"""pyinfra operations: thin wrappers that read facts, ask the pure planner, yield its steps.

The pin files are written by a shell command of their own, not pyinfra's `files.put`: under
`_sudo` that uploads as the login user to `/tmp/pyinfra-<sha1(dest)>`, the same name on every
host and every run, which any local user can pre-create (every apply then fails) or own (and
swap the content before root copies it into apt's configuration). `write_file_command` stages
the content in a private folder root makes with `mktemp -d`, inside the command sudo runs.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

from pyinfra.api.operation import operation
from pyinfra.context import host

from fleet.domain.kernel_hold import KERNEL_HOLD_PATH, with_kernel_hold
from fleet.domain.pinning import PREFERENCES_PATH, UNATTENDED_PATH, PinPlan, plan_pin
from fleet.remote.facts import (
    AptHeldPackages,
    DebKernelPackages,
    DebNvidiaPackages,
    DebResidualPackages,
    DnfDriverStreams,
    DnfVersionLocks,
    FileContents,
    LoadedModuleVersion,
    OsFamily,
    PresentPaths,
    RpmKernelPackages,
    RpmNvidiaPackages,
    stream_args,
)

STAGING = "/tmp/fleet-pin.XXXXXXXXXX"
"""`mktemp -d`'s template: a new folder (0700, owned by the user sudo runs as) under the sticky
/tmp, named explicitly so that a TMPDIR carried through sudo cannot move it."""


def write_file_command(path: str, content: str, mode: str = "644") -> str:
    """A shell command that makes `path` hold exactly `content` (mode `mode`), run as one
    command (so as root under `_sudo`): the content is written into a private folder made by
    `mktemp -d` and installed from there; the folder is removed whatever happens."""
    if not posixpath.isabs(path) or not mode.isdigit():
        raise ValueError(f"not an absolute path and an octal mode: {path!r} {mode!r}")
    dest = shlex.quote(path)
    folder = shlex.quote(posixpath.dirname(path))
    return (f"d=$(mktemp -d {STAGING}) && trap 'rm -rf \"$d\"' EXIT && "
            f"printf '%s' {shlex.quote(content)} > \"$d/f\" && "
            f"{{ [ -d {folder} ] || (umask 022 && mkdir -p {folder}); }} && "
            f"install -m {mode} \"$d/f\" {dest}")


@dataclass(frozen=True)
class Pkg:
    name: str
    version: str
    component: str


_UNREAD = object()


def _record(value: object) -> str | None:
    """The kernel hold record's content (None: absent); an answer without it is unread, and an
    unread record holds or releases nothing (ValueError: the host's pin fails)."""
    if value is _UNREAD:
        raise ValueError(f"could not read {KERNEL_HOLD_PATH} (the kernel hold record)")
    return value if isinstance(value, str) else None


def current_plan(packages: Sequence[tuple[str, str, str]], stream: str | None = None,
                 kernel_hold: bool = False) -> PinPlan:
    """The plan for the host pyinfra is processing, from its live facts; `stream` is the
    release's `nvidia-driver` module stream (dnf hosts); `kernel_hold` whether the host's pool
    holds the kernel packages (`fleet.domain.kernel_hold`)."""
    wanted = [Pkg(*p) for p in packages]
    family = host.get_fact(OsFamily)
    module = host.get_fact(LoadedModuleVersion)
    if family == "debian":
        installed = host.get_fact(DebNvidiaPackages)
        held = host.get_fact(AptHeldPackages)
        facts: dict[str, str | None] = host.get_fact(
            FileContents, paths=[PREFERENCES_PATH, UNATTENDED_PATH, KERNEL_HOLD_PATH])
        contents = dict(facts)  # a copy: pyinfra keeps the fact's own dict
        record = _record(contents.pop(KERNEL_HOLD_PATH, _UNREAD))
        residual = host.get_fact(DebResidualPackages)
        plan = plan_pin("debian", wanted, installed, held, contents, module, residual=residual)
        kernels: dict[str, str] = host.get_fact(DebKernelPackages)
        return with_kernel_hold(plan, hold=kernel_hold, kernels=kernels, record=record)
    if family == "rhel":
        installed_rpm: dict[str, str] = host.get_fact(RpmNvidiaPackages)
        locks: set[str] = host.get_fact(DnfVersionLocks)
        streams: dict[str, bool] = host.get_fact(DnfDriverStreams)
        args = stream_args(stream, streams)
        plan = plan_pin("rhel", wanted, installed_rpm, locks, {}, module,
                        module_stream=args["module_stream"],
                        enabled_stream=args["enabled_stream"])
        answer: dict[str, str | None] = host.get_fact(FileContents, paths=[KERNEL_HOLD_PATH])
        record = _record(answer.get(KERNEL_HOLD_PATH, _UNREAD))
        rpm_kernels: dict[str, str] = host.get_fact(RpmKernelPackages)
        return with_kernel_hold(plan, hold=kernel_hold, kernels=rpm_kernels, record=record)
    raise ValueError(f"unsupported OS family on {host.name}: {family!r}")


@operation()
def pin_release(release: str, packages: list[tuple[str, str, str]],
                stream: str | None = None, kernel_hold: bool = False
                ) -> Generator[Any, None, None]:
    """
    Put exactly these packages on the host, pinned and held; remove other driver branches.

    + release: the matrix release name (for messages)
    + packages: ``(name, upstream_version, component)`` triples from ``Release.packages()``
    + stream: the release's ``nvidia-driver`` dnf module stream (``580-open``); dnf hosts only
    + kernel_hold: hold the installed kernel packages (the pool's ``kernel.hold``); False
      releases the ones fleet held
    """
    plan = current_plan(packages, stream, kernel_hold)
    if not plan.changed:
        host.noop(f"release {release} already pinned")
        return
    for step in plan.steps:
        if step.command is not None:
            yield step.command
        elif step.path is not None and step.content is not None:
            yield write_file_command(step.path, step.content)


@operation(is_idempotent=False)
def node_commands(commands: list[list[str]], files: dict[str, str] | None = None,
                  remove_boot: bool = False) -> Generator[str, None, None]:
    """
    Run node-state commands (``nvidia-smi -i 0 -pl 700``...), in order, stopping at the
    first that fails; then write and enable the boot unit where it differs, or remove it.

    + commands: argv lists of an allowed GPU tool with plain arguments
      (``fleet.domain.node_commands.check_argv``), quoted argument by argument
    + files: the boot unit's unit file and script (``fleet.domain.node_plan.boot_unit``);
      no other path is accepted
    + remove_boot: remove the boot unit, its script, the mig-parted layout and the enabling
      link where any is there (the profile declares nothing a reboot forgets); not with files
    """
    from fleet.domain.node_commands import shell_line
    from fleet.domain.node_plan import BOOT_SCRIPT, BOOT_UNIT, BOOT_WANTS, MIG_PARTED_FILE

    lines = [shell_line(argv) for argv in commands]  # all checked before the first runs
    files = dict(files or {})
    allowed = {BOOT_UNIT, BOOT_SCRIPT, MIG_PARTED_FILE}
    if set(files) - allowed:
        raise ValueError(f"not a boot-unit file: {sorted(set(files) - allowed)}")
    if remove_boot and files:
        raise ValueError("the boot unit is either written or removed, not both")
    if remove_boot:
        present: list[str] = host.get_fact(PresentPaths,
                                           paths=[BOOT_WANTS, BOOT_UNIT, BOOT_SCRIPT,
                                                  MIG_PARTED_FILE])
        gone = [p for p in present if p in {BOOT_WANTS, *allowed}]  # only what was asked
        if gone:
            lines += ["rm -f " + " ".join(shlex.quote(p) for p in gone),
                      "if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi"]
    have: dict[str, str | None] = {}
    if files:
        answer: dict[str, str | None] = host.get_fact(FileContents,
                                                      paths=[*sorted(files), BOOT_WANTS])
        have = dict(answer)
    for path, content in sorted(files.items()):
        if have.get(path) != content:
            write = write_file_command(path, content, "755" if path == BOOT_SCRIPT else "644")
            if path == MIG_PARTED_FILE:  # `nvidia-mig-parted apply -f` among the commands
                lines.insert(0, write)
            else:
                lines.append(write)
    unit = files.get(BOOT_UNIT)
    if unit is not None and have.get(BOOT_WANTS) != unit:
        lines.append(f"mkdir -p {shlex.quote(posixpath.dirname(BOOT_WANTS))} && "
                     f"ln -sfn {shlex.quote(BOOT_UNIT)} {shlex.quote(BOOT_WANTS)}")
    if len(lines) > len(commands) and unit is not None:
        lines.append("if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi")
    if not lines:
        host.noop("node state and boot unit as planned" if not remove_boot else
                  "node state as planned, no boot unit left")
        return
    yield from lines
