"""The lab's boot chain: installed kernels, GRUB's default entry, the nvidia module per kernel,
Secure Boot; what the pre-reboot gate reads, and what a lab reboot boots.

Every lab host has one kernel, `KERNEL` (/boot/vmlinuz-KERNEL, headers in
/lib/modules/KERNEL/build), and fake `modinfo` and `mokutil` in /usr/local/sbin that answer in
the real tools' formats (tests/data/boot/SOURCES.md) from the host's files: an nvidia module
exists for a kernel when a driver package is installed (its version is the module the next boot
loads, /var/lib/gpusim/module.pending) and the kernel has headers, as DKMS builds it; it is
unsigned; Secure Boot is on when /var/lib/gpusim/secureboot exists.

Faults (`fleet lab inject`): `kernel-without-module` installs a newer kernel without headers and
makes it GRUB's saved default entry (GRUB_DEFAULT=saved, grubenv saved_entry), so no driver
install builds a module for it; `secure-boot-unsigned` turns Secure Boot on. `fleet lab reset`
removes their files. The lab's repositories also offer the kernel's packages, as a distribution
mirror does (`repo.kernel_debs`, `rpmrepo.kernel_rpms`: the running kernel's and a newer
one's, without payload); a test installs them on a host to see a pool's kernel hold keep the
newer one off.
A lab reboot boots the default entry's kernel (`/proc/sys/kernel/osrelease`
inside the host says which); booted into a kernel without a loadable module, the host has no
driver: no /proc/driver/nvidia, NVML fails to initialise, no GPUs.
"""

from __future__ import annotations

from pathlib import Path

from fleet.lab import gpustate
from fleet.probe import hostprobe as P

KERNEL = "6.1.0-18-amd64"
NEWER = "6.1.0-31-amd64"
SECUREBOOT = "var/lib/gpusim/secureboot"

GRUBENV = "/boot/grub/grubenv"
GRUB_DEFAULT = "/etc/default/grub.d/90-fleet-lab.cfg"
NEWER_IMAGE = f"/boot/vmlinuz-{NEWER}"
FAULT_FILES = (GRUBENV, GRUB_DEFAULT, NEWER_IMAGE, "/" + SECUREBOOT)
"""The files the two faults write; `fleet lab reset` removes them."""


def grubenv(entry: str) -> str:
    """A GRUB environment block as grub-editenv writes it: 1024 bytes, padded with '#'."""
    body = f"# GRUB Environment Block\nsaved_entry={entry}\n"
    return body + "#" * (1024 - len(body))


def fault_files(name: str) -> dict[str, str]:
    """Host files of a boot-chain fault."""
    if name == "kernel-without-module":
        entry = (f"gnulinux-advanced-lab>gnulinux-{NEWER}-advanced-lab")
        return {NEWER_IMAGE: "", GRUB_DEFAULT: "GRUB_DEFAULT=saved\n", GRUBENV: grubenv(entry)}
    if name == "secure-boot-unsigned":
        return {"/" + SECUREBOOT: "1\n"}
    raise KeyError(name)


MODINFO = r'''#!/usr/bin/python3
"""FAKE modinfo (fleet lab): `modinfo -k KVER nvidia` in kmod's format, from the lab's driver
state. A module exists for KVER when a driver package left one pending and KVER has headers
(DKMS builds it then); it is unsigned."""
import os, sys

args = sys.argv[1:]
kver = os.uname().release
try:
    with open("/proc/sys/kernel/osrelease") as f:
        kver = f.read().strip() or kver
except OSError:
    pass
if "-k" in args:
    i = args.index("-k")
    kver = args[i + 1]
    del args[i:i + 2]
name = args[-1] if args else ""
ver = ""
try:
    with open("/var/lib/gpusim/module.pending") as f:
        ver = f.read().strip()
except OSError:
    pass
conf = {}
try:
    with open("/usr/share/gpusim/driver.conf") as f:
        conf = dict(l.strip().split("=", 1) for l in f if "=" in l)
except OSError:
    pass
ok = (name == "nvidia" and ver and os.path.exists("/boot/vmlinuz-" + kver)
      and os.path.isdir("/lib/modules/%s/build" % kver))
if not ok:
    sys.stderr.write("modinfo: ERROR: Module %s not found.\n" % name)
    sys.exit(1)
lic = "Dual MIT/GPL" if conf.get("flavor") == "open" else "NVIDIA"
rows = [("filename", "/lib/modules/%s/updates/dkms/nvidia.ko" % kver),
        ("firmware", "nvidia/%s/gsp_tu10x.bin" % ver), ("alias", "char-major-195-*"),
        ("version", ver), ("supported", "external"), ("license", lic),
        ("srcversion", "0F1A2B3C4D5E6F7A8B9C0D1"), ("alias", "pci:v000010DEd*sv*sd*bc03sc02i00*"),
        ("alias", "pci:v000010DEd*sv*sd*bc03sc00i00*"), ("depends", ""), ("retpoline", "Y"),
        ("name", "nvidia"), ("vermagic", "%s SMP preempt mod_unload modversions " % kver),
        ("parm", "NVreg_ResmanDebugLevel:int"), ("parm", "NVreg_ModifyDeviceFiles:int")]
for k, v in rows:
    sys.stdout.write("%-16s%s\n" % (k + ":", v))
'''

MOKUTIL = r'''#!/bin/sh
# FAKE mokutil (fleet lab): the Secure Boot state in mokutil's words; no MOK is enrolled.
case "$1" in
  --sb-state)
    if [ -e /var/lib/gpusim/secureboot ]; then echo "SecureBoot enabled"
    else echo "SecureBoot disabled"; fi ;;
  --list-enrolled|-l)
    echo "MokListRT is empty"; exit 1 ;;
  *) echo "mokutil (fleet lab fake): $1 not supported" >&2; exit 1 ;;
esac
'''


def write_layer(layer: Path, base: Path | None = None) -> None:
    """The boot chain every lab host starts with: one kernel with headers, the fake tools.
    On a merged-/usr base (/lib -> usr/lib) the modules go under usr/lib: a real `lib`
    directory in the layer would hide the base's /lib and with it the dynamic loader."""
    (layer / "boot").mkdir(parents=True, exist_ok=True)
    (layer / "boot" / f"vmlinuz-{KERNEL}").write_text("")
    merged = base is not None and (base / "lib").is_symlink()
    modules = "usr/lib/modules" if merged else "lib/modules"
    (layer / modules / KERNEL / "build").mkdir(parents=True, exist_ok=True)
    for name, text in (("modinfo", MODINFO), ("mokutil", MOKUTIL),
                       ("systemctl", gpustate.SYSTEMCTL)):
        p = layer / "usr/local/sbin" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        p.chmod(0o755)


def booting(root: Path) -> tuple[str, bool]:
    """(kernel the host boots now, whether its nvidia module can load): GRUB's default entry
    resolved as the probe resolves it; the module loads when that kernel has one (headers, a
    pending driver) and Secure Boot is off (the lab's modules are unsigned)."""
    h = P.Host(str(root))
    nxt = P.read_next_kernel(h, P.installed_kernels(h))[0]
    kernel = nxt if isinstance(nxt, str) else KERNEL
    has_module = ((root / "var/lib/gpusim/module.pending").exists()
                  and (root / "boot" / f"vmlinuz-{kernel}").exists()
                  and (root / "lib/modules" / kernel / "build").is_dir())
    return kernel, has_module and not (root / SECUREBOOT).exists()


KERNEL_UPSTREAM = {KERNEL: "6.1.76", NEWER: "6.1.128"}
"""Debian's upstream version of each lab kernel's ABI (the linux-image-6.1.0-18-amd64 package
is version 6.1.76-1 on Debian 12)."""
