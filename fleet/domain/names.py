"""Names that reach hosts and tools: one grammar for the matrix, the inventory and the schedulers.

A host name becomes an SSH target, a Slurm node list (`scontrol`, `srun -w`) or a `kubectl`
argument; a pool or group name becomes a `--limit`, a history key and a label. None of them ever
goes through a shell, and still they are checked where they enter (the matrix loader, the
inventory loader, the scheduler adapters), so a `;`, a `$(...)`, a newline or a leading `-` is
refused with the file that holds it instead of surfacing later as a strange host or an option.

    pool, group, release   letters, digits, `.`, `_`, `-`; starts with a letter or digit; <= 63
    node (Slurm, k8s)      the same characters; <= 253
    host                   a node name, or a pyinfra connector name: `@local`, `@ssh/10.0.0.5`,
                           `@docker/ubuntu:22.04` (`@` and a connector, then `/` and its
                           argument: letters, digits and `. _ : @ + = ~ , / -`, not starting
                           with `-`)

docs/real-fleet.md ("Names") documents the same grammar.
"""

from __future__ import annotations

import re
from typing import Literal

NAME_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,62}\Z")
"""A pool, group or release name: safe as a file name, a label and a shell word."""

NODE_NAME_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,252}\Z")
"""A host or node name as Slurm and Kubernetes accept it (and DNS: an FQDN or an IPv4 address)."""

CONNECTOR_NAME_RE = re.compile(
    r"\A@[a-z][a-z0-9_]{0,31}(?:/[A-Za-z0-9._:@+=~,/][A-Za-z0-9._:@+=~,/-]{0,219})?\Z"
)
"""A pyinfra connector host (`@local`, `@ssh/host`, `@docker/image:tag`)."""

NameKind = Literal["host", "node", "pool", "group", "release"]

_GRAMMAR: dict[NameKind, str] = {
    "pool": "letters, digits, '.', '_' and '-', starting with a letter or digit, at most 63",
    "group": "letters, digits, '.', '_' and '-', starting with a letter or digit, at most 63",
    "release": "letters, digits, '.', '_' and '-', starting with a letter or digit, at most 63",
    "node": "letters, digits, '.', '_' and '-', starting with a letter or digit, at most 253",
    "host": "letters, digits, '.', '_' and '-', starting with a letter or digit, at most 253; "
            "or a pyinfra connector such as @local or @ssh/10.0.0.5",
}
_ALLOWED_FIRST = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_ALLOWED = _ALLOWED_FIRST | frozenset("._-")
_MAX = {"pool": 63, "group": 63, "release": 63, "node": 253, "host": 253}


def is_valid(kind: NameKind, value: object) -> bool:
    if not isinstance(value, str):
        return False
    if kind == "host":
        return bool(NODE_NAME_RE.fullmatch(value) or CONNECTOR_NAME_RE.fullmatch(value))
    if kind == "node":
        return bool(NODE_NAME_RE.fullmatch(value))
    return bool(NAME_RE.fullmatch(value))


def _why(value: str, kind: NameKind) -> str:
    if not value:
        return "is empty"
    if kind == "host" and value.startswith("@"):
        return "is not a pyinfra connector name"
    for ch in value:
        if not ch.isprintable():
            return f"contains the control character {ch!r}"
    if value[0] not in _ALLOWED_FIRST:
        return f"starts with {value[0]!r}"
    for ch in value:
        if ch not in _ALLOWED:
            return f"contains {ch!r}"
    return f"is longer than {_MAX[kind]} characters"


def name_problem(kind: NameKind, value: object) -> str | None:
    """Why `value` is not a valid name of this kind (one line), or None when it is."""
    if is_valid(kind, value):
        return None
    if not isinstance(value, str):
        return f"{kind} name {value!r} is not a string"
    return f"{kind} name {value!r} {_why(value, kind)} (allowed: {_GRAMMAR[kind]})"


def check_name(kind: NameKind, value: str) -> str:
    """`value` when valid, else ValueError with the reason."""
    problem = name_problem(kind, value)
    if problem is not None:
        raise ValueError(f"refusing {problem}")
    return value


def same_host(a: str, b: str) -> bool:
    """Whether two names can be one host: equal (case aside), or one is the other's first DNS
    label (`gpu-01` and `gpu-01.dc1.example.com`); `gpu-01.dc1` and `gpu-01.dc2` are not."""
    x, y = a.lower().rstrip("."), b.lower().rstrip(".")
    return x == y or x == y.split(".")[0] or y == x.split(".")[0]


__all__ = [
    "CONNECTOR_NAME_RE", "NAME_RE", "NODE_NAME_RE", "NameKind", "check_name", "is_valid",
    "name_problem", "same_host",
]
