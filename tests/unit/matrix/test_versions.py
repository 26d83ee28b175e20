"""Version parsing, comparison, branches, constraints and the strict patterns."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet.domain.versions import (
    CUDA_VERSION_RE,
    DRIVER_VERSION_RE,
    PACKAGE_NAME_RE,
    PACKAGE_VERSION_RE,
    VERSION_RE,
    Version,
    branch_label,
    compare,
    cuda_major_minor,
    driver_branch,
    kernel_release_version,
    satisfies,
    version_key,
)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("570.124.06", "570.26", 1),  # numeric, not string order
        ("550.54.15", "550.54.14", 1),
        ("12.4", "12.4.0", 0),
        ("12.10", "12.9", 1),
        ("535.183.01", "550.54.14", -1),
    ],
)
def test_compare(a: str, b: str, expected: int) -> None:
    assert compare(a, b) == expected
    assert compare(b, a) == -expected


def test_version_objects_sort_numerically() -> None:
    found = sorted(Version(v) for v in ["570.26", "570.124.06", "550.54.15", "580.65.06"])
    assert [v.text for v in found] == ["550.54.15", "570.26", "570.124.06", "580.65.06"]
    assert Version("12.4") == Version("12.4.0")
    assert hash(Version("12.4")) == hash(Version("12.4.0"))


def test_branch() -> None:
    assert driver_branch("550.54.15") == "550"
    assert driver_branch("570.26") == "570"
    assert branch_label("550.54.15") == "R550"
    assert branch_label("R580") == "R580"
    with pytest.raises(ValueError):
        driver_branch("12.4")


def test_cuda_major_minor() -> None:
    assert cuda_major_minor("12.4.1") == (12, 4)
    assert cuda_major_minor("13.0") == (13, 0)


@pytest.mark.parametrize(
    "bad",
    ["550.54.15; rm -rf /", "550.54.15 ", "$(id)", "`id`", "550.54.15|sh", "550..1", "", "a.b",
     "550.54.15\n", "550.54.15&&x", "1.2.3.4.5"],
)
def test_patterns_reject_shell_metacharacters(bad: str) -> None:
    for regex in (VERSION_RE, DRIVER_VERSION_RE, CUDA_VERSION_RE):
        assert not regex.fullmatch(bad)
    with pytest.raises(ValueError):
        version_key(bad)


def test_package_patterns() -> None:
    assert PACKAGE_NAME_RE.fullmatch("nvidia-driver-550-open")
    assert PACKAGE_NAME_RE.fullmatch("libnvidia-compute-550")
    assert not PACKAGE_NAME_RE.fullmatch("nvidia-driver-550 && reboot")
    assert not PACKAGE_NAME_RE.fullmatch("Nvidia;x")
    assert PACKAGE_VERSION_RE.fullmatch("550.54.15-0ubuntu1")
    assert PACKAGE_VERSION_RE.fullmatch("3:550.54.15-1.el9")
    assert not PACKAGE_VERSION_RE.fullmatch("550.54.15-1 ;id")


@given(st.text(min_size=1, max_size=30))
def test_no_accepted_version_contains_shell_characters(text: str) -> None:
    if any(regex.fullmatch(text) for regex in (VERSION_RE, PACKAGE_VERSION_RE, PACKAGE_NAME_RE)):
        assert not set(text) & set(" \t\n;&|$`'\"<>()*?[]{}\\!#")


def test_constraints() -> None:
    assert satisfies("6.8", ">=5.15,<6.9")
    assert not satisfies("6.9", ">=5.15,<6.9")
    assert satisfies(kernel_release_version("5.15.0-105-generic"), ">=5.15,<6.9")
    with pytest.raises(ValueError):
        satisfies("6.1", ">=5.15;reboot")
