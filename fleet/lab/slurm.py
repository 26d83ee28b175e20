"""A real Slurm on the lab (`fleet lab up --slurm`): Debian's slurmctld and munged on the controller
side, one slurmd per lab host started by the host's own boot.

What runs where (see docs/lab.md, "Slurm", and shared/spikes/slurm/README.md for the traps):

- munged (as the `munge` user) and slurmctld run in the root namespaces, children of the lab
  daemon, with their socket, key, state and logs under `RUN/slurm/`. slurmctld listens on
  SlurmctldPort 6917 (slurmd on 6918, inside each host's netns): never Slurm's default ports, never
  the machine's munge socket, so a Slurm the machine runs itself is left alone.
- Each host's boot (host-init.sh sources `boot/services.sh`, written here before every boot) binds
  the munge socket dir and the slurm.conf dir into the host at the same paths, the real cgroup fs
  (slurmd 22.05 loads its cgroup plugin even with proctrack/linuxproc), and the controller's
  `fleet` (read-only), then starts `slurmd -D -b` chrooted into the host's root: jobs, `srun` and
  the HealthCheckProgram see the host's own filesystem (fake NVML, dpkg, /proc/driver/nvidia).
  The host's `reboot` kills its PID 1, so slurmd dies with the host and the next boot restarts it.

The text generators (`slurm_conf`, `gres_conf`, `partitions`, `services_script`) are pure.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shlex
import shutil
import socket
import stat
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fleet.errors import CouldNotComplete
from fleet.lab import hostfleet
from fleet.lab.model import BRIDGE_ADDR, HostSpec, LabState
from fleet.lab.paths import LabPaths
from fleet.lab.sysutil import atomic_write, require_free_ports, run

CTLD_PORT = 6917
SLURMD_PORT = 6918
HEALTHCHECK = "/usr/local/sbin/fleet-lab-healthcheck"
REBOOT_PROGRAM = "/sbin/reboot"  # the lab's fake: kills the host's PID 1, the daemon boots it again
GRES_DEV = "/var/lib/gpusim/dev"  # static nodes: /dev/nvidia* vanish with the driver (trap 2)
OWNER_ENV = "FLEET_LAB_OWNED"  # marks controller-side processes so `down` finds them all
ALL_PARTITION = "lab"
DEFAULT_HEALTH_INTERVAL = 10
NVIDIA_MAJOR = 195
MAX_GPUS = 8
# node sizes claimed through SlurmdParameters=config_overrides (the machine has 2 cores)
NODE_SIZE = {"H100": (64, 1_000_000), "A100": (64, 1_000_000), "L40S": (32, 512_000)}


@dataclass(frozen=True)
class SlurmPaths:
    """Everything of the lab's Slurm on the controller side, under `RUN/slurm/`."""

    root: Path

    @classmethod
    def of(cls, paths: LabPaths) -> SlurmPaths:
        return cls(paths.slurm)

    @property
    def etc(self) -> Path:
        """slurm.conf and gres.conf; bound read-only into every host at the same path."""
        return self.root / "etc"

    @property
    def conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def munge(self) -> Path:
        """munged's key, log and seed (0700, owned by munge)."""
        return self.root / "munge"

    @property
    def munge_run(self) -> Path:
        """munged's socket and pid; bound into every host at the same path."""
        return self.root / "munge-run"

    @property
    def socket(self) -> Path:
        return self.munge_run / "munge.socket.2"

    @property
    def ctld(self) -> Path:
        """slurmctld's state, log and pid."""
        return self.root / "ctld"


# ------------------------------------------------------------------------------ pure text
def partitions(hosts: Sequence[HostSpec]) -> dict[str, list[str]]:
    """One partition per pool present in the lab (lab.json order), then `lab` with every node."""
    parts: dict[str, list[str]] = {}
    for h in hosts:
        if h.pool != ALL_PARTITION:
            parts.setdefault(h.pool, []).append(h.name)
    parts[ALL_PARTITION] = [h.name for h in hosts]
    return parts


def gres_type(host: HostSpec) -> str:
    return host.gpu_model.lower()


def gres_files(count: int) -> str:
    return f"{GRES_DEV}/nvidia[0-{count - 1}]" if count > 1 else f"{GRES_DEV}/nvidia0"


def slurm_conf(
    hosts: Sequence[HostSpec],
    sp: SlurmPaths,
    controller: str,
    controller_addr: str = BRIDGE_ADDR,
    health_interval: int = DEFAULT_HEALTH_INTERVAL,
) -> str:
    """slurm.conf for the lab: controller-side paths are absolute on the controller; slurmd's own
    (spool, pid, log) are inside each host, since slurmd runs chrooted into the host's root."""
    lines = [
        "# fleet lab: written by `fleet lab up --slurm` (fleet/lab/slurm.py); removed by down",
        "ClusterName=fleetlab",
        f"SlurmctldHost={controller}({controller_addr})",
        f"SlurmctldPort={CTLD_PORT}",
        f"SlurmdPort={SLURMD_PORT}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={sp.socket}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={sp.ctld / 'state'}",
        f"SlurmctldPidFile={sp.ctld / 'slurmctld.pid'}",
        f"SlurmctldLogFile={sp.ctld / 'slurmctld.log'}",
        "SlurmdSpoolDir=/var/spool/slurmd",
        "SlurmdPidFile=/run/slurmd.pid",
        "SlurmdLogFile=/var/log/slurm/slurmd.log",
        "MailProg=/bin/true",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "GresTypes=gpu",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        "PropagateResourceLimits=NONE",
        "ReturnToService=2",
        "SlurmdParameters=config_overrides",
        f"HealthCheckProgram={HEALTHCHECK}",
        f"HealthCheckInterval={health_interval}",
        "HealthCheckNodeState=ANY",
        f"RebootProgram={REBOOT_PROGRAM}",
        "ResumeTimeout=60",
        "SlurmdTimeout=60",
        "MinJobAge=30",
        "KillWait=5",
        "",
    ]
    for h in hosts:
        cpus, mem = NODE_SIZE.get(h.gpu_model, (32, 256_000))
        lines.append(
            f"NodeName={h.name} NodeHostname={h.hostname} NodeAddr={h.address} CPUs={cpus} "
            f"RealMemory={mem} Gres=gpu:{gres_type(h)}:{h.gpu_count} State=UNKNOWN"
        )
    lines.append("")
    for name, nodes in partitions(hosts).items():
        default = "YES" if name == ALL_PARTITION else "NO"
        lines.append(
            f"PartitionName={name} Nodes={','.join(nodes)} Default={default} "
            "MaxTime=INFINITE State=UP"
        )
    return "\n".join(lines) + "\n"


def gres_conf(hosts: Sequence[HostSpec]) -> str:
    """Static gres.conf (Debian's Slurm has no NVML plugin): File= must be real device nodes, or
    the node registers INVAL and drains (trap 2)."""
    lines = ["# fleet lab: static GPU gres, device nodes made by the lab", "AutoDetect=off"]
    for h in hosts:
        lines.append(
            f"NodeName={h.name} Name=gpu Type={gres_type(h)} File={gres_files(h.gpu_count)}"
        )
    return "\n".join(lines) + "\n"


def services_script(
    node: str | None,
    conf: Path | None,
    ro_binds: Sequence[Path],
    cgroup: bool,
    not_before: int | None = None,
) -> str:
    """Sourced by host-init.sh ($name, $root, $boot set) before sshd: binds, then slurmd.

    `not_before` (epoch seconds) holds slurmd back on a reboot: slurmctld takes a node as rebooted
    only if `now - uptime` (whole seconds; with -b, uptime counts from slurmd's start) is not
    before the second the reboot was issued, else the node stays DOWN+REBOOT_ISSUED until
    ResumeTimeout (trap 8). Starting slurmd in a later second than the reboot guarantees it."""
    q = shlex.quote
    out = ["# written by fleet.lab.slurm before each boot"]
    if cgroup:
        # slurmd 22.05 loads a cgroup plugin even with proctrack/linuxproc (trap 1)
        out += [
            'mkdir -p "$root/sys/fs/cgroup"',
            'mount --rbind /sys/fs/cgroup "$root/sys/fs/cgroup"',
        ]
    for d in ro_binds:
        out += [
            f'mkdir -p "$root"{q(str(d))}',
            f'mount --bind {q(str(d))} "$root"{q(str(d))}',
            f'mount -o remount,bind,ro "$root"{q(str(d))}',
        ]
    if node and conf:
        wait = (
            f'while [ "$(date +%s)" -lt {int(not_before)} ]; do sleep 0.1; done; '
            if not_before
            else ""
        )
        out += [
            'mkdir -p "$root/var/log/slurm" "$root/var/spool/slurmd"',
            f'( {wait}exec chroot "$root" /usr/sbin/slurmd -D -b -N {q(node)} -f {q(str(conf))} '
            '</dev/null >>"$root/var/log/slurm/slurmd.out" 2>&1 ) &',
        ]
    return "\n".join(out) + "\n"


HEALTHCHECK_SCRIPT = """#!/bin/sh
# fleet lab: Slurm's HealthCheckProgram (runs inside this host, as root, every HealthCheckInterval).
# Runs `fleet node-check` when fleet runs here; otherwise (or before that command exists) exit 0.
# Slurm only logs a failing exit status: a check that wants a drain must ask scontrol itself.
#
# slurmd runs this once at its start, before it registers. The first run for a slurmd lasts at
# least 1.1 s: slurmctld counts a node's boot in whole seconds (now - uptime, uptime counted from
# slurmd's start with -b), and a registration less than a second after the start could place the
# boot in the very second of a later `scontrol reboot`, which then never completes (trap 8).
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin  # slurmd passes no PATH
export PATH
first=/run/fleet-lab-healthcheck.slurmd-$PPID
if [ ! -e "$first" ]; then
  : > "$first"
  sleep 1.1 &
  pause=$!
fi
if ! command -v fleet >/dev/null 2>&1; then
  [ -z "${pause:-}" ] || wait "$pause"
  exit 0
fi
# nice: the lab's benchmarks share the machine's CPUs with every host's health check
out=$(nice -n 10 fleet node-check 2>&1)
rc=$?
[ -z "${pause:-}" ] || wait "$pause"
case "$out" in
  *"No such command"*) exit 0 ;;
esac
[ -z "$out" ] || printf '%s\\n' "$out"
exit $rc
"""


# ------------------------------------------------------------------------------ files
def write_layer(paths: LabPaths, conf: Path | None) -> None:
    """Lab layer additions: health check, the fleet wrapper, static GPU device nodes, and
    /etc/slurm pointing at the lab's config (so scontrol inside a host needs no SLURM_CONF)."""
    L = paths.layer
    atomic_write(L / HEALTHCHECK.lstrip("/"), HEALTHCHECK_SCRIPT, 0o755)
    hostfleet.write_wrapper(L)
    dev = L / GRES_DEV.lstrip("/")
    dev.mkdir(parents=True, exist_ok=True)
    for i in range(MAX_GPUS):
        node = dev / f"nvidia{i}"
        if not node.exists():
            os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, i))
            os.chmod(node, 0o666)
    if conf is not None:
        etc = L / "etc/slurm"
        etc.mkdir(parents=True, exist_ok=True)
        for name in ("slurm.conf", "gres.conf"):
            link = etc / name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(conf.parent / name)


def controller_name() -> str:
    """slurmctld insists that SlurmctldHost names this machine (short hostname)."""
    return socket.gethostname().split(".")[0]


def configure(paths: LabPaths, hosts: Sequence[HostSpec], health_interval: int) -> Path:
    """Write slurm.conf, gres.conf and a fresh munge key; returns the slurm.conf path."""
    sp = SlurmPaths.of(paths)
    for d in (sp.etc, sp.ctld / "state"):
        d.mkdir(parents=True, exist_ok=True)
    atomic_write(sp.conf, slurm_conf(hosts, sp, controller_name(), health_interval=health_interval))
    atomic_write(sp.etc / "gres.conf", gres_conf(hosts))
    try:
        munge = pwd.getpwnam("munge")
    except KeyError:
        raise CouldNotComplete(
            "--slurm needs the munge user: apt-get install slurmctld slurm-client munge"
        ) from None
    for d, mode in ((sp.munge, 0o700), (sp.munge_run, 0o755)):
        d.mkdir(parents=True, exist_ok=True)
        os.chown(d, munge.pw_uid, munge.pw_gid)
        d.chmod(mode)
    key = sp.munge / "munge.key"
    key.unlink(missing_ok=True)
    run(["runuser", "-u", "munge", "--", "mungekey", "-c", "-k", key])
    return sp.conf


def check_port() -> None:
    """Refuse to start when something (a Slurm of the machine, another lab) holds 6917."""
    require_free_ports(((CTLD_PORT, "SlurmctldPort"),), "--slurm", host="0.0.0.0")


def missing_tools() -> list[str]:
    need = {"slurmctld": "slurmctld", "munged": "munge", "sinfo": "slurm-client"}
    return sorted({pkg for tool, pkg in need.items() if shutil.which(tool) is None})


def services_for(
    paths: LabPaths, state: LabState, host: HostSpec, not_before: int | None = None
) -> str:
    binds: list[Path] = [Path(d) for d in state.fleet_binds]
    conf = Path(state.slurm_conf) if state.slurm_conf else None
    if conf is not None:
        sp = SlurmPaths.of(paths)
        binds = [sp.etc, sp.munge_run, *binds]
    return services_script(
        host.name if conf else None, conf, binds, cgroup=conf is not None, not_before=not_before
    )


def prepare_boot(paths: LabPaths, state: LabState, host: HostSpec, reboot: bool) -> None:
    """Called by the daemon before each boot: what host-init.sh starts besides sshd."""
    not_before = int(time.time()) + 1 if reboot else None
    atomic_write(
        paths.host_dir(host.name) / "boot" / "services.sh",
        services_for(paths, state, host, not_before),
    )


# ------------------------------------------------------------------------------ controller side
def env(conf: Path | str) -> dict[str, str]:
    """The environment for Slurm client commands on the controller."""
    return {**os.environ, "SLURM_CONF": str(conf)}


def _spawn(
    argv: list[str], log: Path, conf: Path, run_dir: Path, user: str | None = None
) -> subprocess.Popen[bytes]:
    with open(log, "ab") as f:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=subprocess.STDOUT,
            env={**env(conf), OWNER_ENV: str(run_dir)},
            cwd="/",
            user=user,
            group=user,
            extra_groups=[] if user else None,
        )


def start_controller(
    paths: LabPaths, conf: Path, timeout: float = 15
) -> list[subprocess.Popen[bytes]]:
    """munged, then slurmctld; returns once slurmctld accepts connections. Writes the start
    time to `RUN/slurm/started` (for the daemons-started-to-nodes-idle figure)."""
    sp = SlurmPaths.of(paths)
    atomic_write(sp.root / "started", f"{time.time():.3f}\n")
    munged = [
        "munged",
        "-F",
        f"--socket={sp.socket}",
        f"--key-file={sp.munge / 'munge.key'}",
        f"--log-file={sp.munge / 'munged.log'}",
        f"--pid-file={sp.munge_run / 'munged.pid'}",
        f"--seed-file={sp.munge / 'munged.seed'}",
    ]
    procs = [_spawn(munged, paths.logs / "munged.out", conf, paths.run, user="munge")]
    deadline = time.monotonic() + timeout
    while not sp.socket.exists():
        _check_alive(procs, paths, deadline, "munged")
        time.sleep(0.05)
    procs.append(
        _spawn(["slurmctld", "-D", "-f", str(conf)], paths.logs / "slurmctld.out", conf, paths.run)
    )
    while True:
        with contextlib.suppress(OSError), socket.create_connection(
            (BRIDGE_ADDR, CTLD_PORT), timeout=0.5
        ):
            return procs
        _check_alive(procs, paths, deadline, "slurmctld")
        time.sleep(0.05)


def _check_alive(
    procs: list[subprocess.Popen[bytes]], paths: LabPaths, deadline: float, what: str
) -> None:
    dead = [p for p in procs if p.poll() is not None]
    if dead or time.monotonic() > deadline:
        stop_controller(procs)
        try:
            tail = (paths.logs / f"{what}.out").read_text(errors="replace").strip()[-1000:]
        except OSError:
            tail = ""
        raise CouldNotComplete(
            f"{what} did not start ({'exited' if dead else 'timed out'}): {tail or 'no output'}"
        )


def stop_controller(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for p in reversed(procs):  # slurmctld first: it saves state through munge-free paths
        if p.poll() is None:
            p.terminate()
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)


def node_states(conf: Path | str, timeout: float = 5) -> dict[str, tuple[str, str]]:
    """{node: (sinfo long state, reason)} from `sinfo -N -p lab`; {} when slurmctld is not
    answering. States as sinfo prints them: idle, mixed, drained, down*, idle@ ..."""
    try:
        cp = subprocess.run(
            ["sinfo", "-h", "-N", "-p", ALL_PARTITION, "-o", "%N|%T|%E"],
            capture_output=True,
            env=env(conf),
            timeout=timeout,
            check=False,
        )
    except (subprocess.TimeoutExpired, FileNotFoundError):
        return {}
    out: dict[str, tuple[str, str]] = {}
    for line in cp.stdout.decode(errors="replace").splitlines():
        parts = line.split("|", 2)
        if len(parts) == 3:
            out[parts[0]] = (parts[1], "" if parts[2] == "none" else parts[2])
    return out


HEALTH_DRAIN = "fleet: health:"  # the reason prefix of `fleet node-check`'s drains


def resume_health_drain(conf: Path | str, node: str) -> bool:
    """Resume the node if `fleet node-check` drained it (for `fleet lab reset`: the drain an
    injected fault caused goes with the fault). Any other drain or down is left alone."""
    state, reason = node_states(conf).get(node, ("", ""))
    if not reason.startswith(HEALTH_DRAIN):
        return False
    cp = subprocess.run(
        ["scontrol", "update", f"nodename={node}", "state=resume"],
        capture_output=True,
        env=env(conf),
        timeout=10,
        check=False,
    )
    return cp.returncode == 0


def wait_idle(paths: LabPaths, state: LabState, timeout: float = 60) -> float:
    """Wait until every node is idle in sinfo; returns the seconds since the daemons started."""
    assert state.slurm_conf
    t0 = time.monotonic()
    names = {h.name for h in state.hosts}
    states: dict[str, tuple[str, str]] = {}
    while time.monotonic() - t0 < timeout:
        states = node_states(state.slurm_conf)
        if names <= states.keys() and all(states[n][0] == "idle" for n in names):
            started = float((SlurmPaths.of(paths).root / "started").read_text())
            return time.time() - started
        time.sleep(0.1)
    raise CouldNotComplete(
        f"Slurm nodes not idle within {timeout:.0f} s: "
        + ", ".join(f"{n}={states.get(n, ('?', ''))[0]}" for n in sorted(names))
    )
