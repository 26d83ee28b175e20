"""One lab host on disk and in the kernel: overlay, files the GPU stack would create, boot, net.

The daemon (`fleet.lab.daemon`) calls `prepare_boot` and runs `host_argv` for every boot; `fleet
lab` commands call `apply_effects` to inject faults. Every write into a running host goes through
its merged overlay mount with an atomic rename, so the fake NVML (which re-reads on mtime) sees it.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import stat
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from fleet.errors import CouldNotComplete
from fleet.lab import boot as lab_boot
from fleet.lab import faults as F
from fleet.lab import gpustate, operator_driver
from fleet.lab.model import (
    BRIDGE,
    BRIDGE_ADDR,
    PROFILES,
    SUBNET,
    HostSpec,
    LabState,
    gpu_bdf,
    gpu_bus,
    upstream_bdf,
)
from fleet.lab.paths import LabPaths
from fleet.lab.perf import BENCH_SCRIPT, MODEL_SERVER_SCRIPT
from fleet.lab.sysutil import atomic_write, mount_overlay, run

STATE = "var/lib/gpusim/state"
PENDING = "var/lib/gpusim/module.pending"
KERN_LOG = "var/log/kern.log"
NVIDIA_MAJOR = 195
NVSWITCH_MAJOR = 236  # dynamic on a real host

HOST_INIT = """#!/bin/sh
# PID 1 of a fleet lab host's fresh UTS/mount/PID/time namespaces, one run per boot.
# $1 hostname, $2 merged rootfs, $3 boot dir (prepared by the lab daemon), $4.. extra sshd args
set -eu
name=$1 root=$2 boot=$3; shift 3
hostname "$name"
mount -t proc proc "$root/proc"
mount -t tmpfs -o mode=0555,size=1m tmpfs "$root/proc/driver"
if [ -f "$boot/nvidia-version" ]; then
  mkdir -p "$root/proc/driver/nvidia"
  cp "$boot/nvidia-version" "$root/proc/driver/nvidia/version"
fi
mount -o remount,ro "$root/proc/driver"
mount --bind "$boot/boot_id" "$root/proc/sys/kernel/random/boot_id"
if [ -f "$boot/osrelease" ]; then
  mount --bind "$boot/osrelease" "$root/proc/sys/kernel/osrelease"  # the kernel it booted
fi
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$root/dev/pts"
mount --bind "$root/dev/pts/ptmx" "$root/dev/ptmx"
mount -t tmpfs -o mode=1777,size=64m tmpfs "$root/dev/shm"
mount -t tmpfs -o mode=0755,size=16m tmpfs "$root/run"
mkdir -p "$root/run/sshd"
# as systemd would, fleet's node-state unit where `fleet apply` enabled it (-L: absolute link)
if [ -L "$root/etc/systemd/system/multi-user.target.wants/fleet-node-state.service" ]; then
  chroot "$root" /usr/bin/env PATH=/usr/sbin:/usr/bin:/sbin:/bin /bin/sh \
    /usr/local/sbin/fleet-node-state >"$root/var/log/fleet-node-state.log" 2>&1 || true
fi
# binds and slurmd (fleet.lab.slurm.prepare_boot writes this before each boot)
if [ -f "$boot/services.sh" ]; then . "$boot/services.sh"; fi
if [ -f "$boot/model-server" ]; then
  chroot "$root" /usr/bin/python3 /usr/local/lib/fleet-lab/model_server.py \
    "$(cat "$boot/model-server")" </dev/null >/dev/null 2>&1 &
fi
exec chroot "$root" /usr/sbin/sshd -D -e "$@"
"""

REBOOT = """#!/bin/sh
# fleet lab: reboot this host. PID 1 (sshd) exits; the lab daemon boots the host again with the
# kernel module the installed driver package left pending.
sync
echo "$(date -u +%s) ${0##*/} $*" >> /var/log/lab-reboots.log
kill -TERM 1
"""

SSHD_CONF = """PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
PrintMotd no
MaxStartups 200:30:400
MaxSessions 64
HostKey /etc/ssh/ssh_host_ed25519_key
Subsystem sftp /usr/lib/openssh/sftp-server
"""


# ---------------------------------------------------------------- shared layer and hosts
def write_layer(paths: LabPaths, base: Path, repo_url: str) -> None:
    """The layer between the base and each host: sshd setup, apt source, lab tools."""
    L = paths.layer
    if L.exists():
        shutil.rmtree(L)
    for d in [
        "etc/ssh/sshd_config.d",
        "root/.ssh",
        "var/lib/gpusim",
        "etc/apt/sources.list.d",
        "etc/apt/apt.conf.d",
        "usr/local/sbin",
        "usr/local/bin",
        "usr/local/lib/fleet-lab",
        "usr/sbin",
        "sys/bus/pci/devices",
        "sys/devices",
    ]:
        (L / d).mkdir(parents=True, exist_ok=True)
    (L / "etc/ssh/sshd_config.d/lab.conf").write_text(SSHD_CONF)
    cfg = (base / "etc/ssh/sshd_config").read_text()
    (L / "etc/ssh/sshd_config").write_text(
        "".join(ln + "\n" for ln in cfg.splitlines() if not ln.startswith("Subsystem"))
    )
    (L / "root/.ssh").chmod(0o700)
    shutil.copy(paths.client_key.with_suffix(".pub"), L / "root/.ssh/authorized_keys")
    (L / "root/.ssh/authorized_keys").chmod(0o600)
    (L / "etc/apt/sources.list").write_text("")  # no Debian mirror inside the lab
    (L / "etc/apt/sources.list.d/fleet-lab.list").write_text(f"deb [trusted=yes] {repo_url} ./\n")
    (L / "etc/apt/apt.conf.d/90fleet-lab").write_text(
        'Acquire::Languages "none";\nAPT::Install-Recommends "false";\n'
        'Acquire::http::Timeout "10";\n'
    )
    for name in ("reboot", "shutdown"):
        for d in ("usr/local/sbin", "usr/sbin"):
            if not (base / d / name).exists():
                (L / d / name).write_text(REBOOT)
                (L / d / name).chmod(0o755)
    (L / "usr/local/bin/fleet-lab-bench").write_text(BENCH_SCRIPT)
    (L / "usr/local/bin/fleet-lab-bench").chmod(0o755)
    lab_boot.write_layer(L, base)  # /boot, headers, fake modinfo and mokutil
    (L / "usr/local/lib/fleet-lab/model_server.py").write_text(MODEL_SERVER_SCRIPT)
    # the shared root must stay 0755 or sshd's StrictModes refuses the authorized_keys
    L.chmod(0o755)


EL9_HIDDEN = tuple(f"usr/bin/{t}" for t in (
    "dpkg", "dpkg-query", "dpkg-deb", "dpkg-divert", "dpkg-trigger", "apt", "apt-get", "apt-mark",
    "apt-cache", "apt-config"))


def el9_layer(paths: LabPaths) -> Path:
    """The el9 hosts' shared layer: the lab layer's files plus Rocky 9 identity and dnf setup."""
    return paths.run / "layer-el9"


def write_el9_layer(paths: LabPaths, rpm_url: str) -> Path:
    """Copy the finished lab layer (before any deb is installed into it) and make it EL9:
    /etc/os-release of Rocky Linux 9, the lab's RPM repository in /etc/yum.repos.d, no apt
    source, and `$releasever` 9 for dnf (Debian's dnf finds no system-release package)."""
    from fleet.lab.rpmrepo import OS_RELEASE, repo_file

    L = el9_layer(paths)
    if L.exists():
        shutil.rmtree(L)
    run(["cp", "-a", paths.layer, L])  # cp, not copytree: the layer holds device nodes
    (L / "etc/apt/sources.list.d/fleet-lab.list").unlink(missing_ok=True)
    (L / "etc/os-release").write_text(OS_RELEASE)
    (L / "usr/lib/os-release").parent.mkdir(parents=True, exist_ok=True)
    (L / "usr/lib/os-release").write_text(OS_RELEASE)
    (L / "etc/yum.repos.d").mkdir(parents=True, exist_ok=True)
    (L / "etc/yum.repos.d/fleet-lab.repo").write_text(repo_file(rpm_url))
    (L / "etc/dnf/vars").mkdir(parents=True, exist_ok=True)
    (L / "etc/dnf/vars/releasever").write_text("9\n")
    # Debian's dnf-plugins-core turns on the `local` plugin, whose _dnf_local repository has
    # gpgcheck on and no key: every transaction would fail on it
    (L / "etc/dnf/plugins").mkdir(parents=True, exist_ok=True)
    (L / "etc/dnf/plugins/local.conf").write_text("[main]\nenabled=0\n")
    # an EL host has no dpkg or apt: whiteouts (0/0 character devices) hide the Debian base's
    # tools from the el9 hosts, so nothing on them can take the Debian path by finding dpkg
    for tool in EL9_HIDDEN:
        node = L / tool
        node.parent.mkdir(parents=True, exist_ok=True)
        node.unlink(missing_ok=True)
        os.mknod(node, 0o600 | stat.S_IFCHR, os.makedev(0, 0))
    L.chmod(0o755)
    return L


def host_layer(paths: LabPaths, host: HostSpec) -> Path:
    return el9_layer(paths) if host.os == "el9" else paths.layer


def state_lines(host: HostSpec) -> list[str]:
    prof = PROFILES[host.gpu_model]
    lines = [f"# fleet lab host {host.name}: {prof.count} x {prof.model}", *prof.state_lines(),
             *gpustate.state_lines(host.gpu_model)]
    lines += [f"gpu{i}.pci.bus={gpu_bus(i):#04x}" for i in range(prof.count)]
    lines += [f"gpu{i}.serial=1650{host.index:04d}{i:05d}" for i in range(prof.count)]
    return lines


def sysfs_files(host: HostSpec) -> dict[str, str]:
    """Relative paths under the host root -> contents, for each GPU and its upstream port."""
    prof = PROFILES[host.gpu_model]
    speed = {4: "16.0 GT/s PCIe", 5: "32.0 GT/s PCIe"}[prof.pcie_gen]
    files: dict[str, str] = {}
    for i in range(prof.count):
        bdf, up = gpu_bdf(i), upstream_bdf(i)
        root_port = f"pci0000:{gpu_bus(i) - 2:02x}"
        updir = f"sys/devices/{root_port}/{up}"
        gdir = f"{updir}/{bdf}"
        for d, vendor, device, cls in (
            (gdir, "0x10de", f"{prof.device_id >> 16:#06x}", "0x030200"),
            (updir, "0x1000", "0xc030", "0x060400"),
        ):
            files[f"{d}/vendor"] = vendor + "\n"
            files[f"{d}/device"] = device + "\n"
            files[f"{d}/class"] = cls + "\n"
            files[f"{d}/current_link_speed"] = speed + "\n"
            files[f"{d}/max_link_speed"] = speed + "\n"
            files[f"{d}/current_link_width"] = "16\n"
            files[f"{d}/max_link_width"] = "16\n"
            for kind in F.AER_FILES:
                files[f"{d}/{kind}"] = F.aer_file({}, kind)
    return files


def _pci_links(root: Path, host: HostSpec) -> None:
    prof = PROFILES[host.gpu_model]
    devs = root / "sys/bus/pci/devices"
    devs.mkdir(parents=True, exist_ok=True)
    for i in range(prof.count):
        up = upstream_bdf(i)
        rp = f"pci0000:{gpu_bus(i) - 2:02x}"
        for bdf, target in (
            (gpu_bdf(i), f"../../../devices/{rp}/{up}/{gpu_bdf(i)}"),
            (up, f"../../../devices/{rp}/{up}"),
        ):
            link = devs / bdf
            if not link.is_symlink():
                link.symlink_to(target)


def create_host(paths: LabPaths, host: HostSpec, base: Path) -> str:
    """Mount the host's overlay (over its flavor's layer and `base`, the flavor's base) and give
    it identity; returns its known_hosts line."""
    d = paths.host_dir(host.name)
    for sub in ("upper", "work", "root", "boot"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    root = d / "root"
    if not os.path.ismount(root):
        mount_overlay(f"{host_layer(paths, host)}:{base}", d / "upper", d / "work", root)
    (root / "etc/hostname").write_text(host.hostname + "\n")
    (root / "etc/hosts").write_text(f"127.0.0.1 localhost\n{host.address} {host.hostname}\n")
    key = root / "etc/ssh/ssh_host_ed25519_key"
    if not key.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", host.hostname, "-f", key])
    atomic_write(root / STATE, "\n".join(state_lines(host)) + "\n")
    for rel, text in sysfs_files(host).items():
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    _pci_links(root, host)
    (root / KERN_LOG).touch()
    pub = (root / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()
    return f"{host.address} {pub[0]} {pub[1]}\n"


# ---------------------------------------------------------------- state file
def read_kv(path: Path) -> list[tuple[str, str]]:
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip() and not line.startswith("#") and "=" in line:
                k, _, v = line.partition("=")
                out.append((k.strip(), v.strip()))
    return out


def update_state(
    root: Path,
    set_: dict[str, str],
    add: dict[str, int] | None = None,
    drop: list[str] | None = None,
) -> None:
    path = root / STATE
    comments = (
        [ln for ln in path.read_text().splitlines() if ln.startswith("#")] if path.exists() else []
    )
    kv = dict(read_kv(path))
    for prefix in drop or []:
        for k in [
            k for k in kv if k == prefix or (prefix.endswith("*") and k.startswith(prefix[:-1]))
        ]:
            del kv[k]
    kv.update(set_)
    for k, n in (add or {}).items():
        kv[k] = str(int(kv.get(k, "0"), 0) + n)
    atomic_write(path, "\n".join(comments + [f"{k}={v}" for k, v in kv.items()]) + "\n")


def flags_path(paths: LabPaths, name: str) -> Path:
    return paths.host_dir(name) / "flags.json"


def read_flags(paths: LabPaths, name: str) -> dict[str, bool]:
    try:
        return dict(json.loads(flags_path(paths, name).read_text()))
    except (FileNotFoundError, ValueError):
        return {}


def write_flags(paths: LabPaths, name: str, flags: dict[str, bool]) -> None:
    atomic_write(flags_path(paths, name), json.dumps({k: v for k, v in flags.items() if v}) + "\n")


# ---------------------------------------------------------------- boot
def boot_info(paths: LabPaths, name: str) -> dict[str, object]:
    try:
        return dict(json.loads((paths.host_dir(name) / "boot" / "info.json").read_text()))
    except (FileNotFoundError, ValueError):
        return {}


def kernel_log(paths: LabPaths, host: HostSpec, messages: list[str]) -> None:
    info = boot_info(paths, host.name)
    boot_time = float(info.get("boot_time", time.time()))  # type: ignore[arg-type]
    now = time.time()
    when = datetime.fromtimestamp(now, UTC)
    text = "".join(F.syslog_line(when, host.hostname, now - boot_time, m) + "\n" for m in messages)
    with open(paths.host_root(host.name) / KERN_LOG, "a") as f:
        f.write(text)


def _proc_version(ver: str) -> str:
    return (
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {ver}  Tue Mar  5 22:23:56 UTC 2024\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    )


def prepare_boot(paths: LabPaths, host: HostSpec, model_server: bool = False) -> dict[str, object]:
    """Everything a boot changes: loaded module, boot id, volatile counters, kernel log, /dev."""
    root = paths.host_root(host.name)
    bootdir = paths.host_dir(host.name) / "boot"
    bootdir.mkdir(parents=True, exist_ok=True)
    flags = read_flags(paths, host.name)
    pending = root / PENDING
    module = pending.read_text().strip() if pending.exists() else ""
    kernel, loadable = lab_boot.booting(root)  # GRUB's default entry boots
    loaded = bool(module) and not flags.get("driver-not-loaded") and loadable
    boot_id = str(uuid.uuid4())
    atomic_write(bootdir / "boot_id", boot_id + "\n")
    atomic_write(bootdir / "osrelease", kernel + "\n")
    if loaded:
        atomic_write(bootdir / "nvidia-version", _proc_version(module))
    else:
        (bootdir / "nvidia-version").unlink(missing_ok=True)
    if model_server:
        atomic_write(bootdir / "model-server", f"{host.address}\n")
    # a reset clears volatile ECC counters and applies pending row remaps; AER counters restart
    update_state(
        root,
        {},
        drop=["gpu*.ecc.volatile.*"]
        + [f"gpu{i}.ecc.volatile.*" for i in range(PROFILES[host.gpu_model].count)],
    )
    kv = dict(read_kv(root / STATE))
    pend = {k: "0" for k, v in kv.items() if k.endswith(".remapped.pending") and v != "0"}
    # pending ECC/MIG modes take effect; settings a real reboot forgets are gone (gpustate)
    node_set, node_drop = gpustate.boot_reset(kv, PROFILES[host.gpu_model].count)
    if pend or node_set or node_drop:
        update_state(root, {**pend, **node_set}, drop=node_drop)
    for rel, text in sysfs_files(host).items():
        if "/aer_dev_" in rel:
            atomic_write(root / rel, text)
    # /dev/nvidia* exist only while the module is loaded
    dev = root / "dev"
    for old in dev.glob("nvidia*"):
        old.unlink()
    if loaded:
        nodes = [(f"nvidia{i}", i) for i in range(PROFILES[host.gpu_model].count)]
        nodes += [("nvidiactl", 255), ("nvidia-modeset", 254)]
        nodes_at = [(dev / n, os.makedev(NVIDIA_MAJOR, minor)) for n, minor in nodes]
        nodes_at.append((dev / "nvidia-uvm", os.makedev(510, 0)))
        nodes_at += [(dev / f"nvidia-nvswitch{i}", os.makedev(NVSWITCH_MAJOR, i))
                     for i in range(gpustate.NODE_DEFAULTS[host.gpu_model].nvswitches)]
        for path, device in nodes_at:
            os.mknod(path, 0o666 | stat.S_IFCHR, device)
            os.chmod(path, 0o666)  # crw-rw-rw- as the driver makes them; mknod obeys the umask
    info = {
        "boot_id": boot_id,
        "boot_time": time.time(),
        "module": module if loaded else None,
        "pending": module or None,
    }
    atomic_write(bootdir / "info.json", json.dumps(info) + "\n")
    msgs = [
        f"Linux version {kernel} (debian-kernel@lists.debian.org) (gcc-12 (Debian 12.2.0-14) "
        "12.2.0, GNU ld (GNU Binutils for Debian) 2.40) #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1",
        f"Command line: BOOT_IMAGE=/boot/vmlinuz-{kernel} root=/dev/sda1 ro quiet",
    ]
    if loaded:
        msgs += [
            "nvidia: loading out-of-tree module taints kernel.",
            f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {module}  "
            "Tue Mar  5 22:23:56 UTC 2024",
        ]
    kernel_log(paths, host, msgs)
    return info


def host_argv(paths: LabPaths, host: HostSpec, uptime_now: float) -> list[str]:
    ns = [
        "unshare",
        "--uts",
        "--mount",
        "--pid",
        "--time",
        f"--boottime=-{int(uptime_now)}",
        "--fork",
        "--kill-child",
        "--propagation",
        "private",
        "/bin/sh",
        str(paths.host_init),
        host.hostname,
        str(paths.host_root(host.name)),
        str(paths.host_dir(host.name) / "boot"),
    ]
    if host.netns:
        # nsenter, not `ip netns exec`: that one remounts /sys, and slurmd needs the real
        # /sys/fs/cgroup (bound into the host by services.sh)
        return ["nsenter", f"--net=/run/netns/{host.netns}", *ns]
    return [*ns, "-o", f"ListenAddress={host.address}"]


# ---------------------------------------------------------------- faults
def apply_effects(paths: LabPaths, host: HostSpec, eff: F.Effects) -> None:
    root = paths.host_root(host.name)
    now = str(int(time.time()))
    if eff.set or eff.add:
        update_state(root, {k: v.replace("{now}", now) for k, v in eff.set.items()}, eff.add)
    for (bdf, fname), text in eff.sysfs.items():
        atomic_write(root / "sys/bus/pci/devices" / bdf / fname, text)
    for path, text in eff.files.items():
        atomic_write(root / path.lstrip("/"), text, 0o755 if "/bin/" in path else 0o644)
    for bdf, kind, field, n in eff.aer:
        f = root / "sys/bus/pci/devices" / bdf / kind
        counts = F.parse_aer_file(f.read_text()) if f.exists() else {}
        counts[field] = counts.get(field, 0) + n
        atomic_write(f, F.aer_file(counts, kind))
    if eff.log:
        kernel_log(paths, host, eff.log)
    if eff.flags:
        flags = read_flags(paths, host.name)
        flags.update(eff.flags)
        write_flags(paths, host.name, flags)
        if eff.flags.get("broken-package"):
            atomic_write(root / "var/lib/gpusim/fail-install", "injected by fleet lab\n")
        if eff.flags.get("link-down"):
            set_link(host, up=False)
        if eff.flags.get("driver-not-loaded"):
            unload_driver(paths, host)
        if eff.flags.get("operator-driver"):
            operator_driver.install(root, init_pid(paths, host.name))


def unload_driver(paths: LabPaths, host: HostSpec) -> None:
    """Make the running host look as if the module were gone (no /proc/driver/nvidia, no nodes)."""
    pid = init_pid(paths, host.name)
    if pid is not None:
        drv = paths.host_root(host.name) / "proc/driver"
        run(
            [
                "nsenter",
                "-t",
                str(pid),
                "-m",
                "sh",
                "-c",
                'mount -o remount,rw "$1" && rm -rf "$1/nvidia" && mount -o remount,ro "$1"',
                "sh",
                drv,
            ],
            check=False,
        )
    for node in (paths.host_root(host.name) / "dev").glob("nvidia*"):
        node.unlink()


def init_pid(paths: LabPaths, name: str) -> int | None:
    """The host's PID 1 (sshd) as the controller sees it: the child of its `unshare`."""
    try:
        upid = int((paths.host_dir(name) / "pid").read_text())
        kids = Path(f"/proc/{upid}/task/{upid}/children").read_text().split()
        return int(kids[0]) if kids else None
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None


def reset_host(paths: LabPaths, host: HostSpec) -> None:
    root = paths.host_root(host.name)
    atomic_write(root / STATE, "\n".join(state_lines(host)) + "\n")
    for rel, text in sysfs_files(host).items():
        atomic_write(root / rel, text)
    (root / "var/lib/gpusim/fail-install").unlink(missing_ok=True)
    for path in F.FAULT_FILES:
        (root / path.lstrip("/")).unlink(missing_ok=True)
    flags = read_flags(paths, host.name)
    if flags.get("link-down"):
        set_link(host, up=True)
    if flags.get("operator-driver"):
        operator_driver.remove(root, init_pid(paths, host.name))
    write_flags(paths, host.name, {})


# ---------------------------------------------------------------- network
def check_subnet() -> None:
    """Refuse to start when 10.77.0.0/24 is already routed or addressed somewhere else."""
    net = ipaddress.ip_network(SUBNET)
    cp = run(["ip", "-j", "route", "show", "table", "all"], check=False)
    routes = json.loads(cp.stdout or b"[]") if cp.returncode == 0 else []
    for r in routes:
        dst = r.get("dst", "")
        if dst in ("default", "") or ":" in dst or r.get("dev") == BRIDGE:
            continue
        try:
            other = ipaddress.ip_network(dst, strict=False)
        except ValueError:
            continue
        if other.version == 4 and other.overlaps(net) and other.prefixlen > 0:
            raise CouldNotComplete(
                f"the lab subnet {SUBNET} overlaps route {dst} via {r.get('dev')}: refusing to "
                "start (use --mode loopback, or remove that route)"
            )


def setup_bridge() -> None:
    if run(["ip", "link", "show", BRIDGE], check=False).returncode != 0:
        run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    run(["ip", "addr", "replace", f"{BRIDGE_ADDR}/24", "dev", BRIDGE])
    run(["ip", "link", "set", BRIDGE, "up"])


def setup_host_net(host: HostSpec) -> None:
    assert host.netns and host.veth
    ns, veth = host.netns, host.veth
    if run(["ip", "netns", "exec", ns, "true"], check=False).returncode != 0:
        run(["ip", "netns", "add", ns])
    run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
    run(["ip", "link", "set", veth, "master", BRIDGE, "up"])
    run(["ip", "-n", ns, "addr", "add", f"{host.address}/24", "dev", "eth0"])
    run(["ip", "-n", ns, "link", "set", "lo", "up"])
    run(["ip", "-n", ns, "link", "set", "eth0", "up"])
    run(["ip", "-n", ns, "route", "add", "default", "via", BRIDGE_ADDR])


def set_link(host: HostSpec, up: bool) -> None:
    if host.veth is None:
        raise CouldNotComplete("link-down needs --mode netns (loopback hosts share one network)")
    run(["ip", "link", "set", host.veth, "up" if up else "down"])


def lab_links() -> list[str]:
    cp = run(["ip", "-o", "link", "show"], check=False)
    out = []
    for line in cp.stdout.decode().splitlines():
        parts = line.split(":", 2)
        if len(parts) > 1:
            name = parts[1].strip().split("@")[0]
            if name.startswith("fleetv"):
                out.append(name)
    return out


def teardown_net(state: LabState | None) -> None:
    """Remove the netns lab's network (the caller skips loopback labs, which own none)."""
    # delete our veths first: a namespace can outlive its last process for minutes while orphaned
    # TCP sockets time out, and it would keep the pair (and its address) alive until then
    for link in lab_links():
        run(["ip", "link", "del", link], check=False)
    cp = run(["ip", "netns", "list"], check=False)
    for line in cp.stdout.decode().splitlines():
        ns = line.split()[0] if line.split() else ""
        if ns.startswith("fleet-h"):
            run(["ip", "netns", "del", ns], check=False)
    if run(["ip", "link", "show", BRIDGE], check=False).returncode == 0:
        run(["ip", "link", "del", BRIDGE], check=False)
