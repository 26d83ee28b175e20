"""The probe lists the NVIDIA GPUs the PCI bus sees (issue 31, defect 2), under a fake root."""

from __future__ import annotations

from pathlib import Path

from fleet.domain.facts import HostFacts
from fleet.probe.hostprobe import Host, probe_pci_gpus, probe_upgrade_guard


def _device(root: Path, bdf: str, vendor: str, cls: str, device: str = "0x2330") -> None:
    d = root / "sys" / "bus" / "pci" / "devices" / bdf
    d.mkdir(parents=True)
    (d / "vendor").write_text(vendor + "\n")
    (d / "class").write_text(cls + "\n")
    (d / "device").write_text(device + "\n")


def test_nvidia_display_and_3d_controllers_only(tmp_path: Path) -> None:
    _device(tmp_path, "0000:1b:00.0", "0x10de", "0x030200")  # H100: 3D controller
    _device(tmp_path, "0000:3b:00.0", "0x10de", "0x030000")  # VGA-compatible
    _device(tmp_path, "0000:05:00.0", "0x10de", "0x068000", "0x22a3")  # NVSwitch: a bridge
    _device(tmp_path, "0000:00:02.0", "0x8086", "0x030000")  # another vendor's display
    got = probe_pci_gpus(Host(str(tmp_path)))
    assert [d["pci"] for d in got] == ["0000:1b:00.0", "0000:3b:00.0"]
    facts = HostFacts.model_validate({"pci_gpus": got})
    assert facts.pci_gpus is not None and facts.pci_gpus[0].device_id == "0x2330"


def test_an_unlistable_bus_is_unreadable_not_empty(tmp_path: Path) -> None:
    got = probe_pci_gpus(Host(str(tmp_path)))  # no /sys/bus/pci/devices at all
    facts = HostFacts.model_validate({"pci_gpus": got})
    assert facts.pci_gpus is None and "pci_gpus" in facts.unreadable


def test_the_upgrade_guard_text_is_collected(tmp_path: Path) -> None:
    conf = tmp_path / "etc" / "apt" / "apt.conf.d"
    conf.mkdir(parents=True)
    (conf / "51fleet-nvidia-unattended").write_text(
        'Unattended-Upgrade::Package-Blacklist {\n    "nvidia\\-driver\\-580$";\n};\n')
    (conf / "20auto-upgrades").write_text('APT::Periodic::Unattended-Upgrade "1";\n')
    got = probe_upgrade_guard(Host(str(tmp_path)), {"dpkg"})
    assert list(got["apt_conf"]) == ["/etc/apt/apt.conf.d/51fleet-nvidia-unattended"]
    assert probe_upgrade_guard(Host(str(tmp_path)), {"rpm"}) == {"dnf_automatic": None}
