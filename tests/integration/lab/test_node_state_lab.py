"""Node state on a real lab host over SSH: each node-state fault shows in the probe's facts and
`fleet lab reset` clears it; settings made with the host's nvidia-smi hold until a lab reboot,
which keeps ECC and MIG mode and forgets power limit, clocks and MIG instances. One H100 host."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from fleet.domain.facts import HostFacts
from fleet.domain.matrix.loader import load_matrix
from fleet.history import History, open_history
from fleet.jobs.probe import probe_inventory
from fleet.lab import lab

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[3]
HOST = "h2"  # H100 x8, pool h100


@pytest.fixture(scope="module")
def history(lab_paths, hosts, tmp_path_factory, monkeypatch_module) -> Iterator[History]:
    lab.reset(lab_paths, HOST)
    monkeypatch_module.setenv("FLEET_LAB_DIR", str(lab_paths.run))
    try:
        with open_history(str(tmp_path_factory.mktemp("h") / "fleet.db")) as h:
            yield h
    finally:
        lab.reset(lab_paths, HOST)
        # the boot unit `fleet apply` installs (node_plan.BOOT_*): later tests reboot a bare host
        hosts[HOST].sh("rm -f /etc/systemd/system/multi-user.target.wants/fleet-node-state"
                       ".service /etc/systemd/system/fleet-node-state.service "
                       "/usr/local/sbin/fleet-node-state")
        hosts[HOST].release_pins()  # what the test's `fleet apply` pinned
        hosts[HOST].reboot_and_wait()


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def facts(history: History) -> HostFacts:
    matrix = load_matrix(ROOT / "matrices" / "example.yaml").matrix
    (result,) = probe_inventory(ROOT / "inventories" / "lab.py", [HOST], history,
                                now=lambda: datetime.now(UTC), matrix=matrix, frameworks=False)
    assert result.reachable and result.facts is not None, result.error
    assert result.facts.source == "nvml"
    return result.facts


FAULTS = ["ecc-off:gpu=0", "power-cap:gpu=1", "clocks-locked:gpu=2,max=900",
          "compute-exclusive:gpu=3", "persistence-off:gpu=4", "mig-layout-lost:gpu=5",
          "vbios-mismatch:gpu=6", "fm-mismatch"]


def test_node_faults_show_in_the_probe_and_lab_reset_clears_them(history, lab_paths) -> None:
    healthy = facts(history)
    g = healthy.gpus
    assert g[0].ecc_mode_current and g[1].power_limit_w == 700.0 and g[3].compute_mode == "default"
    assert g[4].persistence_mode and not g[5].mig_mode_current
    assert g[6].vbios_version == "96.00.99.00.01" and g[2].clock_sm_mhz == 1980
    assert healthy.fabric_manager is not None and healthy.fabric_manager.nvswitch_count == 4
    assert g[0].fabric_state == "completed" and g[0].nvlink_active() == 18
    lab.inject(lab_paths, HOST, FAULTS)
    try:
        f = facts(history)
    finally:
        lab.reset(lab_paths, HOST)
    g = f.gpus
    assert (g[0].ecc_mode_current, g[0].ecc_mode_pending) == (False, False)
    assert g[1].power_limit_w == 200.0 and g[3].compute_mode == "exclusive_process"
    assert g[2].clock_sm_mhz == 900 and "applications_clocks_setting" in (
        g[2].clock_event_reasons or [])
    assert g[4].persistence_mode is False
    assert g[5].mig_mode_current is True and g[5].mig_devices == []
    assert g[6].vbios_version == "96.00.74.00.0B" and g[7].vbios_version == "96.00.99.00.01"
    assert f.fabric_manager is not None and f.fabric_manager.version == "570.133.20"
    assert f.fabric_manager.running is False and g[0].fabric_state == "not started"
    again = facts(history)
    assert again.gpus[1].power_limit_w == 700.0 and again.fabric_manager is not None
    assert again.fabric_manager.running is True and again.gpus[6].vbios_version == "96.00.99.00.01"


def test_a_reboot_keeps_ecc_and_mig_mode_and_forgets_the_rest(history, hosts) -> None:
    h = hosts[HOST]
    h.sh("nvidia-smi -i 0 -e 0 && nvidia-smi -i 1 -lgc 210,900 && nvidia-smi -i 3 -pl 300 && "
         "nvidia-smi -i 2 -mig 1 && nvidia-smi mig -i 2 -cgi 1g.10gb,3g.40gb -C")
    assert h.sh("nvidia-smi -i 3 -pl 150", check=False)[0] != 0  # below the H100's 200 W
    g = facts(history).gpus
    assert (g[0].ecc_mode_current, g[0].ecc_mode_pending) == (True, False)  # a reboot is due
    assert g[1].clock_sm_mhz == 900 and g[3].power_limit_w == 300.0
    assert [d.profile for d in g[2].mig_devices or []] == ["1g.10gb", "3g.40gb"]
    h.reboot_and_wait()
    g = facts(history).gpus
    assert (g[0].ecc_mode_current, g[0].ecc_mode_pending) == (False, False)  # applied, kept
    assert g[2].mig_mode_current is True and g[2].mig_devices == []  # instances gone
    assert g[1].clock_sm_mhz == 1980 and g[3].power_limit_w == 700.0  # forgotten
    h.sh("nvidia-smi -i 0 -e 1 && nvidia-smi -i 2 -mig 0")
    h.reboot_and_wait()
    g = facts(history).gpus
    assert g[0].ecc_mode_current is True and g[2].mig_mode_current is False


SETTABLE = ["ecc-off:gpu=0", "power-cap:gpu=1", "clocks-locked:gpu=2,max=900",
            "compute-exclusive:gpu=3", "persistence-off:gpu=4", "mig-layout-lost:gpu=5",
            "vbios-mismatch:gpu=6"]


def node_findings(history: History) -> dict[str, list[str]]:
    """`fleet probe` + `fleet check` against matrices/lab.yaml (its pools select profiles):
    the host's node.* findings that are not OK, check id -> messages."""
    matrix = load_matrix(ROOT / "matrices" / "lab.yaml").matrix
    (result,) = probe_inventory(ROOT / "inventories" / "lab.py", [HOST], history,
                                now=lambda: datetime.now(UTC), matrix=matrix, frameworks=False)
    assert result.reachable, result.error
    out: dict[str, list[str]] = {}
    for f in result.findings:
        if f.check.startswith("node.") and f.severity != "ok":
            out.setdefault(f.check, []).append(f.message)
    return out


def current_release(matrix_path: Path) -> str:
    """The release h2 runs now (its packages), so that `fleet apply` changes no package."""
    from fleet.domain.pinning import release_of
    from fleet.remote.backend import SshBackend

    matrix = load_matrix(matrix_path).matrix
    backend = SshBackend(ROOT / "inventories" / "lab.py", [HOST])
    (plan,) = backend.plan([HOST], matrix.golden_for("h100")).values()
    assert plan.value is not None, plan.error
    current = release_of(matrix.releases, plan.value.installed, plan.value.os_family)
    assert current is not None, f"h2 runs no release of {matrix_path}: {plan.value.installed}"
    return current


def fleet_apply(matrix_path: Path, release: str, db: Path, *extra: str) -> dict:
    """`fleet apply -r RELEASE -l h2 --json` (a process of its own, as an operator runs it):
    the host's entry of the JSON document."""
    r = subprocess.run([sys.executable, "-m", "fleet", "--db", str(db), "apply", "-m",
                        str(matrix_path), "-i", str(ROOT / "inventories" / "lab.py"), "-r",
                        release, "-l", HOST, "--json", *extra], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert "Traceback" not in r.stderr, r.stderr
    (host,) = json.loads(r.stdout)["hosts"]
    return host


def boots(h) -> int:
    """The host's boots so far: each lab boot writes a new boot id and logs its kernel command
    line (fleet.lab.hosts.prepare_boot)."""
    return int(h.sh("grep -c 'Command line: BOOT_IMAGE' /var/log/kern.log", check=False)[1]
               .strip() or 0)


def test_fleet_apply_puts_the_settable_node_state_right(history, hosts, lab_paths,
                                                        tmp_path) -> None:
    """Issue 23: the settable faults are node.* findings, `fleet apply` of the host's own
    release clears them over SSH (nvidia-smi on the host; ECC through the pre-reboot gate and
    one reboot), a second apply changes nothing, and the VBIOS difference stays reported
    (firmware is never flashed)."""
    lab.reset(lab_paths, HOST)
    h = hosts[HOST]
    lab.inject(lab_paths, HOST, SETTABLE)
    found = node_findings(history)
    assert {"node.ecc", "node.power_limit", "node.clocks", "node.compute_mode",
            "node.persistence_mode", "node.mig_mode", "node.firmware"} <= set(found), found
    matrix = ROOT / "matrices" / "lab.yaml"
    release = current_release(matrix)
    booted, boot_id = boots(h), h.boot_id()
    first = fleet_apply(matrix, release, tmp_path / "f.db")
    assert first["outcome"] == "changed", first["error"]
    assert boots(h) == booted + 1 and h.boot_id() != boot_id  # ECC: one reboot
    node = first["node_state"]
    assert first["rebooted"] and node["rebooted"]  # for ECC, through the pre-reboot gate
    ran = {s["setting"]: s["gpu"] for s in node["steps"]}
    assert ran == {"persistence_mode": 4, "compute_mode": 3, "power_limit_w": 1, "clocks": 2,
                   "mig_mode": 5, "ecc": 0}
    after = node_findings(history)
    assert set(after) == {"node.firmware"}, after  # the VBIOS is named, never flashed
    assert "96.00.74.00.0B" in " ".join(after["node.firmware"])
    second = fleet_apply(matrix, release, tmp_path / "f.db")
    assert second["outcome"] == "unchanged", second["error"]
    assert second["node_state"]["steps"] == []


def test_the_boot_unit_puts_back_what_a_reboot_forgets(history, hosts, lab_paths,
                                                       tmp_path) -> None:
    """A profile with a power limit below the default and a MIG layout on GPU 5, whose
    instances are lost (MIG mode on, none left), and ECC off on GPU 0: `fleet apply` of
    another release (a driver change) sets ECC before the pin, so the driver's reboot applies
    it too (one boot, counted by the host's boot ids), then sets the limit, re-creates the
    instances and installs the boot unit. Back on the first release, under a profile that
    declares nothing a reboot forgets: the driver's reboot (which resets the limit and
    destroys every MIG instance) ran the unit, which put both back before the first probe,
    and the apply then removed the unit it no longer needs. Then the dry run of the first
    profile lists the missing unit as a change."""
    from fleet.domain.node_plan import BOOT_SCRIPT, BOOT_UNIT, BOOT_WANTS

    doc = yaml.safe_load((ROOT / "matrices" / "lab.yaml").read_text())
    prof = doc["profiles"]["hgx-h100"]
    prof["gpu"]["power_limit_w"] = 500
    prof["mig"] = {"config": "gpu5-halves", "layout": {"version": "v1", "mig-configs": {
        "gpu5-halves": [{"devices": [5], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
                        {"devices": [0, 1, 2, 3, 4, 6, 7], "mig-enabled": False}]}}}
    matrix = tmp_path / "m.yaml"
    matrix.write_text(yaml.safe_dump(doc, sort_keys=False))
    doc["profiles"]["hgx-h100"] = {"gpu": {"ecc": True, "count": 8}}  # nothing to reapply
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump(doc, sort_keys=False))
    release = current_release(matrix)
    other = "r570-cuda12.8" if release != "r570-cuda12.8" else "r580-cuda13.0"
    h = hosts[HOST]
    back = False
    lab.inject(lab_paths, HOST, ["mig-layout-lost:gpu=5", "ecc-off:gpu=0"])
    try:
        booted, boot_id = boots(h), h.boot_id()
        res = fleet_apply(matrix, other, tmp_path / "f.db")
        assert res["outcome"] == "changed", res["error"]
        assert res["to_release"] == other and res["rebooted"], res
        assert boots(h) == booted + 1 and h.boot_id() != boot_id  # driver and ECC: one boot
        assert res["node_state"]["boot_unit"]
        assert "mig_layout" in {s["setting"] for s in res["node_state"]["steps"]}
        g = facts(history).gpus
        assert (g[0].ecc_mode_current, g[0].ecc_mode_pending) == (True, True)
        assert sorted(d.profile for d in g[5].mig_devices or []) == ["3g.40gb", "3g.40gb"]
        assert h.sh(f"test -x {BOOT_SCRIPT} && test -L {BOOT_WANTS} && echo ok")[1].strip() == "ok"
        res = fleet_apply(bare, release, tmp_path / "f.db")
        back = True
        assert res["outcome"] == "changed" and res["rebooted"], res["error"]
        assert res["node_state"]["boot_removed"] and res["node_state"]["steps"] == [], res
        g = facts(history).gpus
        log = h.sh("cat /var/log/fleet-node-state.log", check=False)[1]
        assert [x.power_limit_w for x in g] == [500.0] * 8, log
        assert g[5].mig_mode_current is True, log
        assert sorted(d.profile for d in g[5].mig_devices or []) == ["3g.40gb", "3g.40gb"], log
        assert h.sh(f"ls {BOOT_WANTS} {BOOT_UNIT} {BOOT_SCRIPT} 2>/dev/null | wc -l")[1].strip() \
            == "0"
        again = fleet_apply(bare, release, tmp_path / "f.db", "--dry")
        assert again["outcome"] == "unchanged", again  # removed once
        dry = fleet_apply(matrix, release, tmp_path / "f.db", "--dry")
        assert dry["outcome"] == "would_change", dry
        assert dry["node_state"]["boot_state"] == "missing" and dry["node_state"]["steps"] == []
    finally:
        h.sh(f"rm -f {BOOT_WANTS} {BOOT_UNIT} {BOOT_SCRIPT}; nvidia-smi mig -i 5 -dci; "
             "nvidia-smi mig -i 5 -dgi; nvidia-smi -i 5 -mig 0", check=False)
        if not back:  # the next tests expect the host on its release
            fleet_apply(ROOT / "matrices" / "lab.yaml", release, tmp_path / "f.db")


def test_fleet_apply_lays_out_mig_with_nvidia_mig_parted(history, hosts, lab_paths,
                                                         tmp_path) -> None:
    """Where the host has nvidia-mig-parted (the lab's fake: the real tool's v1 rules, on the
    fake NVML), `fleet apply` writes the layout file and runs `nvidia-mig-parted apply` instead
    of nvidia-smi mig, and its boot unit does the same; a second apply changes nothing."""
    from fleet.domain.node_plan import BOOT_SCRIPT, BOOT_UNIT, BOOT_WANTS, MIG_PARTED_FILE

    doc = yaml.safe_load((ROOT / "matrices" / "lab.yaml").read_text())
    doc["profiles"]["hgx-h100"]["mig"] = {"config": "gpu5-halves", "layout": {
        "version": "v1", "mig-configs": {"gpu5-halves": [
            {"devices": [5], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
            {"devices": [0, 1, 2, 3, 4, 6, 7], "mig-enabled": False}]}}}
    matrix = tmp_path / "m.yaml"
    matrix.write_text(yaml.safe_dump(doc, sort_keys=False))
    release = current_release(matrix)
    h = hosts[HOST]
    lab.inject(lab_paths, HOST, ["mig-parted", "mig-layout-lost:gpu=5"])
    try:
        res = fleet_apply(matrix, release, tmp_path / "f.db")
        assert res["outcome"] == "changed", res["error"]
        (step,) = [s for s in res["node_state"]["steps"] if s["setting"] == "mig_layout"]
        assert step["command"] == ["nvidia-mig-parted", "apply", "-f", MIG_PARTED_FILE, "-c",
                                   "gpu5-halves"]
        g = facts(history).gpus
        assert sorted(d.profile for d in g[5].mig_devices or []) == ["3g.40gb", "3g.40gb"]
        assert [x.mig_mode_current for x in g] == [False] * 5 + [True] + [False] * 2
        script = h.sh(f"cat {BOOT_SCRIPT}")[1]
        assert f"nvidia-mig-parted apply -f {MIG_PARTED_FILE} -c gpu5-halves" in script
        assert "nvidia-smi mig" not in script
        h.sh(f"nvidia-mig-parted assert -f {MIG_PARTED_FILE} -c gpu5-halves")
        again = fleet_apply(matrix, release, tmp_path / "f.db")
        assert again["outcome"] == "unchanged" and again["node_state"]["steps"] == [], again
    finally:
        h.sh(f"rm -f {BOOT_WANTS} {BOOT_UNIT} {BOOT_SCRIPT} {MIG_PARTED_FILE}; "
             "nvidia-smi mig -i 5 -dci; nvidia-smi mig -i 5 -dgi; nvidia-smi -i 5 -mig 0",
             check=False)
        lab.reset(lab_paths, HOST)  # the fake nvidia-mig-parted goes
