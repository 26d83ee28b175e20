"""fleet's dnf path for real: el9 lab hosts (real dnf 4, rpm, versionlock, module streams).

The module brings up its own mixed loopback lab in its own run directory (never the session
lab's netns bridge), from tests/integration/dnf/matrix.yaml, with no driver installed: h1 Debian,
h2 and h3 el9 (`--os el9:2`). The first apply installs a release on both kinds at once.
Run it under `flock /tmp/fleet-lab.lock` like every lab test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.domain.matrix.loader import load_matrix
from fleet.domain.pinning import DNF_AUTOMATIC_PATH, dnf_automatic_excluded, release_of
from fleet.lab import lab
from fleet.lab.paths import LabPaths
from fleet.lab.sysutil import missing_tools
from tests.integration.conftest import Host

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[3]
MATRIX = Path(__file__).with_name("matrix.yaml")
RUN_DIR = Path(os.environ.get("FLEET_LAB_EL9_TEST_DIR", "/run/fleet-lab-el9-test"))
R570, R580, R595 = "570.133.20", "580.95.05", "595.58.03"


@pytest.fixture(scope="module")
def el9(tmp_path_factory) -> Iterator[tuple[LabPaths, dict[str, Host], dict[str, str]]]:
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (CI runs it as root: bash scripts/test)")
    missing = missing_tools() + [t for t in ("rpmbuild", "createrepo_c")
                                 if shutil.which(t) is None]
    if missing:
        pytest.skip("the el9 lab needs: " + " ".join(missing) + " (Debian: rpm, createrepo-c)")
    paths = LabPaths(cache=LabPaths.from_env().cache, run=RUN_DIR)
    lab.down(paths)
    try:
        state = lab.up(paths, lab.UpConfig(hosts=3, matrix=MATRIX, release="none",
                                           mode="loopback", model_server=False, el9=2))
        hosts = {h.name: Host(paths, h) for h in state.hosts}
        db = tmp_path_factory.mktemp("history") / "fleet.db"
        env = {**os.environ, "FLEET_LAB_DIR": str(paths.run), "FLEET_DB": str(db),
               "FLEET_MATRIX": str(MATRIX), "FLEET_INVENTORY": str(ROOT / "inventories/lab.py"),
               "COLUMNS": "200"}
        yield paths, hosts, env
        for h in hosts.values():
            h.close()
    finally:
        left = lab.down(paths)
        assert not left, f"teardown left {left}"


def fleet(env: dict[str, str], *args: str) -> tuple[int, dict]:
    r = subprocess.run([sys.executable, "-m", "fleet", *args, "--json"], env=env,
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert "Traceback" not in r.stderr, r.stderr
    try:
        return r.returncode, json.loads(r.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"exit {r.returncode}, no JSON: {r.stdout}\n{r.stderr}") from None


def rpm_versions(host: Host) -> dict[str, str]:
    out = host.sh("rpm -qa --qf '%{NAME} %{EPOCHNUM}:%{VERSION}\\n' 'nvidia-*' 'cuda-*' "
                  "'datacenter-gpu-manager*' 'cudnn*' 'libcudnn*'")[1]
    return dict(line.split() for line in out.splitlines())


def locks(host: Host) -> set[str]:
    return set(host.sh("dnf -q versionlock list")[1].split())


def automatic_excluded(host: Host) -> frozenset[str] | None:
    """What fleet's guard in /etc/dnf/automatic.conf keeps dnf-automatic off (None: no guard)."""
    return dnf_automatic_excluded(host.sh(f"cat {DNF_AUTOMATIC_PATH}")[1])


def stream(host: Host) -> list[str]:
    """The enabled `nvidia-driver` module streams (NVIDIA-style modulemd in the lab's repo)."""
    rows = host.sh("dnf -q module list --enabled nvidia-driver", check=False)[1].splitlines()
    return [r.split()[1] for r in rows if r.startswith("nvidia-driver ")]


def one(doc: dict) -> dict:
    (h,) = doc["hosts"]
    return h


def test_el9_host_is_an_el_host_with_dnf_and_no_driver(el9) -> None:
    _, hosts, _ = el9
    h2 = hosts["h2"]
    osr = h2.sh("cat /etc/os-release")[1]
    assert 'ID="rocky"' in osr and 'PLATFORM_ID="platform:el9"' in osr
    assert h2.sh("command -v dpkg-query apt-get", check=False)[0] != 0  # no Debian tooling
    assert "fleet-lab-cuda-rhel9" in h2.sh("dnf -q repolist")[1]
    assert rpm_versions(h2) == {} and "error" in h2.nvml()
    # modular filtering: no driver is installable before its stream is enabled
    rc, out, err = h2.sh(f"dnf -y install nvidia-driver-{R580}", check=False)
    assert rc != 0 and "filtered out by modular filtering" in out + err, out + err


def test_pin_reboots_locks_and_a_second_run_changes_nothing(el9) -> None:
    paths, hosts, env = el9
    rc, doc = fleet(env, "apply", "-r", "r580-cuda13.0")
    assert rc == 0, doc
    assert {h["host"]: (h["outcome"], h["rebooted"]) for h in doc["hosts"]} == {
        "h1": ("changed", True), "h2": ("changed", True), "h3": ("changed", True)}
    hosts["h1"].close()  # the Debian host of the mixed lab: apt names, apt holds
    assert hosts["h1"].nvml()["driver"] == R580
    assert "nvidia-driver-580-open" in hosts["h1"].sh("apt-mark showhold")[1].split()
    status = {h["name"]: h for h in lab.status(paths)["hosts"]}
    assert status["h2"]["os"] == "el9" and status["h1"]["os"] == "debian"
    assert status["h2"]["packages"]["nvidia-driver"] == f"3:{R580}-1.el9"
    for h in (hosts["h2"], hosts["h3"]):
        h.close()
        assert h.nvml()["driver"] == R580
        assert rpm_versions(h) == {"nvidia-driver": f"3:{R580}", "cuda-toolkit-13-0": "0:13.0.2",
                                   "datacenter-gpu-manager": "1:3.3.9",
                                   "cudnn9-cuda-13": "0:9.13.0.50",
                                   "libcudnn9-cuda-13": "0:9.13.0.50"}
        assert locks(h) == {f"nvidia-driver-3:{R580}-1.el9.*", "cuda-toolkit-13-0-0:13.0.2-1.el9.*",
                            "datacenter-gpu-manager-1:3.3.9-1.el9.*",
                            "cudnn9-cuda-13-0:9.13.0.50-1.el9.*",
                            "libcudnn9-cuda-13-0:9.13.0.50-1.el9.*"}
        assert stream(h) == ["580-open"]
        # dnf-automatic's guard names exactly the locked packages; the stock file's rest stays
        assert automatic_excluded(h) == {re.sub(r"-\d+:.*$", "", lk) for lk in locks(h)}
        assert "apply_updates = no" in h.sh(f"cat {DNF_AUTOMATIC_PATH}")[1]
    rc, doc = fleet(env, "apply", "-r", "r580-cuda13.0")
    assert rc == 0 and {h["outcome"] for h in doc["hosts"]} == {"unchanged"}, doc


def test_versionlock_holds_the_driver_against_a_manual_upgrade(el9) -> None:
    _, hosts, env = el9
    h3 = hosts["h3"]
    # by hand onto the virtual stream that offers every open driver: only the lock holds now
    h3.sh("dnf -y -q module reset nvidia-driver && dnf -y -q module enable nvidia-driver:open-dkms")
    offered = h3.sh("dnf -q repoquery --disableexcludes=all --qf '%{version}' nvidia-driver")[1]
    assert R595 in offered.split()  # a newer driver sits in the repository
    h3.sh("dnf -y upgrade")
    assert rpm_versions(h3)["nvidia-driver"] == f"3:{R580}"
    rc, _, err = h3.sh(f"dnf -y install nvidia-driver-{R595}", check=False)
    assert rc != 0 and rpm_versions(h3)["nvidia-driver"] == f"3:{R580}", err
    # dnf-automatic (Debian's python3-dnf 4.14 ships its module) with every lock cleared: its
    # own run without fleet's guard would take the newer driver; with it, applying updates
    # leaves the driver alone
    h3.sh("dnf -q versionlock clear")
    auto = ("python3 -c 'import sys; from dnf.automatic.main import main; "
            "sys.exit(main(sys.argv[1:]))' ")
    control = h3.sh(f"sed '/^# Managed by fleet/,+1d' {DNF_AUTOMATIC_PATH} > /tmp/a0.conf && "
                    f"{auto} /tmp/a0.conf")[1]
    assert "nvidia-driver" in control and R595 in control, control
    h3.sh(f"sed 's/^apply_updates = no/apply_updates = yes/' {DNF_AUTOMATIC_PATH} > /tmp/a1.conf "
          f"&& {auto} /tmp/a1.conf")
    assert rpm_versions(h3)["nvidia-driver"] == f"3:{R580}"
    rc, doc = fleet(env, "apply", "-r", "r580-cuda13.0", "-l", "h3")  # stream and locks drifted
    assert rc == 0 and (one(doc)["outcome"], one(doc)["rebooted"]) == ("changed", False), doc
    assert stream(h3) == ["580-open"] and f"nvidia-driver-3:{R580}-1.el9.*" in locks(h3)


def test_upgrade_reboots_into_the_new_driver_and_rollback_returns(el9) -> None:
    _, hosts, env = el9
    h2 = hosts["h2"]
    boot = h2.boot_id()
    rc, doc = fleet(env, "apply", "-r", "r595-cuda13.2", "-l", "h2")
    assert rc == 0, doc
    assert (one(doc)["outcome"], one(doc)["rebooted"]) == ("changed", True), doc
    h2.close()
    assert h2.boot_id() != boot and h2.nvml()["driver"] == R595
    have = rpm_versions(h2)
    assert have["nvidia-driver"] == f"3:{R595}" and have["cuda-toolkit-13-2"] == "0:13.2.1"
    assert f"nvidia-driver-3:{R595}-1.el9.*" in locks(h2) and stream(h2) == ["595-open"]
    assert {"nvidia-driver", "cuda-toolkit-13-2"} <= (automatic_excluded(h2) or set())
    # DCGM 3 -> 4 changes names; the old release's toolkit and DCGM go, locks and all (14.4)
    assert have["datacenter-gpu-manager-4-core"] == "1:4.4.1"
    assert not {"cuda-toolkit-13-0", "datacenter-gpu-manager"} & set(have)
    assert not any(lk.startswith(("cuda-toolkit-13-0-", "datacenter-gpu-manager-1:"))
                   for lk in locks(h2))
    rc, doc = fleet(env, "rollback", "--host", "h2", "--reason", "el9 canary regression", "--yes")
    assert rc == 0, doc
    h = one(doc)
    assert (h["from_release"], h["to_release"], h["outcome"]) == (
        "r595-cuda13.2", "r580-cuda13.0", "changed"), h
    h2.close()
    assert h2.nvml()["driver"] == R580
    have = rpm_versions(h2)
    assert have["nvidia-driver"] == f"3:{R580}" and have["datacenter-gpu-manager"] == "1:3.3.9"
    assert f"nvidia-driver-3:{R580}-1.el9.*" in locks(h2) and stream(h2) == ["580-open"]
    # no package or lock of r595 is left (issue 14.4)
    assert not {"cuda-toolkit-13-2", "datacenter-gpu-manager-4-core",
                "datacenter-gpu-manager-4-cuda13"} & set(have), have
    assert not any(lk.startswith(("cuda-toolkit-13-2-", "datacenter-gpu-manager-4-"))
                   for lk in locks(h2)), locks(h2)
    excluded = automatic_excluded(h2) or set()  # the guard rewritten with the locks
    assert {"nvidia-driver", "datacenter-gpu-manager"} <= excluded
    assert not {"cuda-toolkit-13-2", "datacenter-gpu-manager-4-core"} & excluded, excluded


def test_failed_transaction_leaves_the_old_release_locked(el9) -> None:
    paths, hosts, env = el9
    h3 = hosts["h3"]
    boot = h3.boot_id()
    lab.inject(paths, "h3", ["broken-package"])
    try:
        rc, doc = fleet(env, "apply", "-r", "r570-cuda12.8", "-l", "h3")
    finally:
        lab.reset(paths, "h3")
    h = one(doc)
    assert rc == 1 and h["outcome"] == "failed", doc
    assert "restored r580-cuda13.0" in h["error"], h
    assert h3.boot_id() == boot and h3.nvml()["driver"] == R580
    assert rpm_versions(h3)["nvidia-driver"] == f"3:{R580}"
    assert f"nvidia-driver-3:{R580}-1.el9.*" in locks(h3) and stream(h3) == ["580-open"]
    rc, doc = fleet(env, "apply", "-r", "r580-cuda13.0", "-l", "h3", "--dry")
    assert rc == 0 and one(doc)["outcome"] == "unchanged", doc


# ------------------------------------------------------------------ apt: epochs, other releases
def dpkg_status(host: Host, *globs: str) -> dict[str, str]:
    """name -> `hi 1:3.3.6` (held, installed) for every package dpkg knows (`rc`: removed,
    configuration left)."""
    q = " ".join(f"'{g}'" for g in globs)
    out = host.sh("dpkg-query -W -f='${Package} ${db:Status-Abbrev} ${Version}\\n' "
                  f"{q} 2>/dev/null || true")[1]
    return {p[0]: f"{p[1][:2]} {p[2] if len(p) > 2 else ''}".strip()
            for p in (line.split() for line in out.splitlines()) if len(p) >= 2}


def test_apt_holds_dcgm_at_its_epoch_version_while_a_newer_one_sits_in_the_repo(el9) -> None:
    """NVIDIA ships DCGM 3 as `1:3.3.6`: a pin on `3.3.6-*` matches nothing (shown below with
    apt's own policy) and apt would install the newest; fleet pins `1:3.3.6`."""
    _, hosts, env = el9
    h1 = hosts["h1"]
    rc, doc = fleet(env, "apply", "-r", "r570-cuda12.8", "-l", "h1")
    assert rc == 0 and one(doc)["outcome"] == "changed", doc
    h1.close()
    assert dpkg_status(h1, "datacenter-gpu-manager")["datacenter-gpu-manager"] == "hi 1:3.3.6"
    assert "datacenter-gpu-manager" in h1.sh("apt-mark showhold")[1].split()
    assert "Pin: version 1:3.3.6\n" in h1.sh("cat /etc/apt/preferences.d/fleet-nvidia.pref")[1]
    policy = h1.sh("apt-cache policy datacenter-gpu-manager")[1]
    assert "Candidate: 1:3.3.6" in policy and "1:3.3.9" in policy, policy  # newer in the repo
    # even with the hold lifted, apt keeps the pinned version
    sim = h1.sh("apt-get -s -q --allow-change-held-packages install datacenter-gpu-manager && "
                "apt-get -s -q --allow-change-held-packages dist-upgrade")[1]
    assert "Inst datacenter-gpu-manager" not in sim, sim
    # the pin without the epoch, as fleet wrote it before: apt's candidate is the newest
    h1.sh("mkdir -p /tmp/epochless && printf 'Package: datacenter-gpu-manager\\n"
          "Pin: version 3.3.6-*\\nPin-Priority: 1001\\n' > /tmp/epochless/p.pref")
    old = h1.sh("apt-cache -o Dir::Etc::PreferencesParts=/tmp/epochless "
                "policy datacenter-gpu-manager && rm -rf /tmp/epochless")[1]
    assert "Candidate: 1:3.3.9" in old, old


def test_apt_rollback_leaves_no_package_or_hold_of_the_other_release(el9) -> None:
    """r570 -> r595 -> rollback: DCGM 4, the CUDA 13 toolkit and cuDNN of r595 are purged (no
    `rc` left), their holds gone; the host is r570 again with DCGM 3 at its epoch."""
    _, hosts, env = el9
    h1 = hosts["h1"]
    rc, doc = fleet(env, "apply", "-r", "r595-cuda13.2", "-l", "h1")
    assert rc == 0 and one(doc)["outcome"] == "changed", doc
    h1.close()
    have = dpkg_status(h1, "nvidia-*", "cuda-*", "datacenter-gpu-manager*", "cudnn*",
                       "libcudnn*")
    assert have["datacenter-gpu-manager-4-core"] == "hi 1:4.4.1-1"
    assert not {"datacenter-gpu-manager", "cuda-toolkit-12-8", "cudnn9-cuda-12",
                "nvidia-driver-570-open"} & set(have), have  # purged: not even `rc`
    rc, doc = fleet(env, "rollback", "--host", "h1", "--reason", "DCGM 4 regression", "--yes")
    assert rc == 0 and one(doc)["to_release"] == "r570-cuda12.8", doc
    h1.close()
    assert h1.nvml()["driver"] == R570
    have = dpkg_status(h1, "nvidia-*", "cuda-*", "datacenter-gpu-manager*", "cudnn*",
                       "libcudnn*")
    gone = {"datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13",
            "cuda-toolkit-13-2", "cudnn9-cuda-13", "libcudnn9-cuda-13", "nvidia-driver-595-open"}
    assert not gone & set(have), have
    assert have["datacenter-gpu-manager"] == "hi 1:3.3.6"
    assert not gone & set(h1.sh("apt-mark showhold")[1].split())


def test_a_package_of_another_release_left_by_hand_gets_a_finding_and_apply_removes_it(
        el9) -> None:
    """r595's toolkit installed by hand next to r570 (apt, held) and r580 (dnf): the probe's
    check names it with the fix; `fleet apply` of the host's release takes it off again."""
    _, hosts, env = el9
    h1, h2 = hosts["h1"], hosts["h2"]
    h1.sh("DEBIAN_FRONTEND=noninteractive apt-get install -y -q cuda-toolkit-13-2 >/dev/null && "
          "apt-mark hold cuda-toolkit-13-2")
    h2.sh("dnf -y -q install cuda-toolkit-13-2")
    rc, doc = fleet(env, "probe", "-l", "h1", "-l", "h2", "--no-frameworks")
    by = {h["host"]: h for h in doc["hosts"]}
    for name, fix in (("h1", "apt-mark unhold cuda-toolkit-13-2 && apt-get purge -y "
                             "cuda-toolkit-13-2"),
                      ("h2", "dnf -y remove cuda-toolkit-13-2")):
        found = [f for f in by[name]["findings"] if f["check"] == "packages.other_release"]
        assert [(f["severity"], f["evidence"]["package"], f["evidence"]["fix"])
                for f in found] == [("warn", "cuda-toolkit-13-2", fix)], by[name]["findings"]
    for name, rel in (("h1", "r570-cuda12.8"), ("h2", "r580-cuda13.0")):
        rc, doc = fleet(env, "apply", "-r", rel, "-l", name)
        assert rc == 0 and (one(doc)["outcome"], one(doc)["rebooted"]) == ("changed", False), doc
    assert "cuda-toolkit-13-2" not in dpkg_status(h1, "cuda-*")
    assert "cuda-toolkit-13-2" not in rpm_versions(h2)
    rc, doc = fleet(env, "probe", "-l", "h1", "-l", "h2", "--no-frameworks")
    assert not [f for h in doc["hosts"] for f in h["findings"]
                if f["check"] == "packages.other_release"], doc
    # a versionlock left for another release's package that is no longer installed
    h2.sh("dnf -q versionlock add cuda-toolkit-13-2")
    rc, doc = fleet(env, "probe", "-l", "h2", "--no-frameworks")
    (f,) = [f for f in one(doc)["findings"] if f["check"] == "packages.other_release"]
    assert (f["evidence"]["package"], f["evidence"]["residual"]) == ("cuda-toolkit-13-2", True)
    h2.sh(f["evidence"]["fix"])  # dnf versionlock delete cuda-toolkit-13-2
    assert not any("cuda-toolkit-13-2" in lk for lk in locks(h2))


# ------------------------------------------------------------------ kernel hold (pool kernel.hold)
KERNEL_DEBS = {"linux-image-amd64", "linux-image-6.1.0-18-amd64", "linux-headers-6.1.0-18-amd64"}
KERNEL_RPMS = {"kernel", "kernel-core", "kernel-modules"}


def test_a_pools_kernel_hold_holds_the_kernel_and_the_pin_without_it_releases_it(
        el9, tmp_path) -> None:
    """The running kernel's packages installed as a distribution would (the lab repositories
    also offer a newer kernel): a pin under `kernel: {hold: true}` holds them (apt-mark on h1,
    versionlock on h2), which keeps the newer kernel off; a second pin changes nothing; the
    pin of the pool without the hold releases them and the newer kernel is installable again."""
    paths, hosts, env = el9
    h1, h2 = hosts["h1"], hosts["h2"]
    h1.sh("apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
          "linux-image-amd64=6.1.76-1 linux-headers-6.1.0-18-amd64 >/dev/null")
    h2.sh("dnf -y -q --refresh install kernel-6.1.76 kernel-core-6.1.76 kernel-modules-6.1.76")
    held_matrix = tmp_path / "matrix.yaml"
    held_matrix.write_text(MATRIX.read_text().replace(
        "\n  h100:\n", "\n  h100:\n    kernel: {hold: true}\n", 1))
    held_env = {**env, "FLEET_MATRIX": str(held_matrix)}
    matrix = load_matrix(MATRIX).matrix
    status = {h["name"]: h for h in lab.status(paths)["hosts"]}
    on = {n: release_of(matrix.releases, status[n]["packages"],
                        "rhel" if status[n]["os"] == "el9" else "debian")
          for n in ("h1", "h2")}  # each host's release now: no driver change, no reboot
    try:
        for name, kernel in (("h1", KERNEL_DEBS), ("h2", KERNEL_RPMS)):
            if on[name] is None:  # the test run alone: no driver yet
                on[name] = "r580-cuda13.0"
                assert fleet(env, "apply", "-r", "r580-cuda13.0", "-l", name)[0] == 0
            rc, doc = fleet(held_env, "apply", "-r", on[name], "-l", name)
            assert rc == 0 and (one(doc)["outcome"], one(doc)["rebooted"]) == (
                "changed", False), doc
            assert one(doc)["changes"] == [], doc  # no package moves: the kernel is held
            assert {(h["package"], h["action"]) for h in one(doc)["holds"]} == {
                (n, "hold") for n in kernel}, doc
            rc, doc = fleet(held_env, "apply", "-r", on[name], "-l", name)
            assert rc == 0 and one(doc)["outcome"] == "unchanged", doc  # the second pin
        h1.close()
        h2.close()
        assert set(h1.sh("apt-mark showhold")[1].split()) >= KERNEL_DEBS
        assert {lk.split("-0:")[0] for lk in locks(h2) if "-0:6.1.76-18" in lk} == KERNEL_RPMS
        upgrade = h1.sh("apt-get -s -q dist-upgrade")[1]
        assert "Inst linux-image-amd64" not in upgrade, upgrade  # kept back by the hold
        h2.sh("dnf -y -q upgrade")
        assert h2.sh("rpm -q kernel-core")[1].split() == ["kernel-core-6.1.76-18.el9.x86_64"]
        for name, kernel in (("h1", KERNEL_DEBS), ("h2", KERNEL_RPMS)):
            rc, doc = fleet(env, "apply", "-r", on[name], "-l", name)  # the pool without it
            assert rc == 0 and (one(doc)["outcome"], one(doc)["rebooted"]) == (
                "changed", False), doc
            assert one(doc)["changes"] == [], doc  # no package moves: only the holds go
            assert {(h["package"], h["action"]) for h in one(doc)["holds"]} == {
                (n, "unhold") for n in kernel}, doc
        h1.close()
        h2.close()
        showhold = set(h1.sh("apt-mark showhold")[1].split())
        assert not KERNEL_DEBS & showhold and any(n.startswith("nvidia-driver") for n in showhold)
        assert not any(lk.startswith("kernel") for lk in locks(h2)), locks(h2)
        assert any(lk.startswith("nvidia-driver-") for lk in locks(h2))
        upgrade = h1.sh("apt-get -s -q dist-upgrade")[1]
        assert "Inst linux-image-amd64" in upgrade, upgrade  # the hold was what kept it
    finally:
        h1.sh("apt-mark unhold linux-image-amd64 linux-image-6.1.0-18-amd64 "
              "linux-headers-6.1.0-18-amd64 >/dev/null; DEBIAN_FRONTEND=noninteractive "
              "apt-get purge -y -q 'linux-image-*' 'linux-headers-*' >/dev/null; "
              "rm -f /var/lib/fleet/kernel-hold", check=False)
        h2.sh("dnf -q versionlock delete kernel kernel-core kernel-modules; dnf -y -q remove "
              "kernel kernel-core kernel-modules; rm -f /var/lib/fleet/kernel-hold", check=False)
