"""Kubernetes: fleet owns a node only while its own cordon holds; idle means no workload pod.

Through the fake kubectl (tests/data/schedulers/bin) behind the real runner: an operator's
`kubectl uncordon` and a later cordon by NVSentinel are the same commands a person would type.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

from fleet.domain.ports import AdminState
from fleet.schedulers.kubernetes import GPU_OPERATOR_SKIP, NVSENTINEL_MANAGED, KubernetesScheduler

from .conftest import BIN, FakeCluster, k8s_node
from .test_kubernetes import DAEMONSET, EVICTABLE, MIRROR, _k8s, _kubectl_calls, _pods, _verb

FLEET_NOTES = ("fleet.local/drained-by", "fleet.local/drain-reason", "fleet.local/prior-labels")


def by_hand(cluster: FakeCluster, *args: str) -> None:
    """A person (or NVSentinel) running kubectl against the same fake cluster."""
    subprocess.run(["kubectl", *args], check=True, capture_output=True,
                   env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                        "FLEET_FAKE_STATE": str(cluster.path)})


def fleet_marks(cluster: FakeCluster, name: str) -> dict[str, str]:
    meta = cluster.k8s_node(name)["metadata"]
    return {k: v for k, v in {**meta["annotations"], **meta["labels"]}.items()
            if k in FLEET_NOTES or k in (GPU_OPERATOR_SKIP, NVSENTINEL_MANAGED)}


def test_manual_uncordon_ends_fleets_ownership(cluster: FakeCluster,
                                               node_json: dict[str, Any]) -> None:
    s = _k8s(cluster, {"gpu1": k8s_node(node_json, "gpu1")})
    assert s.drain("gpu1", "rollout 7 wave 1").ok
    assert fleet_marks(cluster, "gpu1")  # annotations and opt-out labels set
    by_hand(cluster, "uncordon", "gpu1")  # an operator puts it back by hand

    assert s.state("gpu1") == AdminState("available")
    assert fleet_marks(cluster, "gpu1") == {}  # seen back in service: fleet's marks are gone

    by_hand(cluster, "cordon", "gpu1")  # weeks later NVSentinel cordons it for an Xid
    by_hand(cluster, "annotate", "node", "gpu1", "--overwrite",
            "k8saas.nvidia.com/cordon-by=NVSentinel",
            "k8saas.nvidia.com/cordon-reason=GpuXidError-79")
    st = s.state("gpu1")
    assert (st.state, st.by_fleet, st.reason, st.owner) == (
        "drained", False, "GpuXidError-79", "NVSentinel")
    u = s.undrain("gpu1")
    assert not u.ok and "NVSentinel" in (u.error or "")
    assert cluster.k8s_node("gpu1")["spec"]["unschedulable"] is True  # their cordon holds


def test_uncordoned_node_with_fleets_marks_is_never_ours(node_json: dict[str, Any]) -> None:
    # the annotation alone, on a schedulable node, does not make a later cordon fleet's
    node = k8s_node(node_json, "gpu2", annotations={"fleet.local/drained-by": "fleet"})
    s = KubernetesScheduler(lambda argv, t: (0, json.dumps(node), ""))
    assert s.marked(node) and not s.ours(node)
    node["spec"]["unschedulable"] = True
    assert s.ours(node)


def test_opt_out_labels_restored_when_seen_back_in_service(
        cluster: FakeCluster, node_json: dict[str, Any]) -> None:
    node = k8s_node(node_json, "gpu3", labels={NVSENTINEL_MANAGED: "false"})  # operator's own
    s = _k8s(cluster, {"gpu3": node})
    assert s.drain("gpu3", "wave 1").ok
    by_hand(cluster, "uncordon", "gpu3")
    assert s.state("gpu3").state == "available"
    labels = cluster.k8s_node("gpu3")["metadata"]["labels"]
    assert labels[NVSENTINEL_MANAGED] == "false"  # as the operator had it
    assert GPU_OPERATOR_SKIP not in labels  # fleet's own opt-out removed
    assert not [k for k in cluster.k8s_node("gpu3")["metadata"]["annotations"]
                if k.startswith("fleet.local/")]


def test_drain_after_a_manual_uncordon_starts_afresh(
        cluster: FakeCluster, node_json: dict[str, Any]) -> None:
    s = _k8s(cluster, {"gpu4": k8s_node(node_json, "gpu4")})
    assert s.drain("gpu4", "wave 1").ok
    by_hand(cluster, "uncordon", "gpu4")
    before = len(_kubectl_calls(cluster))
    # fleet drains again without having looked in between: the old marks go first
    d = s.drain("gpu4", "wave 2")
    assert d.ok and d.changed
    ran = [_verb(a) for a in _kubectl_calls(cluster)[before:] if _verb(a) != "get"]
    assert ran == ["label", "annotate", "annotate", "label", "cordon"]
    st = s.state("gpu4")
    assert (st.state, st.by_fleet, st.reason) == ("drained", True, "fleet: wave 2")
    assert s.undrain("gpu4").ok
    assert fleet_marks(cluster, "gpu4") == {}


def test_undrain_of_a_node_someone_uncordoned_clears_the_marks(
        cluster: FakeCluster, node_json: dict[str, Any]) -> None:
    s = _k8s(cluster, {"gpu5": k8s_node(node_json, "gpu5")})
    assert s.drain("gpu5", "wave 1").ok
    by_hand(cluster, "uncordon", "gpu5")
    before = len(_kubectl_calls(cluster))
    u = s.undrain("gpu5")
    assert u.ok and u.changed
    assert fleet_marks(cluster, "gpu5") == {}
    ran = [_verb(a) for a in _kubectl_calls(cluster)[before:]]
    assert "uncordon" not in ran and "label" in ran and "annotate" in ran


# ---------------------------------------------------------------------------------- idle
def test_idle_only_without_workload_pods(cluster: FakeCluster,
                                         node_json: dict[str, Any]) -> None:
    s = _k8s(cluster, {"quiet": k8s_node(node_json, "quiet"),
                       "busy": k8s_node(node_json, "busy")},
             [{**p, "spec": {**p["spec"], "nodeName": "quiet"}}
              for p in _pods(DAEMONSET + MIRROR)]
             + [{**p, "spec": {**p["spec"], "nodeName": "busy"}} for p in _pods(EVICTABLE)])
    assert s.idle("quiet").value is True  # DaemonSet and mirror pods are no one's job
    busy = s.idle("busy")
    assert busy.ok and busy.value is False


def test_idle_is_never_a_guess(node_json: dict[str, Any]) -> None:
    node = k8s_node(node_json, "gpu7")

    def runner(argv: list[str], timeout: float | None) -> tuple[int, str, str]:
        if "pods" in argv:
            return 1, "", "Unable to connect to the server: net/http: TLS handshake timeout"
        return 0, json.dumps(node), ""

    out = KubernetesScheduler(runner).idle("gpu7")
    assert not out.ok and "TLS handshake" in (out.error or "")
    node["spec"]["unschedulable"] = True
    assert KubernetesScheduler(runner).idle("gpu7").value is False  # cordoned: not in service
