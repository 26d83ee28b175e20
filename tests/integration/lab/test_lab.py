"""The lab end to end: SSH, packages and NVML, reboot, every fault, teardown."""

from __future__ import annotations

import re
import time

import paramiko
import pytest

from fleet.lab import lab
from fleet.lab.model import PROFILES

pytestmark = pytest.mark.lab

GOLDEN = ("nvidia-driver-580-open", "580.95.05")
OLD = ("nvidia-driver-570-open", "570.133.20")
SYSLOG = re.compile(r"^[A-Z][a-z]{2} [ 1-3][0-9] \d\d:\d\d:\d\d lab-h\d+ kernel: \[ *\d+\.\d{6}\] ")


@pytest.fixture(scope="module", autouse=True)
def _clean_after(lab_paths, lab_state):  # noqa: ANN001, ANN202
    """The session lab runs Slurm, whose health check (`fleet node-check`) drains a node showing
    an injected fault: leave every host without faults and without such a drain."""
    yield
    for h in lab_state.hosts:
        lab.reset(lab_paths, h.name)


def test_strict_host_key_checking(hosts, lab_paths, lab_state) -> None:
    h1 = hosts["h1"]
    assert h1.sh("hostname")[1].strip() == "lab-h1"
    c = paramiko.SSHClient()
    c.set_missing_host_key_policy(paramiko.RejectPolicy())  # no known_hosts loaded: must refuse
    with pytest.raises(paramiko.SSHException):
        c.connect(
            h1.spec.address,
            username="root",
            key_filename=str(lab_paths.client_key),
            timeout=5,
            allow_agent=False,
            look_for_keys=False,
        )
    lines = lab_paths.known_hosts.read_text().splitlines()
    keys = {ln.split()[2] for ln in lines}
    assert len(lines) == len(keys) == len(lab_state.hosts), "per-host host keys"


def test_hosts_have_what_the_probe_reads(hosts) -> None:
    h = hosts["h3"]  # A100 x8
    out = h.nvml()
    assert out == {"driver": GOLDEN[1], "count": PROFILES["A100"].count}
    assert "Kernel Module  580.95.05" in h.sh("cat /proc/driver/nvidia/version")[1]
    assert h.sh("ls /dev/nvidia0 /dev/nvidiactl /dev/nvidia-uvm")[0] == 0
    aer = h.sh("cat /sys/bus/pci/devices/0000:18:00.0/aer_dev_fatal")[1]
    assert "TOTAL_ERR_FATAL 0" in aer
    up = h.sh("readlink -f /sys/bus/pci/devices/0000:18:00.0/..")[1].strip()
    assert up.endswith("0000:17:00.0")
    log = h.sh("cat /var/log/kern.log")[1].splitlines()
    assert any("NVRM: loading NVIDIA UNIX x86_64 Kernel Module  580.95.05" in ln for ln in log)
    assert all(SYSLOG.match(ln) for ln in log)


def _pin_install(h, pkg: str, ver: str) -> tuple[int, str, str]:
    return h.sh(
        f"printf 'Package: nvidia-driver-*\\nPin: version {ver}-1\\nPin-Priority: 1001\\n' "
        f"> /etc/apt/preferences.d/fleet-driver && apt-get update -qq && "
        f"DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --allow-downgrades "
        f"{pkg}={ver}-1",
        check=False,
        timeout=120,
    )


def _bench(h) -> float:
    import json

    return float(json.loads(h.sh("fleet-lab-bench --duration 0.4")[1])["throughput"])


def test_switch_branch_mismatch_until_reboot_then_rollback(hosts) -> None:
    h = hosts["h2"]
    h.release_pins()  # a pin or hold from an earlier `fleet apply` would keep the branch
    fast = _bench(h)
    rc, out, err = _pin_install(h, *OLD)
    assert rc == 0, err + out
    # the package changed the library at once; the kernel module only changes at the next boot
    assert h.nvml() == {"error": "NVMLError_LibRmVersionMismatch"}
    assert "version mismatch" in h.sh("nvidia-smi", check=False)[1]
    assert h.sh("dpkg-query -W -f='${Version}' nvidia-driver-570-open")[1] == "570.133.20-1"
    st = h.sh("dpkg-query -W -f='${db:Status-Status}' nvidia-driver-580-open", check=False)[1]
    assert st != "installed", "Conflicts removed the other branch"
    h.reboot_and_wait()
    assert h.nvml()["driver"] == OLD[1]
    slow = _bench(h)
    assert 0.6 < slow / fast < 0.9, (slow, fast)  # r550 carries perf factor 0.75 in this lab
    # rollback to the golden release
    rc, out, err = _pin_install(h, *GOLDEN)
    assert rc == 0, err + out
    assert h.nvml() == {"error": "NVMLError_LibRmVersionMismatch"}
    h.reboot_and_wait()
    assert h.nvml()["driver"] == GOLDEN[1]


def test_reboot_new_boot_state_persists(hosts) -> None:
    h = hosts["h3"]
    h.sh("echo kept > /root/marker")
    before_boots = h.sh("grep -c 'Linux version' /var/log/kern.log")[1].strip()
    old = h.boot_id()
    new = h.reboot_and_wait()
    assert new != old
    assert h.sh("cat /root/marker")[1].strip() == "kept"
    assert int(h.sh("grep -c 'Linux version' /var/log/kern.log")[1]) == int(before_boots) + 1
    assert float(h.sh("cut -d' ' -f1 /proc/uptime")[1]) < 30
    assert h.nvml()["driver"] == GOLDEN[1]


def _nv(h, expr: str) -> object:
    return h.py(f"""
        import json, pynvml as n
        n.nvmlInit()
        def H(i): return n.nvmlDeviceGetHandleByIndex(i)
        try:
            print(json.dumps({expr}))
        except n.NVMLError as e:
            print(json.dumps(type(e).__name__))
    """)


def _log(h) -> str:
    return h.sh("cat /var/log/kern.log")[1]


# fault spec, check(host) -> None ; all on h1 (8 x H100), reset after each
FAULT_CASES = {
    "ecc-corrected:gpu=1,count=7": lambda h: (
        _nv(
            h,
            "[n.nvmlDeviceGetTotalEccErrors(H(1), 0, 0), n.nvmlDeviceGetTotalEccErrors(H(1), 0, 1),"
            " n.nvmlDeviceGetTotalEccErrors(H(0), 0, 0)]",
        )
        == [7, 7, 0]
    ),
    "ecc-uncorrected:gpu=0": lambda h: (
        _nv(
            h,
            "[n.nvmlDeviceGetTotalEccErrors(H(0), 1, 0), list(n.nvmlDeviceGetRemappedRows(H(0)))]",
        )
        == [1, [0, 1, 1, 0]]
        and "Xid (PCI:0000:18:00): 48," in _log(h)
    ),
    "remap-pending:gpu=4": lambda h: (
        _nv(h, "list(n.nvmlDeviceGetRemappedRows(H(4)))") == [0, 1, 1, 0]
        and "Xid (PCI:0000:9a:00): 63," in _log(h)
    ),
    "remap-failure:gpu=4": lambda h: (
        _nv(h, "list(n.nvmlDeviceGetRemappedRows(H(4)))")[3] == 1  # type: ignore[index]
        and "Xid (PCI:0000:9a:00): 64," in _log(h)
    ),
    "pcie-downtrain:gpu=3,gen=3,width=8": lambda h: (
        _nv(
            h,
            "[n.nvmlDeviceGetCurrPcieLinkGeneration(H(3)), n.nvmlDeviceGetCurrPcieLinkWidth(H(3)),"
            " n.nvmlDeviceGetMaxPcieLinkGeneration(H(3)), n.nvmlDeviceGetMaxPcieLinkWidth(H(3))]",
        )
        == [3, 8, 5, 16]
        and h.sh("cat /sys/bus/pci/devices/0000:5d:00.0/current_link_width")[1].strip() == "8"
    ),
    "thermal:gpu=0": lambda h: (
        _nv(
            h,
            "[n.nvmlDeviceGetTemperature(H(0), 0),"
            " n.nvmlDeviceGetCurrentClocksEventReasons(H(0)) & 0x40]",
        )
        == [92, 0x40]
    ),
    "power:gpu=0": lambda h: (
        _nv(
            h,
            "[n.nvmlDeviceGetPowerUsage(H(0)) == n.nvmlDeviceGetEnforcedPowerLimit(H(0)),"
            " n.nvmlDeviceGetCurrentClocksEventReasons(H(0)) & 0x4]",
        )
        == [True, 4]
    ),
    "xid:gpu=2,code=13": lambda h: any(
        SYSLOG.match(ln) and "NVRM: Xid (PCI:0000:3a:00): 13, pid='<unknown>'" in ln
        for ln in _log(h).splitlines()
    ),
    "aer-corrected:gpu=0,count=25": lambda h: (
        "TOTAL_ERR_COR 25" in h.sh("cat /sys/bus/pci/devices/0000:18:00.0/aer_dev_correctable")[1]
        and "TOTAL_ERR_COR 25"
        in h.sh("cat /sys/bus/pci/devices/0000:17:00.0/aer_dev_correctable")[1]
        and "AER: Multiple Correctable error message received from 0000:18:00.0" in _log(h)
    ),
    "aer-fatal:gpu=0": lambda h: (
        "TOTAL_ERR_FATAL 1" in h.sh("cat /sys/bus/pci/devices/0000:18:00.0/aer_dev_fatal")[1]
        and "AER: Uncorrectable (Fatal) error message received" in _log(h)
    ),
    "gpu-lost:gpu=2": lambda h: (
        _nv(h, "n.nvmlDeviceGetUUID(H(2))") == "NVMLError_GpuIsLost"
        and "GPU has fallen off the bus." in _log(h)
        and isinstance(_nv(h, "n.nvmlDeviceGetUUID(H(1))"), str)
    ),
    "slow-bench:factor=0.5": lambda h: _bench(h) < 0.7 * PROFILES["H100"].base_throughput,
    "gpu0.temp=77": lambda h: _nv(h, "n.nvmlDeviceGetTemperature(H(0), 0)") == 77,
}


@pytest.mark.parametrize("spec", list(FAULT_CASES))
def test_fault_is_visible_on_the_host(spec, hosts, lab_paths) -> None:
    h = hosts["h1"]
    lab.inject(lab_paths, "h1", [spec])
    try:
        assert FAULT_CASES[spec](h), spec
    finally:
        lab.reset(lab_paths, "h1")
    assert h.nvml()["driver"] == GOLDEN[1]


def test_steady_ecc_growth(hosts, lab_paths) -> None:
    h = hosts["h1"]
    lab.inject(lab_paths, "h1", ["ecc-growth:gpu=0,per_hour=36000"])
    try:
        a = _nv(h, "n.nvmlDeviceGetTotalEccErrors(H(0), 0, 0)")
        time.sleep(1.2)
        b = _nv(h, "n.nvmlDeviceGetTotalEccErrors(H(0), 0, 0)")
        assert isinstance(a, int) and isinstance(b, int) and b > a
    finally:
        lab.reset(lab_paths, "h1")


def test_driver_not_loaded_until_reset_and_reboot(hosts, lab_paths) -> None:
    h = hosts["h3"]
    lab.inject(lab_paths, "h3", ["driver-not-loaded"])
    assert h.nvml() == {"error": "NVMLError_DriverNotLoaded"}
    assert h.sh("ls /proc/driver/nvidia", check=False)[0] != 0
    assert h.sh("ls /dev/nvidia0", check=False)[0] != 0
    h.reboot_and_wait()
    assert h.nvml() == {"error": "NVMLError_DriverNotLoaded"}, "the fault survives a reboot"
    lab.reset(lab_paths, "h3")
    h.reboot_and_wait()
    assert h.nvml()["driver"] == GOLDEN[1]


def test_broken_package_makes_apt_fail(hosts, lab_paths) -> None:
    h = hosts["h3"]
    h.release_pins()  # a pin or hold from an earlier `fleet apply` would refuse the install
    lab.inject(lab_paths, "h3", ["broken-package"])
    try:
        rc, out, err = _pin_install(h, *OLD)
        assert rc == 100, (rc, out, err)
        assert "Bad return status for module build" in out + err
    finally:
        lab.reset(lab_paths, "h3")
    rc, out, err = _pin_install(h, *GOLDEN)
    assert rc == 0, out + err
    h.sh("dpkg --configure -a && apt-get -f install -y -qq")
    h.reboot_and_wait()
    assert h.nvml()["driver"] == GOLDEN[1]


def test_link_down_makes_host_unreachable(hosts, lab_paths, lab_state) -> None:
    spec = lab_state.host("h3")
    lab.inject(lab_paths, "h3", ["link-down"])
    try:
        assert not lab.ssh_banner(spec.address, timeout=1.0)
    finally:
        lab.reset(lab_paths, "h3")
    deadline = time.monotonic() + 10
    while not lab.ssh_banner(spec.address, timeout=1.0):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    hosts["h3"].close()


def test_reboot_that_never_comes_back(hosts, lab_paths, lab_state) -> None:
    h, spec = hosts["h3"], lab_state.host("h3")
    lab.inject(lab_paths, "h3", ["reboot-hang"])
    h.sh("( sleep 0.3 && reboot ) </dev/null >/dev/null 2>&1 &")
    h.close()
    time.sleep(2.5)
    assert not lab.ssh_banner(spec.address, timeout=0.5)
    lab.reset(lab_paths, "h3")
    deadline = time.monotonic() + 15
    while not lab.ssh_banner(spec.address, timeout=0.5):
        assert time.monotonic() < deadline, "host did not come back after reset"
        time.sleep(0.2)
    assert h.nvml()["driver"] == GOLDEN[1]


def test_model_server_latency_over_the_network(hosts, lab_state) -> None:
    import json
    import urllib.request

    spec = lab_state.host("h1")
    deadline = time.monotonic() + 10
    while True:
        try:
            body = urllib.request.urlopen(f"http://{spec.address}:8000/infer", timeout=3).read()
            break
        except OSError:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    out = json.loads(body)
    assert out["ok"] and out["driver"] == GOLDEN[1] and 5 < out["latency_ms"] < 50


def test_pyinfra_inventory_reads_the_lab(lab_paths, lab_state, project_root) -> None:
    import os
    import runpy

    os.environ["FLEET_LAB_DIR"] = str(lab_paths.run)
    try:
        inv = runpy.run_path(str(project_root / "inventories" / "lab.py"))
    finally:
        os.environ.pop("FLEET_LAB_DIR")
    assert [a for a, _ in inv["canary"]] == [lab_state.hosts[0].name]
    data = dict(inv["lab"])[lab_state.hosts[2].name]
    assert data["ssh_hostname"] == lab_state.hosts[2].address
    assert data["ssh_strict_host_key_checking"] == "yes"
    assert data["gpu_model"] == "A100" and data["gpu_count"] == 8 and data["unit"] == "rack1"


def test_down_twice_and_nothing_left(tmp_path) -> None:
    """A separate one-host loopback lab: down leaves nothing, and a second down is harmless."""
    from pathlib import Path

    from fleet.lab.paths import LabPaths

    root = Path(__file__).resolve().parents[3]
    paths = LabPaths(cache=LabPaths.from_env().cache, run=tmp_path / "lab")
    try:
        lab.up(
            paths,
            lab.UpConfig(
                hosts=1,
                mode="loopback",
                model_server=False,
                matrix=root / "matrices" / "example.yaml",
            ),
        )
        assert lab.ssh_banner(lab.load_state(paths).hosts[0].address)
    finally:
        assert lab.down(paths) == []
    assert not paths.run.exists()
    assert lab.down(paths) == []
