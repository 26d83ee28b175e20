"""Check catalog: pure health and conformance checks over HostFacts (see `catalog`)."""

from fleet.domain.checks.base import Check
from fleet.domain.checks.catalog import CHECK_ALIASES, CHECKS, canonical_check, run_checks, worst
from fleet.domain.checks.expect import expectations_for, release_expectation
from fleet.domain.checks.models import (
    Expectations,
    Finding,
    ReleaseExpectation,
    Remediation,
    Severity,
)
from fleet.domain.checks.xid import XidInfo, judge_xid, xid_catalog, xid_classes

__all__ = [
    "CHECKS",
    "CHECK_ALIASES",
    "Check",
    "Expectations",
    "Finding",
    "ReleaseExpectation",
    "Remediation",
    "Severity",
    "XidInfo",
    "canonical_check",
    "expectations_for",
    "judge_xid",
    "release_expectation",
    "run_checks",
    "worst",
    "xid_catalog",
    "xid_classes",
]
