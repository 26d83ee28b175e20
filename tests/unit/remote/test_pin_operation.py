"""The pin operation through pyinfra's engine, on its `@fake` connector (no host)."""

from __future__ import annotations

from typing import Any

from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.operation import add_op
from pyinfra.api.operations import run_ops
from pyinfra.api.state import StateStage

from fleet.domain.kernel_hold import KERNEL_HOLD_PATH
from fleet.domain.pinning import (
    PREFERENCES_PATH,
    UNATTENDED_PATH,
    apt_preferences,
    unattended_blacklist,
)
from fleet.remote.facts import (
    parse_dpkg_installed,
    parse_file_contents,
    parse_os_family,
    parse_rpm_installed,
    parse_versionlock,
)
from fleet.remote.operations import Pkg, pin_release

R570 = [("nvidia-driver-570", "570.124.06", "driver"), ("cuda-toolkit-12-8", "12.8.1", "cuda")]


def run_pin(responses: dict[str, Any], execute: bool = True) -> tuple[bool, list[str]]:
    data = {"fake_delay": 0, "fake_delay_jitter": 0, "fake_responses": responses}
    inventory = Inventory(([("@fake/gpu-01", data)], {}))
    state = State(inventory, Config())
    state.set_stage(StateStage.Connect)
    connect_all(state)
    state.set_stage(StateStage.Prepare)
    result = add_op(state, pin_release, release="r570", packages=R570)
    host = inventory.get_host("@fake/gpu-01")
    will_change = bool(result[host].will_change)
    if execute:
        state.set_stage(StateStage.Execute)
        run_ops(state)
    return will_change, [str(c) for c in host.connector.executed_commands]


def test_branch_switch_runs_unhold_install_hold_in_order() -> None:
    changed, commands = run_pin(
        {
            "os-release": ["ubuntu debian"],
            "dpkg-query": [
                "nvidia-driver-550\t550.54.15-1\tii ",
                "cuda-toolkit-12-4\t12.4.1-1\tii ",
            ],
            "apt-mark showhold": ["nvidia-driver-550"],
            "for f in": [f"{KERNEL_HOLD_PATH} -"],
        }
    )
    assert changed
    mine = [
        c
        for c in commands
        if c.startswith(("apt-mark unhold", "apt-get", "DEBIAN", "apt-mark hold"))
    ]
    assert mine[0] == "apt-mark unhold nvidia-driver-550"
    assert mine[-1] == "apt-mark hold cuda-toolkit-12-8 nvidia-driver-570"
    # the old release's toolkit is purged with its driver (issue 14.4)
    assert any(c.endswith("nvidia-driver-570 cuda-toolkit-12-8 cuda-toolkit-12-4- "
                          "nvidia-driver-550-") for c in mine)


def test_pinned_host_is_a_noop() -> None:
    wanted = [Pkg(*p) for p in R570]
    import base64

    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    changed, commands = run_pin(
        {
            "os-release": ["debian"],
            "dpkg-query": [
                "nvidia-driver-570\t570.124.06-1\thi ",
                "cuda-toolkit-12-8\t12.8.1-1\thi ",
            ],
            "apt-mark showhold": ["nvidia-driver-570", "cuda-toolkit-12-8"],
            "for f in": [
                f"{PREFERENCES_PATH} {b64(apt_preferences(wanted))}",
                f"{UNATTENDED_PATH} {b64(unattended_blacklist(wanted))}",
                f"{KERNEL_HOLD_PATH} -",
            ],
        }
    )
    assert not changed
    assert not any("apt-get" in c or "apt-mark hold" in c for c in commands)


def test_parsers() -> None:
    assert parse_os_family(["rocky rhel centos fedora"]) == "rhel"
    assert parse_os_family(["alpine"]) is None
    assert parse_dpkg_installed(
        [
            "nvidia-driver-550\t550.54.15-1\tii ",
            "nvidia-driver-555\t555.42.02-1\trc ",  # removed, config files left: not installed
            "cuda-toolkit-12-4\t12.4.1-1\thi ",
        ]
    ) == {"nvidia-driver-550": "550.54.15-1", "cuda-toolkit-12-4": "12.4.1-1"}
    assert parse_rpm_installed(
        ["nvidia-driver\t3:550.54.15-1.el9", "package cudnn* is not installed"]
    ) == {"nvidia-driver": "3:550.54.15-1.el9"}
    assert parse_versionlock(
        ["nvidia-driver-3:550.54.15-1.el9.*", "cuda-toolkit-12-4-0:12.4.1-1.*"]
    ) == {"nvidia-driver", "cuda-toolkit-12-4"}
    assert parse_file_contents(["/a aGVsbG8K", "/b -"]) == {"/a": "hello\n", "/b": None}
