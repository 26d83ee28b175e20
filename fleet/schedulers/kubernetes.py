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
never uncordoned by fleet (GPU Operator #304 and #2820, NVSentinel #1424). The annotation means
ownership only while the node is still cordoned: a schedulable node carrying fleet's marks was
put back in service by someone else (`kubectl uncordon`) or never got fleet's cordon (a crash
between annotate and cordon), so whenever fleet reads such a node (state, drain, undrain, idle)
it removes its annotations and restores the opt-out labels it set. Otherwise a later cordon by
someone else would read as fleet's, and fleet would uncordon it. A recordon that follows an
uncordon before fleet looks again cannot be told apart: nothing in the node object says who set
`spec.unschedulable`.

Empty means listed empty: a cordoned node is `drained` only when `kubectl get pods` answered and
named no pod left to evict; when the listing fails the node is `unknown` (fleet's or not), never
drained, so nothing reboots it.
`wait_s=0` cordons without evicting; `wait_s>0` runs `kubectl drain --timeout=<wait_s>s` (never
`--timeout=0s`, which means forever) unless no evictable pod is left, so the engine may call it
once per poll: each call pushes the evictions along for at most `wait_s` and returns.

The label-selector parser is `fleet.domain.kube_selector` (pure; the matrix validates with it),
the pod filters and kubectl's drain messages are `fleet.schedulers.kube_pods`; their public names
are re-exported here.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Sequence
from typing import Any

from fleet.domain.driver_owner import DEPLOY_DRIVER_LABEL, DRIVER_DAEMONSET, DriverOwner, from_node
from fleet.domain.kube_selector import LabelSelector as LabelSelector
from fleet.domain.kube_selector import Requirement as Requirement
from fleet.domain.kube_selector import parse_selector as parse_selector
from fleet.domain.ports import AdminState, HostResult
from fleet.schedulers.kube_pods import MIRROR_ANNOTATION as MIRROR_ANNOTATION
from fleet.schedulers.kube_pods import DrainFailure as DrainFailure
from fleet.schedulers.kube_pods import budgets_for, driver_pods
from fleet.schedulers.kube_pods import parse_drain_failure as parse_drain_failure
from fleet.schedulers.kube_pods import pod_kind as pod_kind
from fleet.schedulers.kube_pods import pod_name as pod_name
from fleet.schedulers.kube_pods import pods_to_go as pods_to_go
from fleet.schedulers.kube_settings import MAX_DRAIN_TIMEOUT_S as MAX_DRAIN_TIMEOUT_S
from fleet.schedulers.kube_settings import KubeDrainSettings as KubeDrainSettings
from fleet.schedulers.kube_settings import bad_setting, check_context, check_path
from fleet.schedulers.runner import Runner, check_node_name, one_line, run_command, tail

PREFIX = "fleet.local/"
GPU_OPERATOR_SKIP = "nvidia.com/gpu-driver-upgrade.skip"
NVSENTINEL_MANAGED = "k8saas.nvidia.com/ManagedByNVSentinel"
SKIP_LABELS: dict[str, str] = {GPU_OPERATOR_SKIP: "true", NVSENTINEL_MANAGED: "false"}
GPU_OPERATOR_STATE = "nvidia.com/gpu-driver-upgrade-state"  # its upgrade controller's progress
GPU_OPERATOR_DONE = "upgrade-done"
NVSENTINEL_REASON = "k8saas.nvidia.com/cordon-reason"
NVSENTINEL_BY = "k8saas.nvidia.com/cordon-by"

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
        kubeconfig = check_path(kubeconfig, "kubeconfig")
        context = check_context(context, "context")
        if kubeconfig:
            self.global_args += ["--kubeconfig", kubeconfig]
        if context:
            self.global_args += ["--context", context]
        if not (isinstance(command_timeout_s, int | float) and math.isfinite(command_timeout_s)
                and command_timeout_s > 0):
            raise bad_setting("command_timeout_s",
                              f"expected seconds > 0, got {command_timeout_s!r}")
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
        """Cordoned by fleet: fleet's annotation AND still cordoned (see the module doc)."""
        return self.unschedulable(node) and self.marked(node)

    def marked(self, node: dict[str, Any]) -> bool:
        """The node carries fleet's ownership marks (whether or not still cordoned)."""
        notes = self._meta(node, "annotations")
        return notes.get(self.owner_key) == "fleet" or self.prior_key in notes

    def _forget_stale(self, host: str, node: dict[str, Any]) -> str | None:
        """A schedulable node with fleet's marks is back in service: remove the marks and put
        the opt-out labels back as they were. Returns the error, or None (also when there was
        nothing to clear)."""
        if self.unschedulable(node) or not self.marked(node):
            return None
        return self._restore(host, node)

    def operator_upgrade(self, node: dict[str, Any]) -> str | None:
        """The GPU Operator's upgrade state when it is working on this node (its label set and
        not `upgrade-done`), else None."""
        state = self._meta(node, "labels").get(GPU_OPERATOR_STATE)
        return state if state and state != GPU_OPERATOR_DONE else None

    def driver_owner(self, host: str) -> DriverOwner | None:
        """Whether the Node says the GPU Operator runs this host's driver as a container: its
        `nvidia.com/gpu.deploy.driver` label and, where that says `true`, the pods of the
        operator's driver DaemonSet on it. None where the Node says nothing (no operator);
        unknown where the Node or its pods cannot be read (`fleet apply` refuses then)."""
        node = self.node(host)
        if isinstance(node, str):
            return DriverOwner("unknown", f"node {host}: {node}")
        labels = self._meta(node, "labels")
        if labels.get(DEPLOY_DRIVER_LABEL) != "true":
            return from_node(labels, [])
        pods = self.pods(host)
        return from_node(labels, None if isinstance(pods, str)
                         else driver_pods(pods, DRIVER_DAEMONSET))

    def admin_state(self, node: dict[str, Any], jobs: Sequence[str] | str = ()) -> AdminState:
        """The node's state; `jobs` (pods still to go, or the error listing them) keep a cordoned
        node `draining`. A node the GPU Operator is upgrading (and fleet did not cordon) is
        `draining` by the GPU Operator, whatever its cordon: fleet leaves it alone."""
        notes = self._meta(node, "annotations")
        ours = self.ours(node)
        upgrading = None if ours else self.operator_upgrade(node)
        if upgrading:
            return AdminState("draining", f"the GPU Operator is upgrading its driver "
                                          f"({GPU_OPERATOR_STATE}={upgrading})", False,
                              "gpu-operator", tuple(jobs) if not isinstance(jobs, str) else ())
        reason = notes.get(self.reason_key) if ours else notes.get(NVSENTINEL_REASON)
        owner = None if ours else notes.get(NVSENTINEL_BY)
        ready, why = self.ready(node)
        if not ready:
            return AdminState("down", reason or why, ours and self.unschedulable(node), owner)
        if self.unschedulable(node):
            if isinstance(jobs, str):  # cannot tell what is left: unknown, never drained
                return AdminState("unknown", f"cordoned ({reason or 'no reason'}); {jobs}",
                                  ours, owner)
            held = tuple(jobs)
            return AdminState("draining" if held else "drained", reason, ours, owner, held)
        return AdminState("available")

    def state(self, host: str) -> AdminState:
        node = self.node(host)
        if isinstance(node, str):
            return AdminState("unknown", node)
        stale = self._forget_stale(host, node)
        if stale is not None:
            return AdminState("available", f"fleet's marks left from an earlier drain could "
                                           f"not be removed: {stale}")
        jobs: list[str] | str = []
        if self.unschedulable(node) and self.ready(node)[0]:
            jobs = self.jobs(host)
        return self.admin_state(node, jobs)

    def idle(self, host: str) -> HostResult[bool]:
        """True when the node runs no workload: schedulable, Ready, and `kubectl get pods`
        lists no pod but DaemonSet, mirror and finished ones. A failed read is not ok (never
        idle)."""
        node = self.node(host)
        if isinstance(node, str):
            return HostResult.failed(host, node)
        self._forget_stale(host, node)
        if self.unschedulable(node) or not self.ready(node)[0] or self.operator_upgrade(node):
            return HostResult(host, False)
        pods = self.pods(host)
        if isinstance(pods, str):
            return HostResult.failed(host, pods)
        return HostResult(host, not pods_to_go(pods))

    # ------------------------------------------------------------------------- changing it
    def drain(self, host: str, reason: str, *, wait_s: float = 0) -> HostResult[None]:
        node = self.node(host)
        if isinstance(node, str):
            return HostResult.failed(host, node)
        if self.marked(node) and not self.unschedulable(node):
            stale = self._forget_stale(host, node)
            if stale is not None:
                return HostResult.failed(host, f"fleet's marks left from an earlier drain "
                                               f"could not be removed: {stale}")
            node = self.node(host)  # read again: the marks are gone, the prior labels back
            if isinstance(node, str):
                return HostResult.failed(host, node)
        ours = self.ours(node)
        if (self.unschedulable(node) or self.operator_upgrade(node)) and not ours:
            return HostResult(host, None, changed=False)  # someone else's: leave it
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
            if failure.pdb_blocked:
                detail += self._budgets(host, list(failure.pdb_blocked))
            return HostResult(host, None, ok=False, changed=changed,
                              error=f"kubectl drain {host} failed (exit {rc}): {detail}")
        return HostResult(host, None, changed=changed)

    def _budgets(self, host: str, blocked: Sequence[str]) -> str:
        """Which PodDisruptionBudgets held the `blocked` pods (the API server's refusal names
        none), read from their namespaces: "; held by budget(s) ns/name (...)"."""
        pods = self.pods(host)
        by_name = {pod_name(p): p for p in pods} if not isinstance(pods, str) else {}
        found: set[str] = set()
        for ns in sorted({p.split("/", 1)[0] for p in blocked}):
            rc, out, err = self._kubectl("get", "poddisruptionbudgets", "-n", ns, "-o", "json")
            try:
                items = json.loads(out).get("items") if rc == 0 else None
            except (ValueError, AttributeError):
                items = None
            if not isinstance(items, list):
                return f"; the budgets in {ns} could not be read: {tail(err or out) or rc}"
            for pod in blocked:
                if pod in by_name:
                    found.update(budgets_for([i for i in items if isinstance(i, dict)],
                                             by_name[pod]))
        return f"; held by budget(s) {', '.join(sorted(found))}" if found else ""

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
        if not ours and not self.marked(node):
            return HostResult(host, None, changed=False)
        if ours:
            rc, out, err = self._kubectl("uncordon", host)
            if rc != 0:
                return HostResult.failed(host, f"kubectl uncordon failed (exit {rc}): "
                                               f"{tail(err or out)}")
        error = self._restore(host, node)  # also the marks of a node someone else uncordoned
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
