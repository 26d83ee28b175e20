"""Node-profile checks of the GPU settings: ECC (and a pending change), persistence, compute
mode, power limit, clocks, GPU count (`profiles.NAME.gpu`).

Each difference names the GPU, the wanted and the found value and the command that fixes it; a
value the profile asks about that could not be read is an unreadable finding, never a pass.
`node.persistence_mode` also runs without a profile, as the old `persistence_mode` check did
(`policy.thresholds.require_persistence_mode`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from fleet.domain.checks.base import (
    FAIL,
    WARN,
    Check,
    finding,
    gpu_arg,
    mismatch,
    profile_of,
    registrar,
    unreadable,
)
from fleet.domain.checks.models import Expectations, Finding
from fleet.domain.facts import GpuFacts, HostFacts
from fleet.domain.matrix.models import Thresholds
from fleet.domain.matrix.profiles import GpuSettings

CHECKS: list[Check] = []
check = registrar(CHECKS)

USER_CLOCKS = "applications_clocks_setting"  # NVML's user-defined-clocks event reason
_SMI_MODE = {"default": "DEFAULT", "exclusive_process": "EXCLUSIVE_PROCESS",
             "prohibited": "PROHIBITED"}


def _gpu_settings(facts: HostFacts, exp: Expectations) -> GpuSettings | None:
    p = profile_of(facts, exp)
    return p.gpu if p is not None else None


def _each_gpu(check_id: str, facts: HostFacts, field: str, wanted: object,
              differ: Callable[[GpuFacts, object], Finding]) -> Iterator[Finding]:
    """Every GPU's `field` against `wanted`: unreadable where the probe could not read it,
    `differ(gpu, found)` where it differs."""
    for g in facts.gpus:
        found = getattr(g, field)
        if found is None:
            yield unreadable(check_id, g, field, g.reason(field), wanted)
        elif found != wanted:
            yield differ(g, found)


@check("node.ecc", ("gpus.ecc_mode_current",), "ECC mode as the profile wants")
def ecc(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    s = _gpu_settings(facts, exp)
    if s is None or s.ecc is None:
        return
    want = s.ecc

    def differ(g: GpuFacts, found: object) -> Finding:
        pending = g.ecc_mode_pending == want
        return mismatch("node.ecc", FAIL, "reboot", g, "ECC", want, found,
                        ("drain and reboot (the change is pending)" if pending else
                         f"nvidia-smi -i {gpu_arg(g)} -e {int(want)}, then a drained "
                         "reboot"), "ecc_mode_current",
                        "takes effect at the next reboot" if pending else "")

    yield from _each_gpu("node.ecc", facts, "ecc_mode_current", want, differ)


@check("node.ecc_pending", ("gpus.ecc_mode_current", "gpus.ecc_mode_pending"),
       "no ECC mode change waiting for a reboot")
def ecc_pending(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    s = _gpu_settings(facts, exp)
    if s is None or s.ecc is None:
        return  # without a declared ECC mode, ecc.mode warns about a pending change
    for g in facts.gpus:
        cur, pend = g.ecc_mode_current, g.ecc_mode_pending
        if cur is None or pend is None:
            if cur is not None:
                yield unreadable("node.ecc_pending", g, "ecc_mode_pending",
                                 g.reason("ecc_mode_pending"), s.ecc)
            continue
        if cur != pend:
            yield finding("node.ecc_pending", WARN, "reboot",
                          f"{g.label}: ECC {'on' if pend else 'off'} pending, "
                          f"{'on' if cur else 'off'} now: a reboot is due (drain first)", g,
                          facts=["gpus.ecc_mode_pending"], wanted=pend, found=cur,
                          fix="drain and reboot")


@check("node.persistence_mode", ("gpus.persistence_mode",), "persistence mode as wanted")
def persistence_mode(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    s = _gpu_settings(facts, exp)
    declared = s.persistence_mode if s is not None else None
    wanted = declared if declared is not None else (True if th.require_persistence_mode
                                                    else None)
    if wanted is None:
        return
    for g in facts.gpus:
        if g.persistence_mode is None:
            if declared is not None:
                yield unreadable("node.persistence_mode", g, "persistence_mode",
                                 g.reason("persistence_mode"), wanted)
        elif g.persistence_mode != wanted:
            fix = (f"nvidia-smi -i {gpu_arg(g)} -pm {int(wanted)}"
                   + (" (or enable nvidia-persistenced)" if wanted else ""))
            yield mismatch("node.persistence_mode", WARN, "none", g, "persistence mode",
                           wanted, g.persistence_mode, fix, "persistence_mode")


@check("node.compute_mode", ("gpus.compute_mode",), "compute mode as the profile wants")
def compute_mode(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    s = _gpu_settings(facts, exp)
    if s is None or s.compute_mode is None:
        return
    want = s.compute_mode
    yield from _each_gpu("node.compute_mode", facts, "compute_mode", want, lambda g, found: (
        mismatch("node.compute_mode", WARN, "none", g, "compute mode", want, found,
                 f"nvidia-smi -i {gpu_arg(g)} -c {_SMI_MODE[want]}", "compute_mode")))


def _wanted_watts(s: GpuSettings, g: GpuFacts) -> tuple[float | None, str]:
    """(watts the profile means for this GPU, the field it needs when unknown)."""
    if s.power_limit_w == "default":
        return g.power_limit_default_w, "power_limit_default_w"
    if s.power_limit_w == "max":
        return g.power_limit_max_w, "power_limit_max_w"
    return (float(s.power_limit_w) if s.power_limit_w is not None else None), ""


@check("node.power_limit", ("gpus.power_limit_w", "gpus.power_limit_*"),
       "power limit as the profile wants")
def power_limit(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    s = _gpu_settings(facts, exp)
    if s is None or s.power_limit_w is None:
        return
    for g in facts.gpus:
        wanted, needs = _wanted_watts(s, g)
        if wanted is None:
            yield unreadable("node.power_limit", g, needs, g.reason(needs), s.power_limit_w)
            continue
        lo, hi = g.power_limit_min_w, g.power_limit_max_w
        if isinstance(s.power_limit_w, float) and lo is not None and hi is not None and not (
                lo <= wanted <= hi):
            yield finding("node.power_limit", FAIL, "none",
                          f"{g.label}: the profile's {wanted:g} W is outside this GPU's "
                          f"{lo:g}-{hi:g} W: fix the profile", g,
                          facts=["gpus.power_limit_min_w", "gpus.power_limit_max_w"],
                          wanted=wanted, found=g.power_limit_w, min_w=lo, max_w=hi)
            continue
        if g.power_limit_w is None:
            yield unreadable("node.power_limit", g, "power_limit_w", g.reason("power_limit_w"),
                             wanted)
        elif abs(g.power_limit_w - wanted) > 0.5:
            yield mismatch("node.power_limit", WARN, "none", g, "power limit (W)", wanted,
                           g.power_limit_w, f"nvidia-smi -i {gpu_arg(g)} -pl {wanted:g}",
                           "power_limit_w")


@check("node.clocks", ("gpus.clocks_applications_*", "gpus.clocks_locked_graphics_mhz"),
       "application or locked clocks as the profile wants")
def clocks(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    s = _gpu_settings(facts, exp)
    if s is None or s.clocks is None:
        return
    app, locked = s.clocks.applications, s.clocks.locked_graphics_mhz
    for g in facts.gpus:
        if app is not None:
            found = (g.clocks_applications_memory_mhz, g.clocks_applications_graphics_mhz)
            want = (app.memory_mhz, app.graphics_mhz)
            if None in found:
                field = ("clocks_applications_memory_mhz" if found[0] is None
                         else "clocks_applications_graphics_mhz")
                yield unreadable("node.clocks", g, field, g.reason(field), list(want))
            elif found != want:
                yield mismatch("node.clocks", WARN, "none", g, "application clocks (mem, gfx)",
                               list(want), list(found),
                               f"nvidia-smi -i {gpu_arg(g)} -ac {want[0]},{want[1]}",
                               "clocks_applications_graphics_mhz")
            elif (USER_CLOCKS in (g.clock_event_reasons or [])
                  and want[1] == g.clocks_default_applications_graphics_mhz):
                # Default application clocks, yet a user setting holds the clock: locked clocks
                # (-lgc), which NVML cannot read back (fleet.domain.node_plan lifts them alike).
                yield mismatch("node.clocks", WARN, "none", g, "graphics clocks",
                               f"application clocks {want[0]},{want[1]}", "locked (user-defined "
                               "clocks)", f"nvidia-smi -i {gpu_arg(g)} -rgc",
                               "clock_event_reasons")
        if locked is not None:
            have = g.clocks_locked_graphics_mhz
            if have is None:
                yield unreadable("node.clocks", g, "clocks_locked_graphics_mhz",
                                 g.reason("clocks_locked_graphics_mhz"), list(locked))
            elif list(have) != list(locked):
                yield mismatch("node.clocks", WARN, "none", g, "locked graphics clocks",
                               list(locked), list(have) or "none",
                               f"nvidia-smi -i {gpu_arg(g)} -lgc {locked[0]},{locked[1]}",
                               "clocks_locked_graphics_mhz")


@check("node.gpu_count", ("gpu_count",), "as many GPUs as the profile says")
def gpu_count(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    s = _gpu_settings(facts, exp)
    if s is None or s.count is None:
        return
    if facts.gpu_count is None:
        yield unreadable("node.gpu_count", None, "gpu_count",
                         facts.unreadable.get("gpu_count", "not collected"), s.count)
    elif facts.gpu_count != s.count:
        yield mismatch("node.gpu_count", FAIL, "drain", None, "GPU count", s.count,
                       facts.gpu_count, "drain the host; look for a GPU missing from lspci or "
                       "fallen off the bus (kernel log), reseat or RMA it", "gpu_count")
