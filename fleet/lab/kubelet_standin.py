"""The lab's stand-in for the kubelet: a thread of the lab daemon, one loop for every node.

No kubelet runs in the lab (no container runtime), so nothing would ever end an evicted pod or say
whether a node is alive. The stand-in does the two things a drain depends on:

- a pod on a lab node that is Terminating (its deletionTimestamp set, by an eviction or a delete)
  is deleted for good at once (grace 0, with a uid precondition so a new pod of the same name is
  never touched): the real kubelet would stop its containers within the grace period and do the
  same (trap 2 of shared/spikes/kubernetes/README.md);
- each lab host's Node has a Ready condition True while the host is up (its PID 1 runs and sshd
  answers) and False (reason `KubeletNotReady`, "lab host rebooting") while it is down or
  rebooting, written when it changes and every HEARTBEAT_S otherwise.

The loop is pure over its seams (`api`, `host_up`, `clock`), so unit tests drive it with fakes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from fleet.lab.kube_api import STRATEGIC, KubeApi, KubeApiError

POLL_S = 0.25
HEARTBEAT_S = 20.0


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ready_condition(up: bool, now: str) -> dict[str, str]:
    """The Node's Ready condition as a kubelet reports it."""
    if up:
        return {"type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "lab host up (fleet lab kubelet stand-in)",
                "lastHeartbeatTime": now, "lastTransitionTime": now}
    return {"type": "Ready", "status": "False", "reason": "KubeletNotReady",
            "message": "lab host down or rebooting (fleet lab kubelet stand-in)",
            "lastHeartbeatTime": now, "lastTransitionTime": now}


def node_object(name: str, up: bool) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                              "kubernetes.io/os": "linux",
                                              "fleet.local/lab-node": "true"}},
        "status": {"conditions": [ready_condition(up, _stamp())]},
    }  # fmt: skip


def terminating(pods: Sequence[dict[str, Any]], nodes: set[str]) -> list[tuple[str, str, str]]:
    """(namespace, name, uid) of the pods on `nodes` whose deletion has begun."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if not meta.get("deletionTimestamp"):
            continue
        if (pod.get("spec") or {}).get("nodeName") not in nodes:
            continue
        out.append((str(meta.get("namespace") or "default"), str(meta.get("name")),
                    str(meta.get("uid") or "")))
    return out


class KubeletStandin:
    """One loop: Nodes exist and say whether their lab host is up; Terminating pods end."""

    def __init__(self, api: KubeApi, nodes: Sequence[str], host_up: Callable[[str], bool],
                 clock: Callable[[], float] = time.monotonic,
                 log: Callable[[str], None] = lambda m: None) -> None:
        self.api = api
        self.nodes = list(nodes)
        self.host_up = host_up
        self.clock = clock
        self.log = log
        self.reported: dict[str, tuple[bool, float]] = {}  # node -> (ready, when written)

    def create_nodes(self) -> None:
        """Every lab Node, created once (an existing one is kept: a restarted daemon)."""
        for name in self.nodes:
            try:
                self.api.post("/api/v1/nodes", node_object(name, False))
            except KubeApiError as exc:
                if exc.status != 409:
                    raise

    def end_terminating(self) -> int:
        pods = (self.api.get("/api/v1/pods") or {}).get("items") or []
        ended = 0
        for ns, name, uid in terminating(pods, set(self.nodes)):
            body: dict[str, Any] = {"gracePeriodSeconds": 0}
            if uid:
                body["preconditions"] = {"uid": uid}
            try:
                self.api.delete(f"/api/v1/namespaces/{ns}/pods/{name}", body)
                ended += 1
                self.log(f"pod {ns}/{name} ended (was Terminating)")
            except KubeApiError as exc:
                if exc.status not in (404, 409):
                    raise
        return ended

    def report_nodes(self) -> None:
        now = self.clock()
        for name in self.nodes:
            up = self.host_up(name)
            last = self.reported.get(name)
            if last is not None and last[0] == up and now - last[1] < HEARTBEAT_S:
                continue
            patch = {"status": {"conditions": [ready_condition(up, _stamp())]}}
            self.api.patch(f"/api/v1/nodes/{name}/status", patch, STRATEGIC)
            if last is None or last[0] != up:
                self.log(f"node {name} {'Ready' if up else 'NotReady'}")
            self.reported[name] = (up, now)

    def step(self) -> None:
        self.end_terminating()
        self.report_nodes()

    def run(self, stopping: threading.Event) -> None:
        """Until `stopping`: a failed round (the API server busy or restarting) is logged and
        the next round tries again."""
        while not stopping.is_set():
            try:
                self.step()
            except KubeApiError as exc:
                self.log(f"stand-in round failed: {exc}")
                self.reported.clear()  # write every node again once the server answers
            stopping.wait(POLL_S)
