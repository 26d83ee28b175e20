"""The Xid catalog (fleet/data/xid.json): class, default severity and remediation per Xid."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

from pydantic import BaseModel

from fleet.domain.checks.models import Remediation, Severity


class XidInfo(BaseModel):
    id: int
    name: str
    xid_class: str
    severity: Severity
    remediation: Remediation
    description: str


@cache
def xid_catalog() -> dict[int, XidInfo]:
    raw = json.loads(resources.files("fleet.data").joinpath("xid.json").read_text("utf-8"))
    return {
        x["id"]: XidInfo(
            id=x["id"],
            name=x["name"],
            xid_class=x["class"],
            severity=x["severity"],
            remediation=x["remediation"],
            description=x["description"],
        )
        for x in raw["xids"]
    }


def xid_classes() -> dict[int, str]:
    return {i: x.xid_class for i, x in xid_catalog().items()}


_RECOVERY = {
    "reset required": ("fail", "reset_gpu"),
    "reboot required": ("fail", "reboot"),
    "drain and reset": ("fail", "drain"),
    "drain p2p": ("warn", "drain"),
}


def judge_xid(xid: int, text: str) -> tuple[Severity, Remediation, str]:
    """(severity, remediation, class) of one Xid line, with the per-line escalations."""
    info = xid_catalog().get(xid)
    if info is None:
        return Severity.WARN, "none", "unknown"
    sev, rem = info.severity, info.remediation
    if 144 <= xid <= 150 and " Fatal " in f" {text} ":
        sev, rem = Severity.FAIL, "reset_gpu"
    if xid == 154:
        low = text.lower()
        for phrase, (s, r) in _RECOVERY.items():
            if phrase in low.split(" to ", 1)[-1]:
                sev, rem = Severity(s), r  # type: ignore[assignment]
                break
    return sev, rem, info.xid_class
