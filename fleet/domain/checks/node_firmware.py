"""Node-profile check of the firmware: VBIOS and InfoROM image per GPU model, GSP firmware in use
or not, and one VBIOS across the host (`profiles.NAME.firmware`).

fleet never flashes firmware: a finding names the tool that updates it (NVIDIA's nvfwupd through
the BMC, or the server vendor's update bundle)."""

from __future__ import annotations

from collections.abc import Iterable

from fleet.domain.checks.base import (
    WARN,
    Check,
    finding,
    for_model,
    mismatch,
    profile_of,
    registrar,
    unreadable,
)
from fleet.domain.checks.models import Expectations, Finding
from fleet.domain.facts import HostFacts
from fleet.domain.matrix.models import Thresholds

CHECKS: list[Check] = []
check = registrar(CHECKS)

FIRMWARE_FIX = ("update the GPU firmware with NVIDIA's nvfwupd (through the BMC) or the "
                "server vendor's firmware bundle; fleet never flashes firmware")
GSP_FIX = ("set NVreg_EnableGpuFirmware in the nvidia module options (open modules always "
           "use GSP), then a drained reboot")


@check("node.firmware", ("gpus.vbios_version", "gpus.inforom_image", "gpus.gsp_mode"),
       "VBIOS, InfoROM image and GSP firmware as the profile allows")
def firmware(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    p = profile_of(facts, exp)
    fw = p.firmware if p is not None else None
    if fw is None:
        return
    for g in facts.gpus:
        for field, table, what in (("vbios_version", fw.vbios, "VBIOS"),
                                   ("inforom_image", fw.inforom_image, "InfoROM image")):
            allowed = for_model(table, g)
            if allowed is None:
                if table and g.name is None:
                    yield unreadable("node.firmware", g, "name", g.reason("name"),
                                     f"a {what} for its model")
                continue
            value = getattr(g, field)
            if value is None:
                yield unreadable("node.firmware", g, field, g.reason(field), allowed)
            elif value not in allowed:
                yield mismatch("node.firmware", WARN, "none", g, what, " or ".join(allowed),
                               value, FIRMWARE_FIX, field)
        if fw.gsp is not None:
            if g.gsp_mode is None:
                yield unreadable("node.firmware", g, "gsp_mode", g.reason("gsp_mode"), fw.gsp)
            elif g.gsp_mode != fw.gsp:
                yield mismatch("node.firmware", WARN, "none", g, "GSP firmware", fw.gsp,
                               g.gsp_mode, GSP_FIX, "gsp_mode")
    if fw.all_equal:
        seen = {g.vbios_version for g in facts.gpus if g.vbios_version is not None}
        unread = [g for g in facts.gpus if g.vbios_version is None]
        if len(seen) > 1:
            per_gpu = {g.label: g.vbios_version for g in facts.gpus}
            yield finding("node.firmware", WARN, "none",
                          f"host: {len(seen)} VBIOS versions across its GPUs "
                          f"({', '.join(sorted(seen))}), wanted one; fix: "
                          f"{FIRMWARE_FIX}", facts=["gpus.vbios_version"],
                          wanted="one VBIOS", found=per_gpu, fix=FIRMWARE_FIX)
        elif unread:
            yield unreadable("node.firmware", unread[0], "vbios_version",
                             unread[0].reason("vbios_version"), "one VBIOS on every GPU")
