"""The dnf plan's module stream steps and the stream fact's parser (issue 14.2: real dnf's
modular filtering hides a driver whose `nvidia-driver` stream is not enabled)."""

from __future__ import annotations

from dataclasses import dataclass

from fleet.domain.pinning import plan_pin
from fleet.remote.facts import parse_driver_streams, stream_args


@dataclass(frozen=True)
class W:
    name: str
    version: str
    component: str


R580 = [W("nvidia-driver", "580.95.05", "driver"), W("cuda-toolkit-13-0", "13.0.2", "cuda")]
ON_580 = {"nvidia-driver": "3:580.95.05-1.el9", "cuda-toolkit-13-0": "0:13.0.2-1.el9"}
R595 = [W("nvidia-driver", "595.58.03", "driver"), W("cuda-toolkit-13-2", "13.2.1", "cuda")]

LIST = """Last metadata expiration check: 0:00:01 ago.
fleet lab: FAKE NVIDIA CUDA repository for RHEL 9
Name          Stream     Profiles  Summary
nvidia-driver 580-open   default   FAKE NVIDIA driver, stream 580-open
nvidia-driver 595-open [e] default [i] FAKE NVIDIA driver, stream 595-open
nvidia-driver open-dkms [d] default FAKE NVIDIA driver, stream open-dkms

Hint: [d]efault, [e]nabled, [x]disabled, [i]nstalled
""".splitlines()


def test_streams_parse_with_their_enabled_flag() -> None:
    assert parse_driver_streams(LIST) == {"580-open": False, "595-open": True, "open-dkms": False}
    assert parse_driver_streams(["nvidia-driver 580-open [d][e] default  x"]) == {"580-open": True}
    assert parse_driver_streams([]) == {}


def test_stream_args_only_switch_to_a_stream_the_repositories_offer() -> None:
    streams = parse_driver_streams(LIST)
    assert stream_args("580-open", streams) == {"module_stream": "580-open",
                                                "enabled_stream": "595-open"}
    # no modules (a repository without modulemd): versionlock alone holds the driver
    assert stream_args("580-open", {}) == {"module_stream": None, "enabled_stream": None}


def test_upgrade_switches_the_stream_after_releasing_the_locks_and_before_installing() -> None:
    plan = plan_pin("rhel", R595, ON_580, {"nvidia-driver", "cuda-toolkit-13-0"}, {},
                    module_stream="595-open", enabled_stream="580-open")
    cmds = [s.command for s in plan.steps]
    # the old release's toolkit goes too: its lock is released with the driver's
    assert cmds[0] == "dnf versionlock delete cuda-toolkit-13-0 nvidia-driver"
    assert cmds[1:3] == ["dnf -y module reset nvidia-driver",
                         "dnf -y module enable nvidia-driver:595-open"]
    assert cmds[3:5] == ["dnf -y install cuda-toolkit-13-2-13.2.1",  # install, then upgrade
                         "dnf -y install nvidia-driver-3:595.58.03"]  # NVIDIA's epoch 3
    assert cmds[5] == "dnf -y remove cuda-toolkit-13-0"
    assert plan.reboot_required


def test_only_the_stream_drifted_is_a_change_without_reboot() -> None:
    locked = {"nvidia-driver", "cuda-toolkit-13-0"}
    plan = plan_pin("rhel", R580, ON_580, locked, {}, module_stream="580-open",
                    enabled_stream="open-dkms")
    assert [s.command for s in plan.steps] == ["dnf -y module reset nvidia-driver",
                                               "dnf -y module enable nvidia-driver:580-open"]
    assert plan.changed and not plan.reboot_required
    same = plan_pin("rhel", R580, ON_580, locked, {}, module_stream="580-open",
                    enabled_stream="580-open")
    assert not same.changed
