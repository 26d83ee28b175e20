"""Kubernetes label selectors: a pure port of k8s.io/apimachinery/pkg/labels/selector.go.

`parse_selector(text)` parses a selector as `labels.Parse` does (which `kubectl drain` applies to
`--pod-selector` before it lists any pod) and returns a `LabelSelector`, or raises ValueError
saying what is wrong; `LabelSelector.matches(labels)` is `Selector.Matches`. No I/O: the matrix
validates `rollout.drain.pod_selector` with it, the Kubernetes adapter filters pods with it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

# Kubernetes' label selector grammar, as k8s.io/apimachinery/pkg/labels/selector.go parses it
# (`labels.Parse`, which `kubectl drain` applies to --pod-selector before it lists any pod):
#
#   <selector-syntax>         ::= <requirement> | <requirement> "," <selector-syntax>
#   <requirement>             ::= [!] KEY [ <set-based-restriction> | <exact-match-restriction> ]
#   <set-based-restriction>   ::= "" | <inclusion-exclusion> <value-set>
#   <inclusion-exclusion>     ::= "in" | "notin"
#   <value-set>               ::= "(" <values> ")"
#   <values>                  ::= VALUE | VALUE "," <values>
#   <exact-match-restriction> ::= ["="|"=="|"!="] VALUE      (and "<", ">" with an integer)
#
# KEY: [DNS-1123 subdomain "/"] name, the name 1-63 of [A-Za-z0-9_.-] starting and ending
# alphanumeric (validation.IsQualifiedName); VALUE: 0-63 of the same (IsValidLabelValue).
# The lexer's tokens, precedence and quirks are kept ("in"/"notin" are words only where an
# operator may stand, "a=" means a="", "a in ()" means a in ("")), so a selector fleet accepts is
# one kubectl accepts, and the other way round.

SelectorOp = Literal["in", "notin", "=", "==", "!=", "exists", "!", ">", "<"]

_NAME_RE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_VALUE_RE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_RE = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_SPECIAL = "=!(),><"
_WHITESPACE = " \t\r\n"
_OPERATOR_TOKENS = ("!=", "==", "=", "!", "(", ")", ",", ">", "<")
_INT_RE = re.compile(r"[+-]?[0-9]+")


def _int64(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64), or None."""
    if not _INT_RE.fullmatch(text):
        return None
    number = int(text)
    return number if -(2**63) <= number < 2**63 else None


@dataclass(frozen=True)
class Requirement:
    """One requirement of a label selector (`labels.Requirement`)."""

    key: str
    op: SelectorOp
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """`Requirement.Matches`: NotIn and != also match pods without the label."""
        has = self.key in labels
        value = labels.get(self.key, "")
        if self.op in ("in", "=", "=="):
            return has and value in self.values
        if self.op in ("notin", "!="):
            return not has or value not in self.values
        if self.op == "exists":
            return has
        if self.op == "!":
            return not has
        left, right = _int64(value), _int64(self.values[0])  # > and <: both sides integers
        if not has or left is None or right is None:
            return False
        return left > right if self.op == ">" else left < right

    def __str__(self) -> str:  # `Requirement.String`
        if self.op == "!":
            return "!" + self.key
        if self.op == "exists":
            return self.key
        values = sorted(self.values)
        if self.op in ("in", "notin"):
            return f"{self.key} {self.op} ({','.join(values)})"
        return f"{self.key}{self.op}{values[0]}"


@dataclass(frozen=True)
class LabelSelector:
    """A parsed label selector: every requirement must match (AND)."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def _check_key(key: str) -> None:
    parts = key.split("/")
    if len(parts) > 2:
        raise ValueError(f"key {key!r}: at most one '/' (prefix/name)")
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            raise ValueError(f"key {key!r}: empty prefix")
        if len(prefix) > 253 or not _DNS1123_SUBDOMAIN_RE.fullmatch(prefix):
            raise ValueError(f"key {key!r}: prefix must be a DNS subdomain (lower case, "
                             "at most 253 characters)")
    if not name:
        raise ValueError(f"key {key!r}: empty name")
    if len(name) > 63 or not _NAME_RE.fullmatch(name):
        raise ValueError(f"key {key!r}: name must be 1-63 of A-Z a-z 0-9 - _ . starting and "
                         "ending with a letter or digit")


def _check_value(key: str, value: str) -> None:
    if len(value) > 63 or not _VALUE_RE.fullmatch(value):
        raise ValueError(f"value {value!r} of {key!r}: must be empty or 1-63 of A-Z a-z 0-9 - _ . "
                         "starting and ending with a letter or digit")


def _lex(text: str) -> list[tuple[str, str]]:
    """(kind, literal) tokens: kind is "id", an operator token, "in"/"notin", or "end"."""
    tokens: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in _WHITESPACE:
            i += 1
        if i >= n or text[i] == "\0":  # the lexer reads a NUL as the end of the string
            tokens.append(("end", ""))
            return tokens
        if text[i] in _SPECIAL:
            # the longest operator token starting here ("!=" before "!", "==" before "=")
            op = next(t for t in _OPERATOR_TOKENS if text.startswith(t, i))
            tokens.append((op, op))
            i += len(op)
            continue
        j = i
        while j < n and text[j] not in _SPECIAL and text[j] not in _WHITESPACE and text[j] != "\0":
            j += 1
        word = text[i:j]
        tokens.append((word if word in ("in", "notin") else "id", word))
        i = j


def parse_selector(text: str) -> LabelSelector:
    """A label selector, or ValueError saying what is wrong with it (`labels.Parse`)."""
    if any(ord(c) < 32 and c not in "\t\r\n" for c in text) or "\x7f" in text:
        raise ValueError("control characters are not allowed")
    toks = _lex(text)
    pos = 0

    def peek(values: bool = True) -> tuple[str, str]:
        kind, lit = toks[pos]
        return ("id", lit) if values and kind in ("in", "notin") else (kind, lit)

    def take(values: bool = True) -> tuple[str, str]:
        nonlocal pos
        tok = peek(values)
        pos += 1
        return tok

    def exact_value() -> tuple[str, ...]:
        kind, _ = peek()
        if kind in ("end", ","):
            return ("",)
        kind, lit = take()
        if kind != "id":
            raise ValueError(f"found {lit!r}, expected: a value")
        return (lit,)

    def value_set() -> tuple[str, ...]:  # parseValues + parseIdentifiersList
        kind, lit = take()
        if kind != "(":
            raise ValueError(f"found {lit!r}, expected: '('")
        kind, lit = peek()
        if kind == ")":  # "()" is the empty value
            take()
            return ("",)
        if kind not in ("id", ","):
            raise ValueError(f"found {lit!r}, expected: ',', ')' or a value")
        values: set[str] = set()
        while True:
            kind, lit = take()
            if kind == "id":
                values.add(lit)
                nxt, nlit = peek()
                if nxt == ")":
                    break
                if nxt != ",":
                    raise ValueError(f"found {nlit!r}, expected: ',' or ')'")
            elif kind == ",":  # "(,", ",)" and ",," stand for empty values
                if not values:
                    values.add("")
                nxt, _ = peek()
                if nxt == ")":
                    values.add("")
                    break
                if nxt == ",":
                    take()
                    values.add("")
            else:
                raise ValueError(f"found {lit!r}, expected: ',' or a value")
        kind, lit = take()
        if kind != ")":
            raise ValueError(f"found {lit!r}, expected: ')'")
        return tuple(sorted(values))

    def requirement() -> Requirement:
        negate = False
        kind, lit = take()
        if kind == "!":
            negate = True
            kind, lit = take()
        if kind != "id":
            raise ValueError(f"found {lit!r}, expected: a key")
        key = lit
        _check_key(key)
        if negate or peek()[0] in ("end", ","):
            return Requirement(key, "!" if negate else "exists")
        kind, lit = take(values=False)
        op: SelectorOp
        if kind in ("in", "notin"):
            op = "in" if kind == "in" else "notin"
            values = value_set()
        elif kind in ("=", "==", "!=", ">", "<"):
            op = kind  # type: ignore[assignment]
            values = exact_value()
        else:
            raise ValueError(f"found {lit!r}, expected: in, notin, =, ==, !=, >, <")
        for v in values:
            _check_value(key, v)
        if op in (">", "<") and _int64(values[0]) is None:
            raise ValueError(f"{key}{op}{values[0]}: the value must be a 64-bit integer")
        return Requirement(key, op, values)

    reqs: list[Requirement] = []
    while True:
        kind, lit = peek()
        if kind == "end":
            break
        if kind not in ("id", "!"):
            raise ValueError(f"found {lit!r}, expected: '!', a key, or the end")
        reqs.append(requirement())
        kind, lit = take()
        if kind == "end":
            break
        if kind != ",":
            raise ValueError(f"found {lit!r}, expected: ',' or the end")
        if peek()[0] not in ("id", "!"):
            raise ValueError(f"found {peek()[1]!r}, expected: a key after ','")
    return LabelSelector(tuple(sorted(reqs, key=lambda r: r.key)))


__all__ = ["LabelSelector", "Requirement", "SelectorOp", "parse_selector"]
