"""What a dry run says a pin changes: packages, holds, pin files, reboot (fleet.domain.host_change).

Exhaustive over small worlds: whatever the host has, the dry run's answer is non-empty exactly
when the plan has work, and its holds are what the plan's own commands leave held.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.domain.host_change import HoldChange, host_change
from fleet.domain.pinning import (
    DNF_AUTOMATIC_PATH,
    PREFERENCES_PATH,
    UNATTENDED_PATH,
    apt_preferences,
    plan_pin,
    unattended_blacklist,
)


@dataclass(frozen=True)
class Pkg:
    name: str
    version: str
    component: str


R550 = [Pkg("nvidia-driver-550", "550.54.15", "driver"), Pkg("cuda-toolkit-12-4", "12.4.1", "cuda")]
R570 = [Pkg("nvidia-driver-570-open", "570.124.06", "driver"),
        Pkg("cuda-toolkit-12-8", "12.8.1", "cuda")]
R570_OLD_CUDA = [Pkg("nvidia-driver-570-open", "570.124.06", "driver"),
                 Pkg("cuda-toolkit-12-8", "12.8.0", "cuda")]


def files_for(wanted: list[Pkg]) -> dict[str, str | None]:
    return {PREFERENCES_PATH: apt_preferences(wanted),
            UNATTENDED_PATH: unattended_blacklist(wanted)}


def on(wanted: list[Pkg], suffix: str = "-1") -> dict[str, str]:
    return {w.name: w.version + suffix for w in wanted}


def test_a_host_on_its_release_changes_nothing() -> None:
    plan = plan_pin("debian", R570, on(R570), [w.name for w in R570], files_for(R570),
                    loaded_module="570.124.06")
    change = host_change(plan, R570)
    assert not change.changed and change.lines() == []
    assert change.as_dict() == {"os_family": "debian", "packages": [], "holds": [], "files": [],
                                "reboot": False, "reboot_reason": None, "other_steps": []}


def test_fresh_host_installs_holds_writes_pins_and_reboots() -> None:
    change = host_change(plan_pin("debian", R550, {}, [], {}), R550)
    assert [(c.package, c.before, c.after, c.kind) for c in change.packages] == [
        ("nvidia-driver-550", None, "550.54.15", "install"),
        ("cuda-toolkit-12-4", None, "12.4.1", "install")]
    assert change.holds == (HoldChange("cuda-toolkit-12-4", "hold", "apt-mark", "12.4.1"),
                            HoldChange("nvidia-driver-550", "hold", "apt-mark", "550.54.15"))
    assert [(f.path, f.action) for f in change.files] == [(PREFERENCES_PATH, "create"),
                                                          (UNATTENDED_PATH, "create")]
    assert change.reboot and change.reboot_reason == "kernel module changes with nvidia-driver-550"
    assert change.lines()[0] == "install nvidia-driver-550 - -> 550.54.15"
    assert "hold nvidia-driver-550 at 550.54.15 (apt-mark)" in change.lines()


def test_drift_by_hand_shows_the_hold_and_the_pin_file_not_an_empty_list() -> None:
    """The case that read "would change" with nothing listed: packages right, a hold and the
    pin file removed by hand."""
    files = files_for(R570)
    files[PREFERENCES_PATH] = None
    plan = plan_pin("debian", R570, on(R570), ["cuda-toolkit-12-8"], files,
                    loaded_module="570.124.06")
    assert plan.changed and not plan.changes
    change = host_change(plan, R570)
    assert change.changed and not change.packages and not change.reboot
    assert change.holds == (HoldChange("nvidia-driver-570-open", "hold", "apt-mark",
                                       "570.124.06"),)
    assert [(f.path, f.action) for f in change.files] == [(PREFERENCES_PATH, "create")]


def test_a_pin_file_edited_by_hand_is_replaced() -> None:
    files = files_for(R570)
    files[UNATTENDED_PATH] = "// edited\n"
    change = host_change(plan_pin("debian", R570, on(R570), [w.name for w in R570], files), R570)
    assert [(f.path, f.action) for f in change.files] == [(UNATTENDED_PATH, "replace")]


def test_branch_switch_removes_and_releases_the_old_branch() -> None:
    installed = {**on(R550), "nvidia-utils-550": "550.54.15-1"}
    held = ["nvidia-driver-550", "cuda-toolkit-12-4", "nvidia-utils-550"]
    change = host_change(plan_pin("debian", R570, installed, held, files_for(R550)), R570)
    kinds = {c.package: (c.before, c.after, c.kind) for c in change.packages}
    assert kinds == {"nvidia-driver-570-open": (None, "570.124.06", "install"),
                     "cuda-toolkit-12-8": (None, "12.8.1", "install"),
                     "nvidia-driver-550": ("550.54.15", None, "remove"),
                     "nvidia-utils-550": ("550.54.15", None, "remove"),
                     "cuda-toolkit-12-4": ("12.4.1", None, "remove")}
    actions = {(h.package, h.action) for h in change.holds}
    # the old release's toolkit goes with it (issue 14.4: a conformant host carries no other
    # release's packages), its hold released first
    assert actions == {("nvidia-driver-570-open", "hold"), ("cuda-toolkit-12-8", "hold"),
                       ("nvidia-driver-550", "unhold"), ("nvidia-utils-550", "unhold"),
                       ("cuda-toolkit-12-4", "unhold")}
    assert {f.action for f in change.files} == {"replace"}


def test_upgrade_and_downgrade_of_a_held_package_keep_its_apt_hold() -> None:
    up = host_change(plan_pin("debian", R570, on(R570_OLD_CUDA), [w.name for w in R570],
                              files_for(R570)), R570)
    assert [(c.package, c.before, c.after, c.kind) for c in up.packages] == [
        ("cuda-toolkit-12-8", "12.8.0", "12.8.1", "upgrade")]
    assert up.holds == () and not up.reboot
    down = host_change(plan_pin("debian", R570_OLD_CUDA, on(R570), [w.name for w in R570],
                                files_for(R570_OLD_CUDA)), R570_OLD_CUDA)
    assert [c.kind for c in down.packages] == ["downgrade"]


def test_dnf_relocks_a_locked_package_that_moves() -> None:
    change = host_change(plan_pin("rhel", R570, on(R570_OLD_CUDA, "-1.el9"),
                                  ["cuda-toolkit-12-8"], {}), R570)
    assert change.holds == (
        HoldChange("cuda-toolkit-12-8", "relock", "dnf versionlock", "12.8.1"),
        HoldChange("nvidia-driver-570-open", "hold", "dnf versionlock", "570.124.06"))
    assert change.files == ()  # no pin files on the RHEL family: version locks only


def test_a_reboot_still_owed_says_which_module_is_loaded() -> None:
    plan = plan_pin("debian", R570, on(R570), [w.name for w in R570], files_for(R570),
                    loaded_module="550.54.15")
    change = host_change(plan, R570)
    assert change.changed and change.lines() == [
        "reboot (kernel module 550.54.15 is loaded, the release's driver is 570.124.06)"]


def test_json_keys_are_stable() -> None:
    doc = host_change(plan_pin("rhel", R550, {"nvidia-driver-550": "550.40.07-1.el9"},
                               ["nvidia-driver-550"], {}), R550).as_dict()
    assert set(doc) == {"os_family", "packages", "holds", "files", "reboot", "reboot_reason",
                        "other_steps"}
    assert doc["packages"][0] == {"component": "driver", "package": "nvidia-driver-550",
                                  "from": "550.40.07", "to": "550.54.15", "kind": "upgrade"}
    assert set(doc["holds"][0]) == {"package", "action", "tool", "version"}


# ------------------------------------------------------------------ every combination
UNIVERSE = {
    "nvidia-driver-550": ["550.54.15-1", "550.40.07-1"],
    "nvidia-driver-570-open": ["570.124.06-1", "570.86.10-1"],
    "nvidia-utils-550": ["550.54.15-1"],
    "cuda-toolkit-12-4": ["12.4.1-1", "12.4.0-1"],
    "cuda-toolkit-12-8": ["12.8.1-1", "12.8.0-1"],
}
RELEASES = [R550, R570, R570_OLD_CUDA]


@st.composite
def worlds(draw: st.DrawFn) -> tuple:
    family = draw(st.sampled_from(["debian", "rhel"]))
    wanted = draw(st.sampled_from(RELEASES))
    installed = {}
    for name, versions in UNIVERSE.items():
        v = draw(st.sampled_from([None, *versions]))
        if v is not None:
            installed[name] = v
    held = draw(st.sets(st.sampled_from(sorted(UNIVERSE))))
    pins = draw(st.sampled_from([None, *RELEASES]))
    files = files_for(pins) if pins is not None else {}
    if draw(st.booleans()) and files:
        files[PREFERENCES_PATH] = None
    loaded = draw(st.sampled_from([None, "550.54.15", "570.124.06"]))
    return family, wanted, installed, held, files, loaded


def _held_after(plan, held: set[str]) -> set[str]:
    """Run the plan's hold commands on a set of held names."""
    after = set(held)
    removed = {c.package for c in plan.changes if c.kind == "remove"}
    for step in plan.steps:
        words = shlex.split(step.command or "")
        if words[:2] == ["apt-mark", "unhold"] or words[:3] == ["dnf", "versionlock", "delete"]:
            after -= set(words[2:] if words[0] == "apt-mark" else words[3:])
        elif words[:2] == ["apt-mark", "hold"]:
            after |= set(words[2:])
        elif words[:3] == ["dnf", "versionlock", "add"]:
            after |= {spec.rsplit("-", 1)[0] for spec in words[3:]}
    return after - removed


@settings(max_examples=400, deadline=None)
@given(worlds())
def test_dry_run_is_empty_exactly_when_the_plan_is_and_says_every_hold(world: tuple) -> None:
    family, wanted, installed, held, files, loaded = world
    plan = plan_pin(family, wanted, installed, held, files, loaded)
    change = host_change(plan, wanted)
    assert change.changed == plan.changed
    assert bool(change.lines()) == plan.changed
    assert change.reboot == plan.reboot_required and (change.reboot_reason is None) != change.reboot
    # the holds it lists are exactly what the plan's commands do to the set of held packages
    listed = (set(held) | {h.package for h in change.holds if h.action != "unhold"}) \
        - {h.package for h in change.holds if h.action == "unhold"}
    removed = {c.package for c in plan.changes if c.kind == "remove"}
    assert listed - removed == _held_after(plan, set(held))
    assert {w.name for w in wanted} <= _held_after(plan, set(held))
    # every file it writes is a step of the plan, every file step is listed
    assert {f.path for f in change.files} == {s.path for s in plan.steps if s.path}
    # apt and dnf pins: every step is said as a package/hold/file, but dnf-automatic's guard
    # (an edit of dnf's own automatic.conf, written with the locks)
    assert change.other == (() if family == "debian" or not any(
        DNF_AUTOMATIC_PATH in (s.command or "") for s in plan.steps) else (
        f"keep dnf-automatic off the pinned packages (exclude in {DNF_AUTOMATIC_PATH} [base])",))


def test_a_step_of_no_known_kind_is_listed_by_its_description() -> None:
    """A plan step the lists above do not cover (a dnf module stream, say) is still shown."""
    from dataclasses import replace

    from fleet.domain.pinning import Step

    plan = plan_pin("rhel", R570, on(R570, "-1.el9"), [w.name for w in R570], {})
    assert not plan.changed
    plan = replace(plan, steps=(Step("enable the release's stream 570-open",
                                     "dnf -y module enable nvidia-driver:570-open"),))
    change = host_change(plan, R570)
    assert change.changed and change.lines() == ["enable the release's stream 570-open"]
    assert change.as_dict()["other_steps"] == ["enable the release's stream 570-open"]
