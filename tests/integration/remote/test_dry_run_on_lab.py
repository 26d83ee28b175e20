"""`fleet apply --dry` against real apt and dpkg on the lab (issue 13.5): it lists the package,
hold and pin-file changes the host's own dpkg database implies, and leaves the host exactly as it
was (dpkg status, holds, pin files, boot, Slurm node state), with no history written.

Run as root under `flock /tmp/fleet-lab.lock` (one lab at a time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleet.domain.matrix.loader import load_matrix
from fleet.domain.pinning import PREFERENCES_PATH, UNATTENDED_PATH, release_of, upstream_of
from fleet.domain.ports import HostRef
from fleet.jobs.apply import refusal

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[3]
MATRIX = ROOT / "matrices" / "example.yaml"
INVENTORY = str(ROOT / "inventories" / "lab.py")
HOST = "h3"  # A100, pool a100: rebooted over SSH, drained through the lab's Slurm

_STATE_SCRIPT = (
    "dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n'; echo '--- holds';"
    " apt-mark showhold; echo '--- files';"
    f" for f in {PREFERENCES_PATH} {UNATTENDED_PATH}; do echo \"== $f\"; cat $f 2>/dev/null;"
    " done; echo '--- status'; sha256sum /var/lib/dpkg/status"
)


@pytest.fixture(scope="module")
def env(lab_paths, lab_state, hosts, tmp_path_factory) -> dict[str, str]:  # noqa: ANN001
    from fleet.lab import lab

    lab.reset(lab_paths, HOST)
    db = tmp_path_factory.mktemp("history") / "fleet.db"
    env = {**os.environ, "FLEET_LAB_DIR": str(lab_paths.run), "FLEET_DB": str(db),
           "FLEET_MATRIX": str(MATRIX), "FLEET_INVENTORY": INVENTORY, "COLUMNS": "200"}
    # a known start whatever the tests before left (the lab's first install has no companions;
    # an earlier test's pin has them): the matrix's golden, pinned for real
    rc, doc, err = fleet(env, "apply", "-r", load_matrix(MATRIX).matrix.golden_name("a100"),
                         "-l", HOST)
    assert rc == 0, (doc, err)
    return env


def fleet(env: dict[str, str], *args: str) -> tuple[int, dict, str]:
    r = subprocess.run([sys.executable, "-m", "fleet", *args, "--json"], env=env,
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, json.loads(r.stdout), r.stderr


def host_state(host) -> str:  # noqa: ANN001 - conftest.Host
    """Everything a pin touches: every package's version and status, the holds, the managed
    pin files, and the dpkg status file's digest."""
    return host.sh(_STATE_SCRIPT)[1]


def installed(host) -> dict[str, str]:  # noqa: ANN001
    out = host.sh("dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n'")[1]
    # db:Status-Abbrev: wanted state then status; a held package is `hi`, installed all the same
    return {p: v for p, v, st in (line.split() for line in out.splitlines() if line.strip())
            if st[1:2] == "i"}


def node_state(slurm_env: dict[str, str]) -> tuple[str, str]:
    """The node's administrative state and reason (a drain shows here). Slurm's flag for a
    slurmd that is slow to answer (`idle*`) is not the node's state and is left out."""
    out = subprocess.run(["sinfo", "-h", "-n", HOST, "-o", "%T|%E"], env=slurm_env,
                         capture_output=True, text=True, timeout=30, check=True).stdout
    state, _, reason = out.strip().partition("|")
    return state.rstrip("*~#!%$@^-"), reason


def test_apply_dry_lists_the_real_package_changes_and_changes_nothing(
        env, hosts, slurm_env, lab_state, tmp_path) -> None:  # noqa: ANN001
    env = {**env, "FLEET_DB": str(tmp_path / "never.db")}
    host = hosts[HOST]
    m = load_matrix(MATRIX).matrix
    spec = next(h for h in lab_state.hosts if h.name == HOST)
    have = installed(host)
    held = set(host.sh("apt-mark showhold")[1].split())
    # a release this host is not on and may run (not blocked, right architecture)
    ref = HostRef(HOST, pool="a100", gpu_model=spec.gpu_model)
    target = next(r for r in m.releases
                  if refusal(m, r, ref) is None
                  and any(upstream_of(have.get(p.name, "-")) != p.version
                          for p in r.packages("debian") if p.component == "driver"))
    before, boot, node = host_state(host), host.boot_id(), node_state(slurm_env)

    rc, doc, err = fleet(env, "apply", "-r", target.name, "-l", HOST, "--dry")

    assert rc == 0, err
    (h,) = doc["hosts"]
    assert doc["dry"] is True and h["outcome"] == "would_change"
    wanted = {p.name: p.version for p in target.packages("debian")}
    # every package change agrees with the host's dpkg database
    for c in h["changes"]:
        now = upstream_of(have[c["package"]]) if c["package"] in have else None
        assert c["from"] == now, c
        assert c["to"] == wanted.get(c["package"]), c  # None: removed
    moving = {p for p, v in wanted.items() if p not in have or upstream_of(have[p]) != v}
    assert moving and moving <= {c["package"] for c in h["changes"]}
    assert all(c["package"] in have for c in h["changes"] if c["kind"] == "remove")
    assert any(c["kind"] == "remove" for c in h["changes"])  # the old driver branch goes
    # holds: every package of the release not held now gets held
    assert {x["package"] for x in h["holds"] if x["action"] == "hold"} == set(wanted) - held
    assert h["reboot_required"] and h["drain_through"] == "slurm"
    # nothing happened: same packages, holds, pin files, boot, Slurm state; no history
    assert host_state(host) == before
    assert host.boot_id() == boot and node_state(slurm_env) == node
    assert not Path(env["FLEET_DB"]).exists()


def test_apply_dry_after_drift_by_hand_lists_the_hold_and_the_pin_file(
        env, hosts, slurm_env) -> None:  # noqa: ANN001
    """The case that printed "would change" with an empty list: packages right, a hold and the
    apt pin removed by hand."""
    host = hosts[HOST]
    m = load_matrix(MATRIX).matrix
    current = release_of(m.releases, installed(host), "debian")
    assert current, f"{HOST} runs no release of the matrix"
    rc, doc, err = fleet(env, "apply", "-r", current, "-l", HOST)  # pinned and held for real
    assert rc == 0 and doc["hosts"][0]["outcome"] in ("changed", "unchanged"), (doc, err)
    driver = next(p for p in m.release(current).packages("debian") if p.component == "driver")
    host.sh(f"apt-mark unhold {driver.name} >/dev/null && rm -f {PREFERENCES_PATH}")
    before, node = host_state(host), node_state(slurm_env)

    rc, doc, err = fleet(env, "apply", "-r", current, "-l", HOST, "--dry")

    assert rc == 0, err
    (h,) = doc["hosts"]
    assert h["outcome"] == "would_change" and h["changes"] == []
    assert h["holds"] == [{"package": driver.name, "action": "hold", "tool": "apt-mark",
                           "version": driver.version}]
    assert [(f["path"], f["action"]) for f in h["pin_files"]] == [(PREFERENCES_PATH, "create")]
    assert not h["reboot_required"]
    assert host_state(host) == before and node_state(slurm_env) == node
    # put the host back as the lab's other tests expect it
    rc, doc, err = fleet(env, "apply", "-r", current, "-l", HOST)
    assert rc == 0 and driver.name in host.sh("apt-mark showhold")[1].split(), (doc, err)
