"""The pre-reboot gate over real SSH on the lab (root; CI runs it): with `kernel-without-module`
or `secure-boot-unsigned` injected, `fleet check` fails before any reboot, `fleet apply` of a
release that needs a reboot refuses without rebooting (boot id unchanged) and names the kernel,
and after `fleet lab reset` the same apply goes through.

h3 is the lab's A100 host (pool a100); the test pins r580 on it first, then each case moves it
to the other of r570 and r580, which changes the kernel module (a reboot).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from fleet.lab import boot as lab_boot
from fleet.lab import lab
from tests.integration.remote.test_pin_on_lab import INVENTORY, MATRIX, fleet, wait_for_ssh

pytestmark = pytest.mark.lab
HOST = "h3"


@pytest.fixture(scope="module")
def env(lab_paths, hosts, tmp_path_factory) -> Iterator[dict[str, str]]:  # noqa: ANN001
    lab.reset(lab_paths, HOST)
    wait_for_ssh(hosts[HOST])
    hosts[HOST].release_pins()
    hosts[HOST].reboot_and_wait()
    db = tmp_path_factory.mktemp("history") / "fleet.db"
    env = {**os.environ, "FLEET_LAB_DIR": str(lab_paths.run), "FLEET_DB": str(db),
           "FLEET_MATRIX": MATRIX, "FLEET_INVENTORY": INVENTORY, "COLUMNS": "200"}
    rc, doc = fleet(env, "apply", "-r", "r580-cuda13.0", "-l", HOST)
    assert rc == 0, doc
    yield env
    lab.reset(lab_paths, HOST)


DRIVERS = {"r580-cuda13.0": "580.95.05", "r570-cuda12.8": "570.133.20"}


@pytest.mark.parametrize("fault,says", [
    ("kernel-without-module", f"kernel {lab_boot.NEWER} has no nvidia {{driver}} module"),
    ("secure-boot-unsigned", "Secure Boot is on"),
])
def test_gate_refuses_then_reset_lets_the_same_apply_through(env, lab_paths, hosts, fault: str,
                                                              says: str) -> None:
    """Each case moves h3 to the release it is not on (r580 -> r570, then back): one reboot a
    case, the one after `lab reset` (before, each case first pinned r580 again: one more)."""
    h = hosts[HOST]
    on = {h.sh("cat /var/lib/gpusim/module.pending")[1].strip()}
    target = next(r for r, v in DRIVERS.items() if v not in on)
    lab.inject(lab_paths, HOST, [fault])
    # before anyone reboots: fleet check says so
    rc, _ = fleet(env, "probe", "-l", HOST)
    rc, doc = fleet(env, "check", "-l", HOST)
    assert rc == 1, doc
    text = str(doc)
    assert "node.next_boot" in text and "would lose the GPU driver" in text
    # a pin that needs a reboot is refused without one
    boot = h.boot_id()
    rc, doc = fleet(env, "apply", "-r", target, "-l", HOST)
    assert rc == 1, doc
    (res,) = doc["hosts"]
    assert res["outcome"] == "failed" and not res["rebooted"]
    assert says.format(driver=DRIVERS[target]) in (res["error"] or ""), res
    assert h.boot_id() == boot
    # after lab reset the same apply goes through, with its reboot
    lab.reset(lab_paths, HOST)
    rc, doc = fleet(env, "apply", "-r", target, "-l", HOST)
    assert rc == 0, doc
    assert doc["hosts"][0]["rebooted"] and h.boot_id() != boot
