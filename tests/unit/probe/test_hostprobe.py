"""The host probe as shipped: run as a subprocess, JSON out, validates into HostFacts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fleet.domain.facts import HostFacts
from fleet.probe import hostprobe

PROBE = Path(hostprobe.__file__)


def run_probe(*args: str, env: dict[str, str] | None = None) -> dict:
    out = subprocess.run(
        [sys.executable, str(PROBE), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
    )
    return json.loads(out.stdout)


def test_probe_on_this_machine_without_gpu() -> None:
    raw = run_probe("--no-frameworks")
    facts = HostFacts.model_validate(raw)
    assert facts.identity is not None and facts.identity.hostname
    assert facts.source in ("nvml", "nvidia-smi", "none")
    if facts.source == "none":  # no NVML here: the reasons are recorded, nothing raised
        assert "nvml" in raw["source_errors"]
        assert "driver_library" in facts.versions.unreadable
        assert facts.gpus == []
    assert facts.kernel_log is not None
    assert isinstance(raw["probe_cpu_ms"], float)


def test_probe_imports_nothing_from_fleet() -> None:
    text = PROBE.read_text()
    assert "import fleet" not in text and "from fleet" not in text


def _fake_root(tmp: Path) -> Path:
    (tmp / "proc/driver/nvidia").mkdir(parents=True)
    (tmp / "proc/driver/nvidia/version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.158.01  Release Build\n"
        "GCC version:  gcc version 12.2.0\n"
    )
    (tmp / "proc/sys/kernel/random").mkdir(parents=True)
    (tmp / "proc/sys/kernel/random/boot_id").write_text("boot-1\n")
    (tmp / "var/log").mkdir(parents=True)
    (tmp / "var/log/kern.log").write_text(
        "Sep 19 16:18:02 gpu-a kernel: [68183.1] NVRM: Xid (PCI:0000:19:00): 48, pid='<unknown>', "
        "name=<unknown>, An uncorrectable double bit error (DBE) has been detected\n"
        "Sep 19 16:18:03 gpu-a kernel: [68184.1] NVRM: GPU 0000:19:00.0: GPU has fallen off the "
        "bus.\n"
    )
    dev = tmp / "sys/bus/pci/devices/0000:19:00.0"
    dev.mkdir(parents=True)
    (dev / "vendor").write_text("0x10de\n")
    (dev / "class").write_text("0x030200\n")
    (dev / "aer_dev_correctable").write_text("RxErr 2\nBadTLP 0\nTOTAL_ERR_COR 2\n")
    (dev / "aer_dev_nonfatal").write_text("Undefined 0\nTOTAL_ERR_NONFATAL 0\n")
    (dev / "aer_dev_fatal").write_text("Undefined 0\nSurpriseDown 1\nTOTAL_ERR_FATAL 1\n")
    (tmp / "dev").mkdir()
    for n in ("nvidiactl", "nvidia0"):
        (tmp / "dev" / n).write_text("")
        os.chmod(tmp / "dev" / n, 0o666)
    (tmp / "etc/docker").mkdir(parents=True)
    (tmp / "etc/docker/daemon.json").write_text(
        '{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}'
    )
    return tmp


def test_probe_reads_a_fake_tree(tmp_path: Path) -> None:
    root = _fake_root(tmp_path)
    raw = run_probe("--root", str(root), "--kernel-log", "file", "--no-frameworks")
    facts = HostFacts.model_validate(raw)
    assert facts.versions.driver_kernel_module == "570.158.01"
    assert facts.versions.kernel_module_flavor == "open"
    kinds = [(e.kind, e.xid, e.pci) for e in facts.events()]
    assert kinds == [("xid", 48, "0000:19:00.0"), ("fallen_off_bus", None, "0000:19:00.0")]
    assert facts.kernel_log is not None and facts.kernel_log.cursor.startswith("file:")
    assert facts.aer is not None and facts.aer[0].total("fatal") == 1
    assert {n.path for n in facts.device_nodes or []} == {"/dev/nvidiactl", "/dev/nvidia0"}
    assert facts.container_runtime is not None and facts.container_runtime.configured
    # a second run from the cursor sees nothing new
    again = run_probe(
        "--root",
        str(root),
        "--kernel-log",
        "file",
        "--no-frameworks",
        "--since",
        facts.kernel_log.cursor,
    )
    assert again["kernel_log"]["events"] == []


def test_every_unreadable_fact_is_an_error_dict() -> None:
    h = hostprobe.Host("/nonexistent-root")
    assert hostprobe.is_err(h.read("/proc/driver/nvidia/version"))
    assert hostprobe.is_err(h.run(["/nonexistent/nvidia-smi"]))
    assert hostprobe.probe_aer(h, set())["error"] == "not_found"


def test_norm_pci() -> None:
    assert hostprobe.norm_pci("00000000:9B:00.0") == "0000:9b:00.0"
    assert hostprobe.norm_pci("PCI:0019:01:00") == "0019:01:00.0"
    assert hostprobe.norm_pci("9b:00.1") == "0000:9b:00.1"
    assert hostprobe.norm_pci("junk") is None


def test_kernel_log_shapes() -> None:
    line = "NVRM: Xid (PCI:0000:9b:00): 79, pid=0, GPU has fallen off the bus."
    shapes = [
        line,
        "[1084456.074562] " + line,
        "[Sun Feb 23 16:24:18 2025] " + line,
        "2025-02-23T16:24:18,470068+00:00 " + line,
        "2025-02-23T16:24:18+0000 gpu-a kernel: " + line,
        "Feb 23 16:24:18 gpu-a kernel: " + line,
        "Feb 23 16:24:18 gpu-a kernel: [1084456.074562] " + line,
        "kern  :warn  : 2025-01-21T02:21:33,498559+00:00 " + line,
        "<4>[  123.456789] " + line,
        "4,1227,437812449932,-;" + line,
        "[Feb23 16:24] " + line,
        "[  +0.000010] " + line,
    ]
    for s in shapes:
        evs = hostprobe.parse_kernel_log(s)
        assert [(e["kind"], e["xid"], e["pci"], e["line"]) for e in evs] == [
            ("xid", 79, "0000:9b:00.0", 1)
        ], s


def test_fallen_off_bus_without_xid_over_lines() -> None:
    text = (
        "[   10.1] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
        "[   10.1] NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
        "[   10.1] NVRM: fallen off the bus and is not responding to commands.\n"
        "[   10.2] NVRM: The NVIDIA probe routine failed for 1 device(s).\n"
    )
    evs = hostprobe.parse_kernel_log(text)
    assert [(e["kind"], e["pci"], e["line"], e["device_id"]) for e in evs] == [
        ("fallen_off_bus", "0000:b3:00.0", 1, "10de:26b5")
    ]


def test_wrapped_continuation_lines_join() -> None:
    text = (
        "[Fri Apr  5 21:29:39 2024] NVRM: GPU 0000:a1:00.0: GPU has fallen off the bus.\n"
        "[Fri Apr  5 21:29:39 2024] NVRM: A GPU crash dump has been created. If possible, run\n"
        "                           NVRM: nvidia-bug-report.sh as root\n"
        "[1.0] pcieport 0000:00:03.0: AER: Multiple Uncorrected (Fatal) error received: "
        "0000:00:03.0\n"
        "[1.0] pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), "
        "type=Transaction Layer, (Requester ID)\n"
        "[1.0] pcieport 0000:00:03.0:   device [8086:6f08] error status/mask=00004020/00000000\n"
        "[1.0] pcieport 0000:00:03.0:    [ 5] SDES                  \n"
        "[1.0] pcieport 0000:00:03.0:    [14] CmpltTO                (First)\n"
    )
    evs = hostprobe.parse_kernel_log(text)
    assert [(e["kind"], e["severity"], e["line"]) for e in evs] == [
        ("fallen_off_bus", "hardware", 1),
        ("aer", "fatal", 5),
    ]
    assert evs[1]["bits"] == ["SDES", "CmpltTO"] and evs[1]["device_id"] == "8086:6f08"


def test_parse_dpkg_hold_state() -> None:
    text = (
        "nvidia-driver-550\t550.54.15-0ubuntu1\thold ok installed\n"
        "libnvidia-compute-550:amd64\t550.54.15-0ubuntu1\tinstall ok installed\n"
        "vim\t9.0\tinstall ok installed\n"
        "cuda-toolkit-12-4\t12.4.1-1\tdeinstall ok config-files\n"
    )
    assert hostprobe.parse_dpkg(text) == [
        {"name": "nvidia-driver-550", "version": "550.54.15-0ubuntu1", "held": True},
        {"name": "libnvidia-compute-550", "version": "550.54.15-0ubuntu1", "held": False},
    ]


def test_parse_rpm_versionlock() -> None:
    items = hostprobe.parse_rpm(
        "nvidia-driver\t3:550.54.15-1.el9\nkernel\t0:5.14\n", "3:nvidia-driver-550.54.15-1.el9.*\n"
    )
    assert items == [{"name": "nvidia-driver", "version": "3:550.54.15-1.el9", "held": True}]


def test_first_probe_reads_only_the_current_boot_of_kern_log() -> None:
    from fleet.probe.hostprobe import current_boot

    old_boot = (b"Nov 30 07:00:00 h kernel: [    0.000000] Linux version 6.1.0\n"
                b"Nov 30 07:00:09 h kernel: [    9.1] NVRM: Xid (PCI:0000:18:00): 79, GPU has "
                b"fallen off the bus.\n")
    new_boot = (b"Nov 30 07:10:00 h kernel: [    0.000000] Linux version 6.1.0\n"
                b"Nov 30 07:10:02 h kernel: [    2.0] nvidia: loading out-of-tree module\n")
    assert current_boot(old_boot + new_boot) == new_boot
    assert current_boot(b"no boot marker\n") == b"no boot marker\n"


ROCKY = 'NAME="Rocky Linux"\nID="rocky"\nID_LIKE="rhel centos fedora"\nVERSION_ID="9.4"\n'
UBUNTU = 'NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID="22.04"\n'


class _BothDatabases(hostprobe.Host):
    """A host with dpkg and rpm both installed (EPEL ships dpkg), each holding something."""

    def __init__(self, root: Path, os_release: str) -> None:
        super().__init__(str(root))
        (root / "etc").mkdir(parents=True, exist_ok=True)
        (root / "etc/os-release").write_text(os_release)
        self.asked: list[str] = []

    def run(self, argv, timeout=hostprobe.CMD_TIMEOUT_S):  # type: ignore[no-untyped-def]
        self.asked.append(argv[0])
        if argv[0] == "dpkg-query":
            return (0, "nvidia-driver-580-open\t580.95.05-1\thold ok installed\n", "")
        return (0, "nvidia-driver\t3:580.95.05-1.el9\n", "")


def test_an_el_host_with_dpkg_installed_is_read_from_rpm(tmp_path: Path) -> None:
    h = _BothDatabases(tmp_path, ROCKY)
    got = hostprobe.probe_packages(h)
    assert got["manager"] == "rpm" and h.asked == ["rpm"]
    assert got["items"] == [{"name": "nvidia-driver", "version": "3:580.95.05-1.el9",
                             "held": False}]


def test_a_debian_family_host_is_read_from_dpkg_first(tmp_path: Path) -> None:
    h = _BothDatabases(tmp_path, UBUNTU)
    assert hostprobe.probe_packages(h)["manager"] == "dpkg" and h.asked == ["dpkg-query"]


def test_package_managers_from_os_release() -> None:
    assert hostprobe.package_managers(ROCKY) == ["rpm", "dpkg"]
    assert hostprobe.package_managers('ID="almalinux"\nID_LIKE="rhel centos fedora"\n')[0] == "rpm"
    assert hostprobe.package_managers(UBUNTU) == ["dpkg", "rpm"]
    assert hostprobe.package_managers("") == ["dpkg", "rpm"]  # unknown: dpkg, then rpm


def test_a_lock_on_a_longer_name_does_not_hold_its_prefix() -> None:
    """dnf versionlock entries are `name-[epoch:]version-release.*`: the lock of
    nvidia-container-toolkit-base, datacenter-gpu-manager-4-core or cuda-toolkit-12-8 holds
    that package only, not nvidia-container-toolkit, datacenter-gpu-manager or cuda-toolkit-12."""
    rpm = ("nvidia-container-toolkit\t0:1.17.8-1\nnvidia-container-toolkit-base\t0:1.18.0-1\n"
           "datacenter-gpu-manager\t1:3.3.6-1\ncuda-toolkit-12\t0:12.8.1-1\n")
    locks = ("nvidia-container-toolkit-base-0:1.18.0-1.*\n"
             "datacenter-gpu-manager-4-core-1:4.4.1-1.*\n"
             "cuda-toolkit-12-8-0:12.8.1-1.*\n")
    held = {p["name"]: p["held"] for p in hostprobe.parse_rpm(rpm, locks)}
    assert held == {"nvidia-container-toolkit": False, "nvidia-container-toolkit-base": True,
                    "datacenter-gpu-manager": False, "cuda-toolkit-12": False}
    assert hostprobe.parse_lock_entry("cuda-toolkit-12-8-0:12.8.1-1.*") == \
        ("cuda-toolkit-12-8", "0:12.8.1-1")
    assert hostprobe.parse_lock_entry("3:nvidia-driver-550.54.15-1.el9.*") == \
        ("nvidia-driver", "550.54.15-1.el9")
