"""The lab's boot chain without root: what a lab reboot boots, with and without the faults
`kernel-without-module` and `secure-boot-unsigned`, and the fake tools' formats."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fleet.lab import boot as B
from fleet.lab import faults as F
from fleet.probe import hostprobe as P


def host(tmp: Path, *faults: str) -> Path:
    root = tmp / "root"
    B.write_layer(root)
    (root / "var/lib/gpusim").mkdir(parents=True, exist_ok=True)
    (root / "var/lib/gpusim/module.pending").write_text("580.95.05\n")
    for name in faults:
        for path, text in B.fault_files(name).items():
            p = root / path.lstrip("/")
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
    return root


def test_healthy_host_boots_its_kernel_with_the_module(tmp_path: Path) -> None:
    assert B.booting(host(tmp_path)) == (B.KERNEL, True)


def test_kernel_without_module_boots_the_newer_default_without_its_driver(tmp_path: Path
                                                                           ) -> None:
    root = host(tmp_path, "kernel-without-module")
    assert B.booting(root) == (B.NEWER, False)
    h = P.Host(str(root))
    assert P.read_next_kernel(h, P.installed_kernels(h))[:2] == (B.NEWER, "grubenv saved_entry")
    assert len((root / "boot/grub/grubenv").read_bytes()) == 1024


def test_secure_boot_unsigned_keeps_the_kernel_but_not_the_module(tmp_path: Path) -> None:
    assert B.booting(host(tmp_path, "secure-boot-unsigned")) == (B.KERNEL, False)


def test_faults_are_known_and_reset_removes_their_files() -> None:
    for name in ("kernel-without-module", "secure-boot-unsigned"):
        assert name in F.FAULTS
        assert set(B.fault_files(name)) <= set(F.FAULT_FILES)


def test_fake_mokutil_and_modinfo_speak_the_real_formats(tmp_path: Path) -> None:
    """The fake tools' output goes through the probe's parsers (the real-capture ones)."""
    sb = subprocess.run(["sh", "-c", B.MOKUTIL, "mokutil", "--sb-state"], capture_output=True,
                        text=True, check=True)
    assert P.parse_sb_state(sb.stdout) is False  # no /var/lib/gpusim/secureboot here
    script = tmp_path / "modinfo"
    script.write_text(B.MODINFO)
    missing = subprocess.run([sys.executable, str(script), "-k", "9.9.9-none", "nvidia"],
                             capture_output=True, text=True)
    assert missing.returncode == 1
    assert missing.stderr == "modinfo: ERROR: Module nvidia not found.\n"


def test_fake_modinfo_found_parses_like_the_real_one(tmp_path: Path) -> None:
    root = host(tmp_path)
    text = B.MODINFO
    for d in ("/var/lib/gpusim", "/usr/share/gpusim", "/boot/", "/lib/modules/"):
        text = text.replace(f'"{d}', f'"{root}{d}')
    script = tmp_path / "modinfo-rooted"
    script.write_text(text)
    out = subprocess.run([sys.executable, str(script), "-k", B.KERNEL, "nvidia"],
                         capture_output=True, text=True, check=True).stdout
    m = P.parse_modinfo(out)
    assert m["version"] == "580.95.05" and m["signer"] is None
    assert m["filename"] == f"{root}/lib/modules/{B.KERNEL}/updates/dkms/nvidia.ko"  # rooted
    assert m["vermagic"].startswith(B.KERNEL + " ")
