"""Version strings: strict patterns, numeric comparison and branch derivation.

Versions travel from matrices and inventories into package-manager command lines, so every one is
checked against a strict pattern first: nothing with a space, quote, `;`, `$` or backtick passes.
Comparison is numeric per dotted component (570.124.06 > 570.26); sorting as strings is wrong.
"""

from __future__ import annotations

import re
from functools import total_ordering

from fleet.domain.names import NAME_RE as NAME_RE  # release and pool names: one grammar

VERSION_RE = re.compile(r"^[0-9]{1,6}(?:\.[0-9]{1,6}){0,3}$")
"""Any purely numeric dotted version (1 to 4 parts): driver, CUDA, kernel, companions."""

DRIVER_VERSION_RE = re.compile(r"^[0-9]{3}\.[0-9]{1,3}(?:\.[0-9]{1,3})?$")
"""A Linux driver version: branch, minor and optional patch (550.54.15, 570.26)."""

CUDA_VERSION_RE = re.compile(r"^[0-9]{1,2}\.[0-9]{1,2}(?:\.[0-9]{1,3})?$")
"""A CUDA toolkit version: major.minor with an optional update (12.4, 12.4.1)."""

COMPANION_VERSION_RE = re.compile(r"^[0-9]{1,6}(?:\.[0-9A-Za-z]{1,16}){0,4}$")
"""An upstream companion version (DCGM 4.2.3, cuDNN 9.10.2.21); dots and alphanumerics only."""

PACKAGE_VERSION_RE = re.compile(
    r"^(?:[0-9]{1,4}:)?[0-9][0-9A-Za-z.+~]{0,63}(?:-[0-9A-Za-z.+~]{1,32})?$"
)
"""A distro package version, optional epoch and revision (3:550.54.15-1.el9, 550.54.15-0ubuntu1)."""

PACKAGE_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9+._-]{0,99}$")
"""A Debian or RPM package name (lower case; `+`, `.`, `_`, `-` inside)."""

_KERNEL_CLAUSE_RE = re.compile(r"^(==|!=|>=|<=|>|<)([0-9]{1,3}(?:\.[0-9]{1,4}){0,2})$")


def is_version(text: str) -> bool:
    return bool(VERSION_RE.fullmatch(text))


def version_key(text: str) -> tuple[int, ...]:
    """Numeric sort key of a dotted version; raises ValueError on anything else."""
    if not VERSION_RE.fullmatch(text):
        raise ValueError(f"not a numeric dotted version: {text!r}")
    return tuple(int(part) for part in text.split("."))


def compare(a: str, b: str) -> int:
    """-1, 0 or 1 as a is older, equal or newer than b; missing parts are 0 (12.4 == 12.4.0)."""
    ka, kb = _padded(version_key(a), version_key(b))
    return (ka > kb) - (ka < kb)


def _padded(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    n = max(len(a), len(b))
    return a + (0,) * (n - len(a)), b + (0,) * (n - len(b))


@total_ordering
class Version:
    """A comparable dotted version that keeps its original text."""

    __slots__ = ("text", "key")

    def __init__(self, text: str) -> None:
        self.key = version_key(text)
        self.text = text

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return compare(self.text, other.text) == 0

    def __lt__(self, other: Version) -> bool:
        return compare(self.text, other.text) < 0

    def __hash__(self) -> int:
        key = self.key
        while key and key[-1] == 0:
            key = key[:-1]
        return hash(key)

    def __repr__(self) -> str:
        return f"Version({self.text!r})"

    def __str__(self) -> str:
        return self.text


def driver_branch(version: str) -> str:
    """The branch number of a driver version: "550.54.15" -> "550"."""
    if not DRIVER_VERSION_RE.fullmatch(version):
        raise ValueError(f"not a driver version: {version!r}")
    return version.split(".", 1)[0]


def branch_label(branch_or_version: str) -> str:
    """NVIDIA's R-number for a branch or a driver version: "550" or "550.54.15" -> "R550"."""
    text = branch_or_version.upper().removeprefix("R")
    return "R" + text.split(".", 1)[0]


def cuda_major_minor(version: str) -> tuple[int, int]:
    """(major, minor) of a CUDA version: "12.4.1" -> (12, 4)."""
    if not CUDA_VERSION_RE.fullmatch(version):
        raise ValueError(f"not a CUDA version: {version!r}")
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def kernel_release_version(release: str) -> str:
    """The numeric part of a kernel release: "5.15.0-105-generic" -> "5.15.0"."""
    match = re.match(r"^([0-9]+(?:\.[0-9]+){0,2})", release)
    if not match:
        raise ValueError(f"not a kernel release: {release!r}")
    return match.group(1)


def parse_constraint(constraint: str) -> list[tuple[str, str]]:
    """Split ">=5.15,<6.9" into [(">=", "5.15"), ("<", "6.9")]; ValueError when malformed."""
    clauses = [c.strip() for c in constraint.split(",")]
    out: list[tuple[str, str]] = []
    for clause in clauses:
        match = _KERNEL_CLAUSE_RE.fullmatch(clause)
        if not match:
            raise ValueError(
                f"bad version constraint clause {clause!r} (expected e.g. '>=5.15,<6.9')"
            )
        out.append((match.group(1), match.group(2)))
    return out


def satisfies(version: str, constraint: str) -> bool:
    """Whether a version meets every clause of a constraint such as ">=5.15,<6.9"."""
    ops = {
        "==": lambda c: c == 0,
        "!=": lambda c: c != 0,
        ">=": lambda c: c >= 0,
        "<=": lambda c: c <= 0,
        ">": lambda c: c > 0,
        "<": lambda c: c < 0,
    }
    return all(ops[op](compare(version, bound)) for op, bound in parse_constraint(constraint))
