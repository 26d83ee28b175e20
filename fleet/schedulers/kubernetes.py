"""Kubernetes: cordon, evict through the Eviction API (PDBs honoured), undrain only ours.

    kubectl get node NODE -o json
    kubectl annotate node NODE --overwrite fleet.local/drained-by=fleet ...  (ownership first)
    kubectl label node NODE --overwrite nvidia.com/gpu-driver-upgrade.skip=true \
        k8saas.nvidia.com/ManagedByNVSentinel=false
    kubectl cordon NODE
    kubectl get pods --all-namespaces --field-selector spec.nodeName=NODE -o json
    kubectl drain NODE --ignore-daemonsets [--delete-emptydir-data] [--pod-selector=SEL] \
        [--grace-period=N] --timeout=<wait_s>s
    kubectl uncordon NODE; labels restored; annotations removed      (undrain, only if ours)

Every call carries `--kubeconfig` and `--context` when they are set.

Eviction, never deletion: fleet never passes `--disable-eviction` (which "will bypass checking
PodDisruptionBudgets") nor `--force` (which deletes pods no controller would recreate). A pod a
PodDisruptionBudget protects is refused by the API server with 429 ("Cannot evict pod as it would
violate the pod's disruption budget."), kubectl retries it until `--timeout`, and the drain comes
back not ok naming the pods the budget held. Pods with emptyDir volumes block the drain unless
`delete_emptydir_data` (their data is lost); pods no controller owns always block it.

A node is `drained` only when it is cordoned AND no evictable pod is left on it: not a DaemonSet
pod (a DaemonSet ignores cordons, kubectl never evicts them), not a mirror (static) pod, not
Succeeded/Failed, and matching the pod selector when one is set (kubectl's own filters,
kubernetes/kubectl pkg/drain/filters.go). Until then it is `draining` and `jobs` names the pods.

Labels set during the change (see shared/reference/gpu-fleet-ops-anchors.md):
- `nvidia.com/gpu-driver-upgrade.skip=true`: the GPU Operator's upgrade controller leaves a node
  with this label alone ("Skipping a node. The label nvidia.com/gpu-driver-upgrade.skip=true
  excludes it", §GPU Operator upgrade controller; also the GPU Operator driver-upgrade docs:
  "To skip driver upgrades on a certain node, label the node with
  nvidia.com/gpu-driver-upgrade.skip=true"), so it does not race our driver change.
- `k8saas.nvidia.com/ManagedByNVSentinel=false`: NVSentinel's opt-out label ("The opt-out label is
  k8saas.nvidia.com/ManagedByNVSentinel=false"; its driver-upgrade runbook says to set it before
  upgrading and remove it afterwards, NVSentinel#1642), so its DCGM-connectivity rule does not
  cordon the node while the driver is down (§NVSentinel, "Interaction with driver upgrades").
The labels' previous values are kept in an annotation and restored on undrain, so a node an
operator had already opted out stays opted out.

Ownership: the `drained-by=fleet` annotation is written before the cordon, so a cordon by fleet is
always recognisable; a node cordoned without it (by an operator, NVSentinel, the GPU Operator) is
never uncordoned by fleet (GPU Operator #304 and #2820, NVSentinel #1424).
`wait_s=0` cordons without evicting; `wait_s>0` runs `kubectl drain --timeout=<wait_s>s` (never
`--timeout=0s`, which means forever) unless no evictable pod is left, so the engine may call it
once per poll: each call pushes the evictions along for at most `wait_s` and returns.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from fleet.domain.ports import AdminState, HostResult
from fleet.errors import BadInput
from fleet.schedulers.runner import Runner, check_node_name, one_line, run_command, tail

PREFIX = "fleet.local/"
GPU_OPERATOR_SKIP = "nvidia.com/gpu-driver-upgrade.skip"
NVSENTINEL_MANAGED = "k8saas.nvidia.com/ManagedByNVSentinel"
SKIP_LABELS: dict[str, str] = {GPU_OPERATOR_SKIP: "true", NVSENTINEL_MANAGED: "false"}
NVSENTINEL_REASON = "k8saas.nvidia.com/cordon-reason"
NVSENTINEL_BY = "k8saas.nvidia.com/cordon-by"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"  # corev1.MirrorPodAnnotationKey

MAX_DRAIN_TIMEOUT_S = 7 * 24 * 3600.0


# ---------------------------------------------------------------------------- label selectors
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


# --------------------------------------------------------------------------------- pods
def pod_name(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or '?'}"


def _controller(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """`metav1.GetControllerOf`: the owner reference with controller: true."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return ref
    return None


def pod_kind(pod: Mapping[str, Any]) -> str:
    """Why a pod does or does not hold up a drain, in kubectl's terms (pkg/drain/filters.go):
    "finished" (Succeeded/Failed: deleted, holds nothing), "daemonset" (never evicted: the
    DaemonSet controller ignores cordons), "mirror" (a static pod's mirror: cannot be deleted
    through the API), "unmanaged" (no controller: kubectl refuses it without --force),
    "local-storage" (emptyDir: refused without --delete-emptydir-data), or "evictable"."""
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        return "finished"
    ref = _controller(pod)
    if ref is not None and ref.get("kind") == "DaemonSet" and ref.get("apiVersion") == "apps/v1":
        return "daemonset"
    if MIRROR_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {}):
        return "mirror"
    if any(isinstance(v, Mapping) and "emptyDir" in v
           for v in (pod.get("spec") or {}).get("volumes") or []):
        return "local-storage"
    if ref is None:
        return "unmanaged"
    return "evictable"


def pods_to_go(pods: Iterable[Mapping[str, Any]],
               selector: LabelSelector | None = None) -> list[str]:
    """namespace/name of the pods a drain still has to remove: every pod but DaemonSet, mirror and
    finished pods, and (with a selector) only those it matches. Sorted."""
    out = []
    for pod in pods:
        if pod_kind(pod) in ("finished", "daemonset", "mirror"):
            continue
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if selector is not None and not selector.matches(labels):
            continue
        out.append(pod_name(pod))
    return sorted(out)


# ------------------------------------------------------------------- kubectl drain's errors
# The texts kubectl prints when a drain does not finish, from kubernetes/kubectl at
# dee3483a3d6a64c07fdf746caf80af446dee99ac (and kubernetes-1.20.0, the Debian kubectl):
# pkg/drain/drain.go, evictPods():
#   "error when evicting pods/%q -n %q (will retry after %v): %v"   (stderr, a 429: retried)
#   "error when evicting pods/%q -n %q: global timeout reached: %v" (--timeout ran out)
#   "error when evicting pods/%q -n %q: %v"                          (any other refusal)
#   "error when waiting for pod %q in namespace %q to terminate: %v" (evicted, still there;
#     kubernetes-1.20.0: "error when waiting for pod %q terminating: %v")
# pkg/drain/filters.go, errors(): "cannot delete %s: %s" with daemonSetFatal "DaemonSet-managed
#   Pods (use --ignore-daemonsets to ignore)", localStorageFatal "Pods with local storage (use
#   --delete-emptydir-data to override)", unmanagedFatal "Pods that declare no controller (use
#   --force to override)" (1.20: "Pods not managed by ReplicationController, ReplicaSet, Job,
#   DaemonSet or StatefulSet (use --force to override)")
# pkg/cmd/drain/drain.go, RunDrain(): "error: unable to drain node %q due to error: %s,
#   continuing command..." then "There are pending nodes to be drained:".
# kubectl before 1.17 (removed by kubernetes/kubectl e09feee2022b): "drain did not complete
#   within %v".
# The 429 a PodDisruptionBudget causes carries the API server's message (kubernetes/kubernetes
# pkg/registry/core/pod/storage/eviction.go, checkAndDecrement): "Cannot evict pod as it would
# violate the pod's disruption budget."; a pod under two budgets gets "This pod has more than one
# PodDisruptionBudget, which the eviction subresource does not support." (not retried).

_POD = r'"(?P<name>[^"]+)"'
_NS = r'"(?P<ns>[^"]+)"'
_END = r"(?P<msg>.*?)(?=, error when |, cannot delete |\]|, continuing command\.\.\.|$)"
_RETRY_RE = re.compile(rf"error when evicting pods/{_POD} -n {_NS} \(will retry after [^)]*\): "
                       r"(?P<msg>[^\n]*)")
_EVICT_ERR_RE = re.compile(rf"error when evicting pods/{_POD} -n {_NS}: {_END}", re.M)
_WAIT_ERR_RE = re.compile(rf"error when waiting for pod {_POD} in namespace {_NS} to "
                          rf"terminate: {_END}", re.M)
_WAIT_ERR_OLD_RE = re.compile(rf"error when waiting for pod {_POD} terminating: {_END}", re.M)
_PODREF = r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*"
_CANNOT_RE = re.compile(rf"cannot delete (?P<what>[^:\n]+?(?:\([^)\n]*\))?): "
                        rf"(?P<pods>{_PODREF}(?:, {_PODREF})*)")
_OLD_TIMEOUT_RE = re.compile(r"drain did not complete within (?P<t>\S+)")
_GLOBAL_TIMEOUT = "global timeout reached"
_PDB_WORDS = ("disruption budget", "poddisruptionbudget")

_HINTS = {
    "local storage": " (fleet: their emptyDir data would be lost; set delete_emptydir_data to "
                     "evict them anyway)",
    "no controller": " (fleet never passes --force: move or delete these pods yourself)",
    "not managed by": " (fleet never passes --force: move or delete these pods yourself)",
    "DaemonSet-managed": " (fleet: ignore_daemonsets is off)",
}


def _is_pdb(msg: str) -> bool:
    low = msg.lower()
    return any(w in low for w in _PDB_WORDS)


def _names(pods: Sequence[str], limit: int = 10) -> str:
    more = f" and {len(pods) - limit} more" if len(pods) > limit else ""
    return ", ".join(pods[:limit]) + more


@dataclass
class DrainFailure:
    """What a failed `kubectl drain` says about the pods it could not remove."""

    pdb_blocked: dict[str, str] = field(default_factory=dict)  # pod -> API server message
    retried: dict[str, str] = field(default_factory=dict)  # other 429s, pod -> message
    timed_out: list[str] = field(default_factory=list)  # eviction not done by --timeout
    terminating: list[str] = field(default_factory=list)  # evicted, not gone by --timeout
    refused: dict[str, list[str]] = field(default_factory=dict)  # kubectl's reason -> pods
    failed: dict[str, str] = field(default_factory=dict)  # pod -> eviction error
    timeout: str | None = None

    @property
    def blocking(self) -> list[str]:
        """Every pod named as left behind, PDB-blocked ones first."""
        seen: dict[str, None] = dict.fromkeys(self.pdb_blocked)
        for pods in (self.timed_out, self.terminating, *self.refused.values(), self.failed,
                     self.retried):
            seen.update(dict.fromkeys(pods))
        return list(seen)

    def summary(self) -> str:
        parts = []
        if self.pdb_blocked:
            msgs = sorted(set(self.pdb_blocked.values()))
            parts.append(f"a PodDisruptionBudget blocks eviction of "
                         f"{_names(list(self.pdb_blocked))} ({'; '.join(msgs)})")
        rest = [p for p in self.timed_out if p not in self.pdb_blocked and p not in self.retried]
        if self.retried:
            parts.append("eviction refused and retried until the timeout: " + "; ".join(
                f"{p}: {m}" for p, m in list(self.retried.items())[:10]))
        if rest:
            parts.append(f"not evicted within {self.timeout or 'the timeout'}: {_names(rest)}")
        if self.terminating:
            parts.append(f"evicted but still terminating after {self.timeout or 'the timeout'}:"
                         f" {_names(self.terminating)}")
        for what, pods in self.refused.items():
            hint = next((h for k, h in _HINTS.items() if k in what), "")
            parts.append(f"kubectl cannot delete {what}: {_names(pods)}{hint}")
        if self.failed:
            parts.append("eviction failed: " + "; ".join(
                f"{p}: {m}" for p, m in list(self.failed.items())[:10]))
        if not parts and self.timeout:
            parts.append(f"drain did not complete within {self.timeout}")
        return "; ".join(parts)


def parse_drain_failure(text: str) -> DrainFailure:
    """kubectl drain's stderr (and stdout) -> the pods it left behind and why."""
    f = DrainFailure()
    for m in _RETRY_RE.finditer(text):
        pod, msg = f"{m['ns']}/{m['name']}", m["msg"].strip()
        if _is_pdb(msg):
            f.pdb_blocked[pod] = msg
        else:
            f.retried[pod] = msg
    for m in _EVICT_ERR_RE.finditer(text):
        pod, msg = f"{m['ns']}/{m['name']}", m["msg"].strip()
        if msg.startswith(_GLOBAL_TIMEOUT):
            f.timeout = f.timeout or msg.partition(":")[2].strip() or None
            if pod not in f.timed_out:
                f.timed_out.append(pod)
        elif _is_pdb(msg):
            f.pdb_blocked[pod] = msg
        else:
            f.failed[pod] = msg
    for rx in (_WAIT_ERR_RE, _WAIT_ERR_OLD_RE):
        for m in rx.finditer(text):
            ns = m.groupdict().get("ns") or "?"
            pod = f"{ns}/{m['name']}"
            if _GLOBAL_TIMEOUT in m["msg"]:
                f.timeout = f.timeout or m["msg"].partition(_GLOBAL_TIMEOUT)[2].strip(": ") or None
            if pod not in f.terminating:
                f.terminating.append(pod)
    for m in _CANNOT_RE.finditer(text):
        pods = f.refused.setdefault(m["what"].strip(), [])
        pods.extend(p for p in m["pods"].split(", ") if p not in pods)
    old = _OLD_TIMEOUT_RE.search(text)
    if old:
        f.timeout = f.timeout or old["t"]
    if f.timed_out or f.terminating or f.failed:
        # a pod retried for its budget and still not evicted at the end is PDB-blocked; one
        # retried earlier but evicted in the end (even if still terminating) is not
        f.pdb_blocked = {p: m for p, m in f.pdb_blocked.items()
                         if p in f.timed_out or p in f.failed}
        f.retried = {p: m for p, m in f.retried.items() if p in f.timed_out}
    return f


# ------------------------------------------------------------------------------ settings
_CONTEXT_RE = re.compile(r"[A-Za-z0-9_.:@/+=][A-Za-z0-9_.:@/+=~ -]{0,252}")


def _bad(field_name: str, message: str) -> BadInput:
    return BadInput.single(message, field=f"drain.{field_name}")


@dataclass(frozen=True)
class KubeDrainSettings:
    """How `kubectl drain` runs; validated before anything reaches an argv."""

    timeout_s: float = 30.0
    pod_selector: LabelSelector | None = None
    delete_emptydir_data: bool = False
    ignore_daemonsets: bool = True
    grace_period_s: int | None = None

    @classmethod
    def build(cls, *, timeout_s: float = 30.0, pod_selector: str | None = None,
              delete_emptydir_data: bool = False, ignore_daemonsets: bool = True,
              grace_period_s: int | None = None, disable_eviction: bool = False
              ) -> KubeDrainSettings:
        if disable_eviction:
            raise _bad("disable_eviction",
                       "fleet always evicts through the Eviction API so PodDisruptionBudgets "
                       "hold; --disable-eviction (and --force) are never passed")
        for name, flag in (("delete_emptydir_data", delete_emptydir_data),
                           ("ignore_daemonsets", ignore_daemonsets)):
            if not isinstance(flag, bool):
                raise _bad(name, f"expected true or false, got {flag!r}")
        if (isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float)
                or not math.isfinite(timeout_s) or not 1 <= timeout_s <= MAX_DRAIN_TIMEOUT_S):
            raise _bad("timeout_s", f"expected seconds between 1 and {MAX_DRAIN_TIMEOUT_S:.0f}, "
                                    f"got {timeout_s!r}")
        if grace_period_s is not None and (
                isinstance(grace_period_s, bool) or not isinstance(grace_period_s, int)
                or not 1 <= grace_period_s <= 86400):
            raise _bad("grace_period_s",
                       f"expected whole seconds between 1 and 86400, got {grace_period_s!r} "
                       "(0 would delete pods at once, without graceful termination)")
        selector = None
        if pod_selector is not None:
            if not isinstance(pod_selector, str):
                raise _bad("pod_selector", f"expected a label selector string, "
                                           f"got {pod_selector!r}")
            if len(pod_selector) > 4096:
                raise _bad("pod_selector", "longer than 4096 characters")
            if pod_selector.strip():
                try:
                    selector = parse_selector(pod_selector)
                except ValueError as exc:
                    raise _bad("pod_selector", f"{pod_selector!r} is not a Kubernetes label "
                                               f"selector: {exc}") from None
        return cls(float(timeout_s), selector, delete_emptydir_data, ignore_daemonsets,
                   grace_period_s)

    def drain_args(self, timeout_s: int) -> list[str]:
        """`kubectl drain NODE` options for one run of at most `timeout_s` seconds."""
        args = []
        if self.ignore_daemonsets:
            args.append("--ignore-daemonsets")
        if self.delete_emptydir_data:
            args.append("--delete-emptydir-data")
        if self.pod_selector is not None:
            args.append(f"--pod-selector={self.pod_selector}")
        if self.grace_period_s is not None:
            args.append(f"--grace-period={self.grace_period_s}")
        args.append(f"--timeout={max(1, int(timeout_s))}s")
        return args


def _check_context(value: str | None, name: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not _CONTEXT_RE.fullmatch(value):
        raise _bad(name, f"{value!r}: expected a kubeconfig {name} name of plain characters, "
                         "not starting with '-'")
    return value


def _check_path(value: str | None, name: str) -> str | None:
    if value is None or value == "":
        return None
    if (not isinstance(value, str) or value.startswith("-") or len(value) > 4096
            or any(ord(c) < 32 or c == "\x7f" for c in value)):
        raise _bad(name, f"{value!r}: expected a file path (no control characters, not "
                         "starting with '-')")
    return value


# ----------------------------------------------------------------------------- the adapter
class KubernetesScheduler:
    """`Scheduler` over `kubectl` (see the module doc).

    `timeout_s` is the drain timeout: how long the engine's repeated `drain(..., wait_s=...)`
    may block in one `kubectl drain` (`drain_kick_s`); the pool's wait for pods to leave is the
    engine's, across many such calls. `command_timeout_s` bounds every other kubectl call.
    """

    name = "kubernetes"

    def __init__(self, runner: Runner | None = None, *, kubectl: str = "kubectl",
                 context: str | None = None, kubeconfig: str | None = None,
                 prefix: str = PREFIX, timeout_s: float = 30.0,
                 pod_selector: str | None = None, delete_emptydir_data: bool = False,
                 ignore_daemonsets: bool = True, grace_period_s: int | None = None,
                 disable_eviction: bool = False, command_timeout_s: float = 60.0,
                 skip_labels: dict[str, str] | None = None) -> None:
        self.settings = KubeDrainSettings.build(
            timeout_s=timeout_s, pod_selector=pod_selector,
            delete_emptydir_data=delete_emptydir_data, ignore_daemonsets=ignore_daemonsets,
            grace_period_s=grace_period_s, disable_eviction=disable_eviction)
        self.run = runner or run_command
        self.kubectl = kubectl
        self.global_args: list[str] = []
        kubeconfig = _check_path(kubeconfig, "kubeconfig")
        context = _check_context(context, "context")
        if kubeconfig:
            self.global_args += ["--kubeconfig", kubeconfig]
        if context:
            self.global_args += ["--context", context]
        if not (isinstance(command_timeout_s, int | float) and math.isfinite(command_timeout_s)
                and command_timeout_s > 0):
            raise _bad("command_timeout_s", f"expected seconds > 0, got {command_timeout_s!r}")
        self.command_timeout_s = float(command_timeout_s)
        self.drain_kick_s = self.settings.timeout_s
        self.owner_key = prefix + "drained-by"
        self.reason_key = prefix + "drain-reason"
        self.prior_key = prefix + "prior-labels"
        self.skip_labels = dict(SKIP_LABELS if skip_labels is None else skip_labels)

    def for_drain(self, drain: Any) -> KubernetesScheduler:
        """This adapter with a pool's `rollout.drain` settings (a `DrainSettings`): its pod
        selector, emptyDir and grace period; each repeated `kubectl drain` blocks at most one
        poll, since the pool's whole wait belongs to the engine."""
        other = copy.copy(self)
        other.settings = KubeDrainSettings.build(
            timeout_s=max(1.0, min(float(drain.poll_seconds), 30.0)),
            pod_selector=drain.pod_selector, delete_emptydir_data=drain.delete_emptydir_data,
            ignore_daemonsets=self.settings.ignore_daemonsets,
            grace_period_s=drain.grace_period_seconds)
        other.drain_kick_s = other.settings.timeout_s
        return other

    def _kubectl(self, *args: str, timeout: float | None = None) -> tuple[int, str, str]:
        return self.run([self.kubectl, *self.global_args, *args],
                        timeout or self.command_timeout_s)

    def node(self, host: str) -> dict[str, Any] | str:
        """The node object (`kubectl get node -o json`), or the error text."""
        check_node_name(host)
        rc, out, err = self._kubectl("get", "node", host, "-o", "json")
        if rc != 0:
            return one_line(err or out or f"kubectl exited {rc}")
        try:
            obj = json.loads(out)
        except ValueError as exc:
            return f"kubectl get node: unparsable JSON: {exc}"
        return obj if isinstance(obj, dict) else "kubectl get node: not an object"

    def pods(self, host: str) -> list[dict[str, Any]] | str:
        """Every pod bound to the node, all namespaces, or the error text."""
        check_node_name(host)
        rc, out, err = self._kubectl("get", "pods", "--all-namespaces", "--field-selector",
                                     f"spec.nodeName={host}", "-o", "json")
        if rc != 0:
            return f"kubectl get pods failed (exit {rc}): {tail(err or out)}"
        try:
            obj = json.loads(out)
        except ValueError as exc:
            return f"kubectl get pods: unparsable JSON: {exc}"
        items = obj.get("items") if isinstance(obj, dict) else None
        if not isinstance(items, list):
            return "kubectl get pods: no items list"
        return [p for p in items if isinstance(p, dict)
                and (p.get("spec") or {}).get("nodeName", host) == host]

    def jobs(self, host: str) -> list[str] | str:
        """namespace/name of the pods a drain still has to remove, or the error text."""
        pods = self.pods(host)
        if isinstance(pods, str):
            return pods
        return pods_to_go(pods, self.settings.pod_selector)

    # ---------------------------------------------------------------------- reading a node
    @staticmethod
    def _meta(node: dict[str, Any], key: str) -> dict[str, str]:
        value = (node.get("metadata") or {}).get(key) or {}
        return value if isinstance(value, dict) else {}

    @staticmethod
    def unschedulable(node: dict[str, Any]) -> bool:
        return bool((node.get("spec") or {}).get("unschedulable"))

    @staticmethod
    def ready(node: dict[str, Any]) -> tuple[bool, str | None]:
        for c in (node.get("status") or {}).get("conditions") or []:
            if c.get("type") == "Ready":
                return c.get("status") == "True", c.get("reason")
        return False, "no Ready condition"

    def ours(self, node: dict[str, Any]) -> bool:
        return self._meta(node, "annotations").get(self.owner_key) == "fleet"

    def admin_state(self, node: dict[str, Any], jobs: Sequence[str] | str = ()) -> AdminState:
        """The node's state; `jobs` (pods still to go, or the error listing them) keep a cordoned
        node `draining`."""
        notes = self._meta(node, "annotations")
        ours = self.ours(node)
        reason = notes.get(self.reason_key) if ours else notes.get(NVSENTINEL_REASON)
        owner = None if ours else notes.get(NVSENTINEL_BY)
        ready, why = self.ready(node)
        if not ready:
            return AdminState("down", reason or why, ours and self.unschedulable(node), owner)
        if self.unschedulable(node):
            if isinstance(jobs, str):  # cannot tell what is left: not drained
                return AdminState("draining", reason, ours, owner)
            held = tuple(jobs)
            return AdminState("draining" if held else "drained", reason, ours, owner, held)
        return AdminState("available")

    def state(self, host: str) -> AdminState:
        node = self.node(host)
        if isinstance(node, str):
            return AdminState("unknown", node)
        jobs: list[str] | str = []
        if self.unschedulable(node) and self.ready(node)[0]:
            jobs = self.jobs(host)
        return self.admin_state(node, jobs)

    # ------------------------------------------------------------------------- changing it
    def drain(self, host: str, reason: str, *, wait_s: float = 0) -> HostResult[None]:
        node = self.node(host)
        if isinstance(node, str):
            return HostResult.failed(host, node)
        ours = self.ours(node)
        if self.unschedulable(node) and not ours:
            return HostResult(host, None, changed=False)  # someone else's cordon: leave it
        ready, why = self.ready(node)
        if not ready and not ours:
            return HostResult.failed(host, f"node is NotReady ({why}); not taking it over")
        if not math.isfinite(wait_s):
            return HostResult.failed(host, f"refusing wait_s={wait_s!r}: a drain needs a finite "
                                           "timeout (--timeout=0s would wait forever)")
        changed = False
        if not (self.unschedulable(node) and ours):
            error = self._take(host, node, reason)
            if error:
                return HostResult.failed(host, error)
            changed = True
        if wait_s <= 0:
            return HostResult(host, None, changed=changed)
        left = self.jobs(host)
        if isinstance(left, str):
            return HostResult(host, None, ok=False, changed=changed, error=left)
        if not left:  # nothing to evict: no kubectl drain (called once per poll)
            return HostResult(host, None, changed=changed)
        secs = max(1, math.ceil(wait_s))
        rc, out, err = self._kubectl("drain", host, *self.settings.drain_args(secs),
                                     timeout=secs + self.command_timeout_s)
        if rc != 0:
            failure = parse_drain_failure(f"{err}\n{out}")
            detail = failure.summary() or tail(err or out) or "no output"
            return HostResult(host, None, ok=False, changed=changed,
                              error=f"kubectl drain {host} failed (exit {rc}): {detail}")
        return HostResult(host, None, changed=changed)

    def _take(self, host: str, node: dict[str, Any], reason: str) -> str | None:
        labels = self._meta(node, "labels")
        notes = self._meta(node, "annotations")
        args = [f"{self.owner_key}=fleet", f"{self.reason_key}=fleet: {one_line(reason, 180)}"]
        if self.prior_key not in notes:  # a retry after a crash keeps the first record
            prior = {k: labels.get(k) for k in self.skip_labels}
            args.append(f"{self.prior_key}={json.dumps(prior, sort_keys=True)}")
        for verb, extra in (
            ("annotate", args),
            ("label", [f"{k}={v}" for k, v in self.skip_labels.items()]),
        ):
            if not extra:
                continue
            rc, out, err = self._kubectl(verb, "node", host, "--overwrite", *extra)
            if rc != 0:
                return f"kubectl {verb} failed (exit {rc}): {tail(err or out)}"
        rc, out, err = self._kubectl("cordon", host)
        if rc != 0:
            return f"kubectl cordon failed (exit {rc}): {tail(err or out)}"
        return None

    def undrain(self, host: str) -> HostResult[None]:
        node = self.node(host)
        if isinstance(node, str):
            return HostResult.failed(host, node)
        ours = self.ours(node)
        if self.unschedulable(node) and not ours:
            notes = self._meta(node, "annotations")
            who = notes.get(NVSENTINEL_BY) or "someone else"
            return HostResult.failed(host, f"cordoned by {who}; fleet does not uncordon it")
        if not ours:
            return HostResult(host, None, changed=False)
        if self.unschedulable(node):
            rc, out, err = self._kubectl("uncordon", host)
            if rc != 0:
                return HostResult.failed(host, f"kubectl uncordon failed (exit {rc}): "
                                               f"{tail(err or out)}")
        error = self._restore(host, node)
        if error:
            return HostResult(host, None, ok=False, changed=True, error=error)
        return HostResult(host, None, changed=True)

    def _restore(self, host: str, node: dict[str, Any]) -> str | None:
        notes = self._meta(node, "annotations")
        try:
            prior = json.loads(notes.get(self.prior_key) or "{}")
        except ValueError:
            prior = {}
        if not isinstance(prior, dict):
            prior = {}
        restore = [f"{k}={prior[k]}" if prior.get(k) is not None else f"{k}-"
                   for k in self.skip_labels]
        for verb, args in (
            ("label", restore),
            ("annotate", [f"{self.owner_key}-", f"{self.reason_key}-", f"{self.prior_key}-"]),
        ):
            rc, out, err = self._kubectl(verb, "node", host, "--overwrite", *args)
            if rc != 0:
                return f"kubectl {verb} failed (exit {rc}): {tail(err or out)}"
        return None


__all__ = [
    "DrainFailure", "KubeDrainSettings", "KubernetesScheduler", "LabelSelector", "Requirement",
    "parse_drain_failure", "parse_selector", "pod_kind", "pods_to_go",
]
