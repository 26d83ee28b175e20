"""What kubectl says about pods: which ones hold up a drain, and why a drain failed.

`pod_kind` and `pods_to_go` apply kubectl's own drain filters (kubernetes/kubectl
pkg/drain/filters.go) to `kubectl get pods -o json` items; `parse_drain_failure` reads the text a
failed `kubectl drain` prints into a `DrainFailure` naming the pods left behind (PDB-blocked ones
first). Pure functions over parsed JSON and text: the adapter (`fleet.schedulers.kubernetes`)
runs kubectl.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleet.domain.kube_selector import LabelSelector

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"  # corev1.MirrorPodAnnotationKey


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


def driver_pods(pods: Iterable[Mapping[str, Any]], daemonset: str) -> list[str]:
    """namespace/name of the running pods of the DaemonSet named `daemonset` (the GPU
    Operator's driver: `nvidia-driver-daemonset`, in whichever namespace it was installed)."""
    out = []
    for pod in pods:
        ref = _controller(pod)
        if (pod_kind(pod) == "daemonset" and ref is not None
                and str(ref.get("name") or "") == daemonset):
            out.append(pod_name(pod))
    return sorted(out)


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


# ------------------------------------------------------------------ PodDisruptionBudgets
def _selects(selector: Any, labels: Mapping[str, str], api_version: str) -> bool:
    """A PDB's `spec.selector` (a metav1.LabelSelector) against a pod's labels. A missing
    selector selects nothing; an empty one selects nothing in policy/v1beta1 and everything in
    policy/v1 (the API's documented change between the two)."""
    if not isinstance(selector, Mapping):
        return False
    match = selector.get("matchLabels") or {}
    exprs = selector.get("matchExpressions") or []
    if not match and not exprs:
        return api_version == "policy/v1"
    if any(labels.get(k) != v for k, v in match.items()):
        return False
    for e in exprs:
        if not isinstance(e, Mapping):
            return False
        key, op, values = str(e.get("key")), e.get("operator"), e.get("values") or []
        present = key in labels
        ok = {"In": present and labels.get(key) in values,
              "NotIn": not present or labels.get(key) not in values,
              "Exists": present, "DoesNotExist": not present}.get(str(op), False)
        if not ok:
            return False
    return True


def budgets_for(pdbs: Iterable[Mapping[str, Any]], pod: Mapping[str, Any]) -> list[str]:
    """The budgets that cover `pod`, each as `namespace/name (minAvailable 1, 0 disruptions
    allowed, 1 of 1 healthy)`: the API server's 429 ("Cannot evict pod as it would violate the
    pod's disruption budget.") names none, so fleet looks them up to say which one held."""
    meta = pod.get("metadata") or {}
    ns = meta.get("namespace") or "default"
    labels = meta.get("labels") or {}
    out = []
    for pdb in pdbs:
        pmeta = pdb.get("metadata") or {}
        if (pmeta.get("namespace") or "default") != ns:
            continue
        spec, st = pdb.get("spec") or {}, pdb.get("status") or {}
        if not _selects(spec.get("selector"), labels, str(pdb.get("apiVersion") or "")):
            continue
        rule = next((f"{k} {spec[k]}" for k in ("minAvailable", "maxUnavailable") if k in spec),
                    "no rule")
        out.append(f"{ns}/{pmeta.get('name') or '?'} ({rule}, "
                   f"{st.get('disruptionsAllowed', '?')} disruptions allowed, "
                   f"{st.get('currentHealthy', '?')} of {st.get('expectedPods', '?')} healthy)")
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


__all__ = ["MIRROR_ANNOTATION", "DrainFailure", "budgets_for", "parse_drain_failure", "pod_kind",
           "pod_name", "pods_to_go"]
