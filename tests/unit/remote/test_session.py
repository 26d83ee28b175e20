"""The pyinfra session: concurrent prepare, per-host outcomes, unreachable hosts reported."""

from __future__ import annotations

from pyinfra.api import Inventory

from fleet.domain.kernel_hold import KERNEL_HOLD_PATH
from fleet.remote.facts import OsFamily
from fleet.remote.operations import pin_release
from fleet.remote.session import apply, connected, gather, select_hosts

FAST = {"fake_delay": 0, "fake_delay_jitter": 0}
DEB = {**FAST, "fake_responses": {"os-release": ["debian"], "dpkg-query": [], "apt-mark": [],
                                   "for f in": [f"{KERNEL_HOLD_PATH} -"]}}
R = [("nvidia-driver-550", "550.54.15", "driver")]


def make_inventory() -> Inventory:
    return Inventory(
        ([("@fake/gpu-01", DEB), ("@fake/gpu-02", DEB),
          ("127.0.0.1", {"ssh_port": 1, "ssh_connect_retries": 0})], {}),
        canary=(["@fake/gpu-01"], {}),
    )


def test_limit_by_group_and_glob() -> None:
    inv = make_inventory()
    assert [h.name for h in select_hosts(inv, ["canary"])] == ["@fake/gpu-01"]
    assert len(select_hosts(inv, ["@fake/*"])) == 2
    assert len(select_hosts(inv, None)) == 3


def test_unreachable_host_is_reported_and_others_proceed() -> None:
    inv = make_inventory()
    with connected(inv, select_hosts(inv, None), connect_timeout=2) as conn:
        assert set(conn.unreachable) == {"127.0.0.1"}
        assert conn.unreachable["127.0.0.1"]  # a reason, not an empty string
        assert gather(conn, OsFamily) == {"@fake/gpu-01": "debian", "@fake/gpu-02": "debian"}
        out = apply(conn, pin_release, lambda h: {"release": "r550", "packages": R})
    assert not out["127.0.0.1"].reachable and not out["127.0.0.1"].ok
    for name in ("@fake/gpu-01", "@fake/gpu-02"):
        assert out[name].ok and out[name].changed, out[name]


def test_dry_run_executes_nothing() -> None:
    inv = make_inventory()
    with connected(inv, select_hosts(inv, ["canary"])) as conn:
        out = apply(conn, pin_release, lambda h: {"release": "r550", "packages": R},
                    execute=False)
        host = inv.get_host("@fake/gpu-01")
        executed = [str(c) for c in host.connector.executed_commands]
    assert out["@fake/gpu-01"].changed
    assert not any("apt-get install" in c for c in executed)


def test_a_pin_carries_its_deadline() -> None:
    """pyinfra takes `_timeout` with the pin (SshBackend.apply passes APPLY_TIMEOUT_S) as the
    deadline of each of its commands, and still runs it (issue 32, finding 5)."""
    from fleet.remote.backend import APPLY_TIMEOUT_S

    inv = make_inventory()
    with connected(inv, select_hosts(inv, ["canary"])) as conn:
        out = apply(conn, pin_release, lambda h: {"release": "r550", "packages": R,
                                                  "_timeout": APPLY_TIMEOUT_S})
        host = inv.get_host("@fake/gpu-01")
        deadlines = {conn.state.get_op_data_for_host(host, op).global_arguments.get("_timeout")
                     for op in conn.state.get_op_order()}
    assert out["@fake/gpu-01"].ok and out["@fake/gpu-01"].changed, out["@fake/gpu-01"]
    assert deadlines == {APPLY_TIMEOUT_S}
