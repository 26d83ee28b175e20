"""Kubernetes: cordon and drain with `kubectl`, tell the GPU tools to keep out, undrain only ours.

    kubectl get node NODE -o json
    kubectl annotate node NODE --overwrite fleet.local/drained-by=fleet ...  (ownership first)
    kubectl label node NODE --overwrite nvidia.com/gpu-driver-upgrade.skip=true \
        k8saas.nvidia.com/ManagedByNVSentinel=false
    kubectl cordon NODE
    kubectl drain NODE --ignore-daemonsets --delete-emptydir-data --timeout=<wait_s>s
    kubectl uncordon NODE; labels restored; annotations removed      (undrain, only if ours)

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
`wait_s=0` cordons without evicting (like a Slurm DRAIN without waiting); `wait_s>0` runs
`kubectl drain` with that timeout (never `--timeout=0s`, which means forever).
"""

from __future__ import annotations

import json
import math
from typing import Any

from fleet.domain.ports import AdminState, HostResult
from fleet.schedulers.runner import Runner, check_node_name, one_line, run_command, tail

PREFIX = "fleet.local/"
GPU_OPERATOR_SKIP = "nvidia.com/gpu-driver-upgrade.skip"
NVSENTINEL_MANAGED = "k8saas.nvidia.com/ManagedByNVSentinel"
SKIP_LABELS: dict[str, str] = {GPU_OPERATOR_SKIP: "true", NVSENTINEL_MANAGED: "false"}
NVSENTINEL_REASON = "k8saas.nvidia.com/cordon-reason"


class KubernetesScheduler:
    """`Scheduler` over `kubectl` (see the module doc)."""

    name = "kubernetes"

    def __init__(self, runner: Runner | None = None, *, kubectl: str = "kubectl",
                 context: str | None = None, kubeconfig: str | None = None,
                 prefix: str = PREFIX, timeout_s: float = 60.0,
                 skip_labels: dict[str, str] | None = None) -> None:
        self.run = runner or run_command
        self.kubectl = kubectl
        self.global_args: list[str] = []
        if kubeconfig:
            self.global_args += ["--kubeconfig", kubeconfig]
        if context:
            self.global_args += ["--context", context]
        self.timeout_s = timeout_s
        self.owner_key = prefix + "drained-by"
        self.reason_key = prefix + "drain-reason"
        self.prior_key = prefix + "prior-labels"
        self.skip_labels = dict(SKIP_LABELS if skip_labels is None else skip_labels)

    def _kubectl(self, *args: str, timeout: float | None = None) -> tuple[int, str, str]:
        return self.run([self.kubectl, *self.global_args, *args], timeout or self.timeout_s)

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

    def admin_state(self, node: dict[str, Any]) -> AdminState:
        notes = self._meta(node, "annotations")
        ours = self.ours(node)
        reason = notes.get(self.reason_key) if ours else notes.get(NVSENTINEL_REASON)
        ready, why = self.ready(node)
        if not ready:
            return AdminState("down", reason or why, ours and self.unschedulable(node))
        if self.unschedulable(node):
            return AdminState("drained", reason, ours)
        return AdminState("available")

    def state(self, host: str) -> AdminState:
        node = self.node(host)
        if isinstance(node, str):
            return AdminState("unknown", node)
        return self.admin_state(node)

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
        changed = False
        if not (self.unschedulable(node) and ours):
            error = self._take(host, node, reason)
            if error:
                return HostResult.failed(host, error)
            changed = True
        if wait_s <= 0:
            return HostResult(host, None, changed=changed)
        secs = max(1, math.ceil(wait_s))
        rc, out, err = self._kubectl("drain", host, "--ignore-daemonsets",
                                     "--delete-emptydir-data", f"--timeout={secs}s",
                                     timeout=secs + 30)
        if rc != 0:
            return HostResult(host, None, ok=False, changed=changed,
                              error=f"kubectl drain failed (exit {rc}): {tail(err or out)}")
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
            who = notes.get("k8saas.nvidia.com/cordon-by") or "someone else"
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
