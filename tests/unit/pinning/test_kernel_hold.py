"""Kernel hold planning (pool `kernel: {hold: true}`): what is held, what is released, that a
second pin changes nothing, and that names from the host are checked before any command."""

from __future__ import annotations

import pytest

from fleet.domain.host_change import host_change
from fleet.domain.kernel_hold import (
    KERNEL_HOLD_PATH,
    kernel_packages,
    record_text,
    with_kernel_hold,
)
from fleet.domain.pinning import PinPlan, plan_pin
from tests.unit.pinning.test_plan_pin import R550, pinned_files

ON_R550 = {"nvidia-driver-550": "550.54.15-1", "cuda-toolkit-12-4": "12.4.1-1"}
DEB_KERNELS = ["linux-image-amd64", "linux-image-6.1.0-18-amd64",
               "linux-headers-6.1.0-18-amd64", "linux-headers-6.1.0-18-common", "linux-base",
               "nvidia-driver-550", "linux-libc-dev"]
RPM_KERNELS = ["kernel", "kernel-core", "kernel-modules", "kernel-tools", "kernel-headers"]


def pinned(held: set[str] | frozenset[str] = frozenset(ON_R550)) -> PinPlan:
    """A Debian host already on R550: the release alone needs nothing."""
    plan = plan_pin("debian", R550, ON_R550, held=held, files=pinned_files(R550))
    assert not plan.changed
    return plan


def commands(plan: PinPlan) -> list[str | None]:
    return [s.command for s in plan.steps]


def test_the_kernel_packages_are_the_installed_images_and_headers() -> None:
    assert kernel_packages("debian", DEB_KERNELS) == [
        "linux-headers-6.1.0-18-amd64", "linux-headers-6.1.0-18-common",
        "linux-image-6.1.0-18-amd64", "linux-image-amd64"]
    assert kernel_packages("rhel", RPM_KERNELS) == ["kernel", "kernel-core", "kernel-modules"]


def test_hold_records_then_holds_and_a_second_pin_changes_nothing() -> None:
    plan = with_kernel_hold(pinned(), hold=True, kernels=DEB_KERNELS, record=None)
    assert plan.changed and not plan.reboot_required
    record, hold = plan.steps
    names = ["linux-headers-6.1.0-18-amd64", "linux-headers-6.1.0-18-common",
             "linux-image-6.1.0-18-amd64", "linux-image-amd64"]
    assert (record.path, record.content) == (KERNEL_HOLD_PATH, record_text(names))
    assert hold.command == "apt-mark hold " + " ".join(names)
    assert plan.kernel_hold == tuple(names)
    change = host_change(plan, R550)
    assert [str(h) for h in change.holds] == [f"hold {n} (apt-mark)" for n in names]
    assert [str(f) for f in change.files] == [
        f"create {KERNEL_HOLD_PATH} (record the kernel packages fleet holds)"]
    # the host after that pin: the packages held, the record written
    again = with_kernel_hold(pinned(set(ON_R550) | set(names)), hold=True, kernels=DEB_KERNELS,
                             record=record_text(names))
    assert not again.changed and again.steps == () and not host_change(again, R550).changed


def test_a_kernel_the_operator_held_is_neither_recorded_nor_released() -> None:
    mine = {"linux-image-amd64"}
    plan = with_kernel_hold(pinned(set(ON_R550) | mine), hold=True,
                            kernels=["linux-image-amd64", "linux-image-6.1.0-18-amd64"],
                            record=None)
    assert commands(plan)[-1] == "apt-mark hold linux-image-6.1.0-18-amd64"
    assert plan.steps[0].content == record_text(["linux-image-6.1.0-18-amd64"])
    # the pool drops the hold: only what fleet recorded is released, the record goes
    off = with_kernel_hold(pinned(set(ON_R550) | mine | {"linux-image-6.1.0-18-amd64"}),
                           hold=False, kernels=["linux-image-amd64", "linux-image-6.1.0-18-amd64"],
                           record=record_text(["linux-image-6.1.0-18-amd64"]))
    assert commands(off) == ["apt-mark unhold linux-image-6.1.0-18-amd64",
                             f"rm -f {KERNEL_HOLD_PATH}"]
    assert [str(h) for h in host_change(off, R550).holds] == [
        "unhold linux-image-6.1.0-18-amd64 (apt-mark)"]
    assert "forget fleet's kernel hold record" in host_change(off, R550).other


def test_a_pool_without_the_hold_and_no_record_gets_nothing() -> None:
    plan = pinned()
    assert with_kernel_hold(plan, hold=False, kernels=DEB_KERNELS, record=None) is plan


def test_dnf_hold_and_release_use_versionlock() -> None:
    base = plan_pin("rhel", R550, {"nvidia-driver-550": "3:550.54.15-1.el9",
                                   "cuda-toolkit-12-4": "0:12.4.1-1.el9"},
                    held=set(ON_R550), files={})
    held = set(ON_R550)
    plan = with_kernel_hold(base, hold=True, kernels=RPM_KERNELS, record=None, held=held)
    assert commands(plan)[-1] == "dnf versionlock add kernel kernel-core kernel-modules"
    assert [str(h) for h in host_change(plan, R550).holds][-1] == (
        "hold kernel-modules (dnf versionlock)")
    locked = held | {"kernel", "kernel-core", "kernel-modules"}
    rec = record_text(["kernel", "kernel-core", "kernel-modules"])
    assert not with_kernel_hold(base, hold=True, kernels=RPM_KERNELS, record=rec,
                                held=locked).changed
    off = with_kernel_hold(base, hold=False, kernels=RPM_KERNELS, record=rec, held=locked)
    assert commands(off) == ["dnf versionlock delete kernel kernel-core kernel-modules",
                             f"rm -f {KERNEL_HOLD_PATH}"]


def test_a_pool_asking_for_a_hold_on_a_host_without_kernel_packages_is_refused() -> None:
    with pytest.raises(ValueError, match="no kernel package is installed"):
        with_kernel_hold(pinned(), hold=True, kernels=["nvidia-driver-550"], record=None)


@pytest.mark.parametrize("bad", ["linux-image-6.1;reboot", "linux-image-$(id)",
                                 "linux-image-amd64\n", "linux-image- x"])
def test_names_from_the_host_are_checked_before_a_command(bad: str) -> None:
    with pytest.raises(ValueError, match="refusing package name"):
        with_kernel_hold(pinned(), hold=True, kernels=[bad, "linux-image-amd64"], record=None)
    with pytest.raises(ValueError, match="refusing package name"):  # the record is the host's
        with_kernel_hold(pinned(), hold=False, kernels=[],
                         record=f"# Managed by fleet\n{bad.strip()};x\n")
