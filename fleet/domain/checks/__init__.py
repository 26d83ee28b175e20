"""Check catalog: pure health and conformance checks over HostFacts (see `catalog`)."""

from fleet.domain.checks.catalog import CHECKS, Check, run_checks, worst
from fleet.domain.checks.models import (
    CheckThresholds,
    Expectations,
    Finding,
    ReleaseExpectation,
    Remediation,
    Severity,
)
from fleet.domain.checks.xid import XidInfo, judge_xid, xid_catalog, xid_classes

__all__ = [
    "CHECKS",
    "Check",
    "CheckThresholds",
    "Expectations",
    "Finding",
    "ReleaseExpectation",
    "Remediation",
    "Severity",
    "XidInfo",
    "judge_xid",
    "run_checks",
    "worst",
    "xid_catalog",
    "xid_classes",
]
