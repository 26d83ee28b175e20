"""The lab's fake GPUs keep node state with a real GPU's rules (fleet/lab/gpustate.py): settings
written through the fake nvidia-smi, read back through NVML and `-q -x`, and what a lab reboot
keeps (ECC and MIG mode) and forgets (everything else, MIG instances included). No root, no lab:
the fake NVML is built with gcc, the host's state file lives in a scratch root."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fleet.domain.facts import GpuFacts
from fleet.lab import faults as F
from fleet.lab import gpustate, hosts, nvml_build
from fleet.lab.model import HostSpec
from fleet.probe import hostprobe as P

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc (fake NVML)")

SMI = Path(__file__).parents[3] / "fleet" / "lab" / "nvml" / "nvidia_smi.py"


def _host(model: str) -> HostSpec:
    return HostSpec("h1", 1, "10.77.0.11", "h100", model, {"H100": 8, "A100": 8, "L40S": 4}[model],
                    "rack1")


@pytest.fixture(scope="module")
def libdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fakenvml")
    nvml_build.build(d)
    return d


class Gpu:
    """A lab host's GPU state in a scratch root, driven through the fake nvidia-smi."""

    def __init__(self, root: Path, libdir: Path, host: HostSpec) -> None:
        self.root, self.host = root, host
        (root / "var/lib/gpusim").mkdir(parents=True)
        (root / hosts.STATE).write_text("\n".join(hosts.state_lines(host)) + "\n")
        (root / "driver.conf").write_text("driver_version=580.95.05\ncuda_driver_version=13000\n")
        (root / "version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  "
                                      "580.95.05  Tue Mar  5 22:23:56 UTC 2024\n")
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("GPUSIM_")},
                    "LD_LIBRARY_PATH": str(libdir), "GPUSIM_STATE": str(root / hosts.STATE),
                    "GPUSIM_DRIVER_FILE": str(root / "driver.conf"),
                    "GPUSIM_PROC_VERSION": str(root / "version")}

    def smi(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        cp = subprocess.run([sys.executable, str(SMI), *args], env=self.env, capture_output=True,
                            text=True, timeout=60, check=False)
        assert (cp.returncode == 0) == ok, cp.stdout + cp.stderr
        return cp

    def xml(self) -> list[dict[str, object]]:
        gpus = P.parse_nvsmi_xml(self.smi("-q", "-x").stdout)["gpus"]
        assert isinstance(gpus, list)
        return gpus

    def nvml(self) -> list[dict[str, object]]:
        code = ("import json, sys\nfrom fleet.probe import hostprobe as P\n"
                "print(json.dumps(P.probe_nvml()[0]['gpus']))")
        cp = subprocess.run([sys.executable, "-c", code], env=self.env, capture_output=True,
                            text=True, timeout=60, check=True)
        return list(json.loads(cp.stdout))

    def reboot(self) -> None:
        """What fleet.lab.hosts.prepare_boot does to the GPU state."""
        kv = dict(hosts.read_kv(self.root / hosts.STATE))
        set_, drop = gpustate.boot_reset(kv, self.host.gpu_count)
        hosts.update_state(self.root, set_, drop=drop)


def test_settings_hold_until_a_reboot_forgets_them(tmp_path: Path, libdir: Path) -> None:
    g = Gpu(tmp_path, libdir, _host("H100"))
    low = g.smi("-i", "0", "-pl", "100", ok=False)
    assert "between 200.00 W and 700.00 W" in low.stdout  # outside min/max: refused
    g.smi("-i", "0", "-pl", "350")
    g.smi("-i", "0", "-e", "0")
    g.smi("-i", "1", "-lgc", "210,900")
    g.smi("-i", "0", "-c", "EXCLUSIVE_PROCESS")
    g.smi("-i", "2", "-pm", "0")
    g.smi("-i", "3", "-ac", "2619,1500")
    x = g.xml()
    assert x[0]["power_limit_w"] == 350.0 and x[1]["power_limit_w"] == 700.0
    assert (x[0]["ecc_mode_current"], x[0]["ecc_mode_pending"]) == (True, False)  # reboot due
    assert x[1]["clock_sm_mhz"] == 900 and "applications_clocks_setting" in x[1][
        "clock_event_reasons"]  # type: ignore[operator]
    assert x[0]["compute_mode"] == "exclusive_process" and x[1]["compute_mode"] == "default"
    assert x[2]["persistence_mode"] is False
    assert x[3]["clocks_applications_graphics_mhz"] == 1500
    assert x[3]["clocks_default_applications_graphics_mhz"] == 1980
    g.reboot()
    x = g.xml()
    assert (x[0]["ecc_mode_current"], x[0]["ecc_mode_pending"]) == (False, False)  # kept
    assert x[0]["power_limit_w"] == 700.0 and x[0]["compute_mode"] == "default"
    assert x[1]["clock_sm_mhz"] == 1980 and x[1]["clock_event_reasons"] == []
    assert x[2]["persistence_mode"] is True  # nvidia-persistenced turns it on at boot
    assert x[3]["clocks_applications_graphics_mhz"] == 1980


def test_mig_instances_go_at_reboot_mig_mode_stays(tmp_path: Path, libdir: Path) -> None:
    g = Gpu(tmp_path, libdir, _host("H100"))
    g.smi("mig", "-i", "0", "-cgi", "1g.10gb", ok=False)  # MIG mode is off
    g.smi("-i", "0", "-mig", "1")
    g.smi("mig", "-i", "0", "-cgi", "1g.10gb,1g.10gb,3g.40gb", "-C")
    assert g.smi("mig", "-i", "0", "-cgi", "4g.40gb", ok=False).stdout.endswith(
        "Insufficient Resources\n")  # 1 + 1 + 3 of 7 slices taken
    nv = g.nvml()[0]
    assert nv["mig_mode_current"] is True
    devs = nv["mig_devices"]
    assert [(d["gpu_instance_id"], d["profile"], d["gi_profile_id"], d["placement_start"])
            for d in devs] == [(1, "1g.10gb", 19, 0), (2, "1g.10gb", 19, 1), (3, "3g.40gb", 9, 2)]
    xml = g.xml()[0]["mig_devices"]  # -q -x names no profiles
    assert [d["gpu_instance_id"] for d in xml] == [1, 2, 3]  # type: ignore[union-attr]
    assert [d["profile"] for d in xml] == [None] * 3  # type: ignore[union-attr]
    g.reboot()
    nv = g.nvml()[0]
    assert nv["mig_mode_current"] is True and nv["mig_devices"] == []


def test_firmware_links_and_model_defaults_read_through_nvml(tmp_path: Path,
                                                             libdir: Path) -> None:
    h100 = Gpu(tmp_path / "h", libdir, _host("H100")).nvml()[0]
    assert h100["vbios_version"] == "96.00.99.00.01" and h100["inforom_image"] == "G520.0200.00.05"
    assert h100["gsp_firmware_version"] == "580.95.05" and h100["gsp_mode"] is True
    assert (h100["power_limit_min_w"], h100["power_limit_max_w"],
            h100["power_limit_default_w"]) == (200.0, 700.0, 700.0)
    assert [lk["active"] for lk in h100["nvlink_links"]] == [True] * 18
    assert h100["fabric_state"] == "completed" and h100["compute_mode"] == "default"
    model = GpuFacts.model_validate(h100)  # the facts model takes the probe's shape
    assert model.nvlink_active() == 18 and model.clocks_locked_graphics_mhz is None
    assert "clocks_locked_graphics_mhz" in model.unreadable
    l40s = Gpu(tmp_path / "l", libdir, _host("L40S"))
    nv = l40s.nvml()[0]
    assert nv["clocks_applications_graphics_mhz"]["error"] == "not_supported"
    assert nv["nvlink_links"] == [] and P.is_err(nv["fabric_state"])
    assert nv["mig_devices"] == [] and P.is_err(nv["clocks_locked_graphics_mhz"])
    l40s.smi("-ac", "9001,2520", ok=False)
    l40s.smi("-mig", "1", ok=False)


@pytest.mark.parametrize("spec,gpu,key,value", [
    ("ecc-off", 0, "ecc_mode_current", False),
    ("power-cap:gpu=1", 1, "power_limit_w", 200.0),
    ("clocks-locked:gpu=2,max=900", 2, "clock_sm_mhz", 900),
    ("compute-exclusive:gpu=3", 3, "compute_mode", "exclusive_process"),
    ("persistence-off", 0, "persistence_mode", False),
    ("mig-layout-lost", 0, "mig_mode_current", True),
    ("vbios-mismatch:gpu=4", 4, "vbios_version", "96.00.74.00.0B"),
    ("fm-mismatch", 0, "fabric_state", "not started"),
])
def test_node_faults_show_through_nvml(tmp_path: Path, libdir: Path, spec: str, gpu: int,
                                       key: str, value: object) -> None:
    host = _host("H100")
    g = Gpu(tmp_path, libdir, host)
    eff = F.effects(F.parse([spec], 8)[0], host)
    hosts.update_state(tmp_path, eff.set)
    assert g.nvml()[gpu][key] == value
    assert set(eff.files) <= set(F.FAULT_FILES)  # `fleet lab reset` removes them
    (tmp_path / hosts.STATE).write_text("\n".join(hosts.state_lines(host)) + "\n")  # lab reset
    assert g.nvml()[gpu][key] != value


def test_node_fault_parameters_are_checked() -> None:
    with pytest.raises(Exception) as e:
        F.parse(["vbios-mismatch:version=$(reboot)", "power-cap:watts=lots"], 8)
    assert "bad VBIOS" in str(e.value) and "watts must be a number" in str(e.value)


class _FmHost(P.Host):
    """A host root with a fake nv-fabricmanager and systemctl answers."""

    def __init__(self, root: Path, version: str | None, service: str) -> None:
        super().__init__(str(root))
        self.version, self.service = version, service

    def run(self, argv, timeout=10):  # type: ignore[no-untyped-def]
        if argv[0].endswith("nv-fabricmanager"):
            return 0, f"Fabric Manager version is : {self.version}\n", ""
        return (0 if self.service == "active" else 3), self.service + "\n", ""


def test_fabric_manager_is_read_where_there_is_one(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    assert P.probe_fabric_manager(_FmHost(tmp_path, None, "inactive")) is None  # no NVSwitch
    for i in range(4):
        (tmp_path / "dev" / f"nvidia-nvswitch{i}").touch()
    fm = P.probe_fabric_manager(_FmHost(tmp_path, None, "inactive"))
    assert fm["nvswitch_count"] == 4 and fm["version"]["error"] == "not_found"
    assert fm["running"] is False
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/nv-fabricmanager").touch()
    fm = P.probe_fabric_manager(_FmHost(tmp_path, "570.133.20", "failed"))
    assert (fm["version"], fm["service"], fm["running"]) == ("570.133.20", "failed", False)
    fm = P.probe_fabric_manager(_FmHost(tmp_path, "580.95.05", "active"))
    assert (fm["version"], fm["running"]) == ("580.95.05", True)
