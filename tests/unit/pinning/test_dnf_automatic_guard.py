"""dnf-automatic's exclude guard (issue 14.2): the dnf side of the unattended-upgrades blacklist.

The planner does not read /etc/dnf/automatic.conf, so the host-side edit (GNU sed) must give
the same file as the pure `with_dnf_automatic_guard` whatever the file holds: both run here on
real files (this machine's GNU sed, as on EL hosts).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from fleet.domain.pinning import (
    DNF_AUTOMATIC_PATH,
    DNF_GUARD_MARK,
    dnf_automatic_excluded,
    dnf_guard_command,
    plan_pin,
    with_dnf_automatic_guard,
)


@dataclass(frozen=True)
class W:
    name: str
    version: str
    component: str


R570 = [W("nvidia-driver", "570.133.20", "driver"), W("cuda-toolkit-12-8", "12.8.1", "cuda"),
        W("datacenter-gpu-manager", "3.3.6", "dcgm")]
R580 = [W("nvidia-driver", "580.95.05", "driver"), W("cuda-toolkit-13-0", "13.0.2", "cuda")]
ON_580 = {"nvidia-driver": "3:580.95.05-1.el9", "cuda-toolkit-13-0": "0:13.0.2-1.el9"}
LOCKED_580 = {"nvidia-driver", "cuda-toolkit-13-0"}

# Debian 12's python3-dnf /etc/dnf/automatic.conf, comments shortened
STOCK = """[commands]
upgrade_type = default
random_sleep = 0
download_updates = yes
apply_updates = no

[emitters]
emit_via = stdio

[base]
# This section overrides dnf.conf

# Use this to filter DNF core messages
debuglevel = 1
"""
OLD_GUARD = with_dnf_automatic_guard(STOCK, R570)
CASES = {
    "absent": None,
    "stock": STOCK,
    "earlier guard": OLD_GUARD,
    "no base section": "[commands]\napply_updates = yes\n",
    "site excludes, base in the middle": "[base]  \nexcludepkgs = kernel*\n[emitters]\n"
                                         "emit_via = motd\n",
    "base last, no newline": "[commands]\napply_updates = yes\n[base]",
    "mark left alone at the end": f"[base]\ndebuglevel = 1\n{DNF_GUARD_MARK}\n",
    "empty": "",
}


def _on_host(tmp_path: Path, text: str | None, wanted: list[W]) -> str:
    f = tmp_path / "automatic.conf"
    if text is not None:
        f.write_text(text)
    subprocess.run(["bash", "-c", dnf_guard_command(wanted, str(f))], check=True)
    return f.read_text()


@pytest.mark.parametrize("case", sorted(CASES))
def test_host_edit_gives_the_planned_file(tmp_path: Path, case: str) -> None:
    text = CASES[case]
    want = with_dnf_automatic_guard(text, R580)
    assert _on_host(tmp_path, text, R580) == want
    assert dnf_automatic_excluded(want) == {"nvidia-driver", "cuda-toolkit-13-0"}
    assert want.count(DNF_GUARD_MARK) == 1  # an earlier guard replaced, never stacked
    # idempotent: a second edit changes nothing
    assert with_dnf_automatic_guard(want, R580) == want
    assert _on_host(tmp_path, None, R580) == want  # (the file is there now)


def test_guard_sits_under_base_and_keeps_the_site_settings() -> None:
    out = with_dnf_automatic_guard(STOCK, R580)
    assert out.startswith(STOCK.split("[base]")[0] + "[base]\n" + DNF_GUARD_MARK + "\n"
                          "exclude = cuda-toolkit-13-0, nvidia-driver\n")
    assert "debuglevel = 1" in out and "apply_updates = no" in out
    # rollback to r570: the r580 names go, r570's come, the site's settings stay
    back = with_dnf_automatic_guard(out, R570)
    assert back == OLD_GUARD
    assert dnf_automatic_excluded(back) == {"nvidia-driver", "cuda-toolkit-12-8",
                                            "datacenter-gpu-manager"}
    assert dnf_automatic_excluded(STOCK) is None


def test_first_pin_writes_the_guard_after_the_locks() -> None:
    plan = plan_pin("rhel", R580, {}, set(), {})
    cmds = [s.command or "" for s in plan.steps]
    assert cmds[-2].startswith("dnf versionlock add ")
    assert cmds[-1] == dnf_guard_command(R580)
    assert DNF_AUTOMATIC_PATH in cmds[-1]


def test_second_run_plans_nothing_and_rollback_rewrites_the_guard() -> None:
    assert plan_pin("rhel", R580, ON_580, LOCKED_580, {}).steps == ()
    back = plan_pin("rhel", R570, ON_580, LOCKED_580, {})
    assert back.steps[-1].command == dnf_guard_command(R570)


def test_a_guard_read_from_the_host_is_repaired_when_wrong_and_left_when_right() -> None:
    right = with_dnf_automatic_guard(STOCK, R580)
    assert plan_pin("rhel", R580, ON_580, LOCKED_580, {DNF_AUTOMATIC_PATH: right}).steps == ()
    for wrong in (STOCK, None, with_dnf_automatic_guard(STOCK, R570)):
        plan = plan_pin("rhel", R580, ON_580, LOCKED_580, {DNF_AUTOMATIC_PATH: wrong})
        assert [s.command for s in plan.steps] == [dnf_guard_command(R580)]


def test_apt_hosts_get_no_dnf_guard() -> None:
    plan = plan_pin("debian", R580, {}, set(), {})
    assert not any(DNF_AUTOMATIC_PATH in (s.command or "") + (s.path or "")
                   for s in plan.steps)


def test_names_that_are_not_plain_package_names_never_reach_the_shell() -> None:
    with pytest.raises(ValueError):
        dnf_guard_command([W("nvidia-driver/;rm", "580.95.05", "driver")])
