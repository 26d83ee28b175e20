"""Pin planning: idempotence, branch switches, holds, and the dnf path (pyinfra issue 1910)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from fleet.domain.pinning import (
    PREFERENCES_PATH,
    UNATTENDED_PATH,
    apt_preferences,
    dnf_guard_command,
    plan_pin,
    unattended_blacklist,
    upstream_of,
)


@dataclass(frozen=True)
class Pkg:
    name: str
    version: str
    component: str


R550 = [Pkg("nvidia-driver-550", "550.54.15", "driver"), Pkg("cuda-toolkit-12-4", "12.4.1", "cuda")]
R570 = [
    Pkg("nvidia-driver-570-open", "570.124.06", "driver"),
    Pkg("cuda-toolkit-12-8", "12.8.1", "cuda"),
]


def pinned_files(wanted):
    return {
        PREFERENCES_PATH: apt_preferences(wanted),
        UNATTENDED_PATH: unattended_blacklist(wanted),
    }


@pytest.mark.parametrize(
    "distro,upstream",
    [
        ("550.54.15-1", "550.54.15"),
        ("550.54.15-0ubuntu1", "550.54.15"),
        ("1:550.54.15-0ubuntu0.22.04.1", "550.54.15"),
        ("3:550.54.15-1.el9", "550.54.15"),
        ("12.4.1", "12.4.1"),
    ],
)
def test_upstream_of_strips_epoch_and_revision(distro: str, upstream: str) -> None:
    assert upstream_of(distro) == upstream


def test_fresh_host_gets_pin_install_and_hold() -> None:
    plan = plan_pin("debian", R550, installed={}, held=[], files={})
    assert plan.changed and plan.reboot_required
    assert [c.kind for c in plan.changes] == ["install", "install"]
    commands = [s.command for s in plan.steps if s.command]
    assert commands[-1] == "apt-mark hold cuda-toolkit-12-4 nvidia-driver-550"
    install = next(c for c in commands if "apt-get install" in c)
    assert install.endswith("nvidia-driver-550 cuda-toolkit-12-4")
    assert "--allow-downgrades" in install
    prefs = next(s for s in plan.steps if s.path == PREFERENCES_PATH).content
    assert "Package: nvidia-driver-550\nPin: version 550.54.15-*\nPin-Priority: 1001" in prefs


def test_host_on_release_needs_nothing() -> None:
    installed = {"nvidia-driver-550": "550.54.15-1", "cuda-toolkit-12-4": "12.4.1-1"}
    plan = plan_pin("debian", R550, installed, held=installed, files=pinned_files(R550))
    assert not plan.changed
    assert plan.steps == () and plan.changes == () and not plan.reboot_required


def test_missing_hold_alone_is_repaired_without_reinstall() -> None:
    installed = {"nvidia-driver-550": "550.54.15-1", "cuda-toolkit-12-4": "12.4.1-1"}
    plan = plan_pin("debian", R550, installed, held=["cuda-toolkit-12-4"], files=pinned_files(R550))
    assert [s.command for s in plan.steps] == ["apt-mark hold nvidia-driver-550"]
    assert not plan.reboot_required


def test_branch_switch_removes_old_branch_in_the_same_transaction() -> None:
    installed = {"nvidia-driver-550": "550.54.15-1", "cuda-toolkit-12-4": "12.4.1-1"}
    plan = plan_pin("debian", R570, installed, held=installed, files=pinned_files(R550))
    kinds = {c.package: c.kind for c in plan.changes}
    assert kinds == {
        "nvidia-driver-570-open": "install",
        "cuda-toolkit-12-8": "install",
        "nvidia-driver-550": "remove",
        "cuda-toolkit-12-4": "remove",  # another release's toolkit goes too (issue 14.4)
    }
    commands = [s.command for s in plan.steps if s.command]
    # a held package blocks removal through Conflicts: unhold comes first
    assert commands[0] == "apt-mark unhold cuda-toolkit-12-4 nvidia-driver-550"
    install = next(c for c in commands if "apt-get install" in c)
    # purged, not removed: no `rc` configuration of the old branch is left behind
    assert " --purge " in install
    assert install.endswith(
        "nvidia-driver-570-open cuda-toolkit-12-8 cuda-toolkit-12-4- nvidia-driver-550-")
    assert plan.reboot_required


def test_drifted_host_is_downgraded_back() -> None:
    installed = {"nvidia-driver-550": "550.90.07-1", "cuda-toolkit-12-4": "12.4.1-1"}
    plan = plan_pin("debian", R550, installed, held=[], files=pinned_files(R550))
    (change,) = plan.changes
    assert (change.before, change.after, change.kind) == ("550.90.07", "550.54.15", "downgrade")


def test_cuda_only_change_needs_no_reboot() -> None:
    installed = {"nvidia-driver-550": "550.54.15-1", "cuda-toolkit-12-4": "12.4.0-1"}
    plan = plan_pin("debian", R550, installed, held=installed, files=pinned_files(R550))
    assert plan.changed and not plan.reboot_required


@pytest.mark.parametrize("bad", ["nvidia-driver-550; rm -rf /", "nvidia$(id)", "a b"])
def test_shell_metacharacters_in_names_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="refusing package name"):
        plan_pin("debian", [Pkg(bad, "550.54.15", "driver")], {}, [], {})


@pytest.mark.parametrize("bad", ["550.54.15;reboot", "550 54", "`id`", "$(id)"])
def test_shell_metacharacters_in_versions_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="refusing version"):
        plan_pin("debian", [Pkg("nvidia-driver-550", bad, "driver")], {}, [], {})


class TestDnf:
    wanted = [
        Pkg("nvidia-driver", "550.54.15", "driver"),
        Pkg("cuda-toolkit-12-4", "12.4.1", "cuda"),
    ]

    def test_downgrade_is_explicit_not_left_to_dnf_packages(self) -> None:
        # pyinfra 1910: dnf.packages("nvidia-driver=...") is a no-op when another version is
        # installed; the plan must name the downgrade itself.
        installed = {"nvidia-driver": "3:550.90.07-1.el9", "cuda-toolkit-12-4": "12.4.1-1"}
        plan = plan_pin(
            "rhel", self.wanted, installed, held=["nvidia-driver", "cuda-toolkit-12-4"], files={}
        )
        assert [s.command for s in plan.steps] == [
            "dnf versionlock delete nvidia-driver",
            "dnf -y downgrade nvidia-driver-3:550.54.15",
            "dnf versionlock add nvidia-driver-3:550.54.15",
            dnf_guard_command(self.wanted),  # the locks changed: dnf-automatic's guard too
        ]

    def test_locked_host_on_release_needs_nothing(self) -> None:
        installed = {"nvidia-driver": "3:550.54.15-1.el9", "cuda-toolkit-12-4": "12.4.1-1"}
        plan = plan_pin("rhel", self.wanted, installed, held=installed, files={})
        assert not plan.changed

    def test_fresh_install_locks_everything(self) -> None:
        plan = plan_pin("rhel", self.wanted, {}, [], {})
        assert [s.command for s in plan.steps] == [
            "dnf -y install nvidia-driver-3:550.54.15 cuda-toolkit-12-4-12.4.1",
            "dnf versionlock add cuda-toolkit-12-4-12.4.1 nvidia-driver-3:550.54.15",
            dnf_guard_command(self.wanted),
        ]


def test_release_of_finds_the_fullest_matching_release() -> None:
    from pathlib import Path

    from fleet.domain.matrix.loader import load_matrix
    from fleet.domain.pinning import release_of

    root = Path(__file__).resolve().parents[3]
    matrix = load_matrix(root / "matrices" / "example.yaml").matrix
    golden = matrix.golden_for(next(iter(matrix.pools)))
    installed = {p.name: f"{p.version}-1" for p in golden.packages("debian")}
    assert release_of(matrix.releases, installed, "debian") == golden.name
    drifted = dict(installed)
    driver = next(p for p in golden.packages("debian") if p.component == "driver")
    drifted[driver.name] = "1.0.0-1"
    assert release_of(matrix.releases, drifted, "debian") is None
    assert release_of(matrix.releases, {}, "debian") is None


def test_every_package_of_the_old_branch_goes_with_it() -> None:
    old = "570.133.20-1"
    installed = {"nvidia-driver-570-open": old, "nvidia-utils-570": old,
                 "libnvidia-compute-570": old, "nvidia-fabricmanager-570": old,
                 "cuda-toolkit-12-8": "12.8.1-1", "nvidia-container-toolkit": "1.17.5-1"}
    wanted = [Pkg("nvidia-driver-550-open", "550.127.05", "driver"),
              Pkg("nvidia-fabricmanager-550", "550.127.05", "fabric_manager")]
    plan = plan_pin("debian", wanted, installed, held=[], files={})
    removed = sorted(c.package for c in plan.changes if c.kind == "remove")
    assert removed == ["libnvidia-compute-570", "nvidia-driver-570-open",
                       "nvidia-fabricmanager-570", "nvidia-utils-570"]


def test_a_reboot_still_owed_is_work_to_do() -> None:
    installed = {"nvidia-driver-550": "550.54.15-1", "cuda-toolkit-12-4": "12.4.1-1"}
    files = pinned_files(R550)
    owed = plan_pin("debian", R550, installed, installed, files, loaded_module="535.183.01")
    assert owed.steps == () and owed.reboot_required and owed.changed
    done = plan_pin("debian", R550, installed, installed, files, loaded_module="550.54.15")
    assert not done.changed
