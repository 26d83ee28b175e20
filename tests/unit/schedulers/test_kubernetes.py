"""The Kubernetes adapter against the fake kubectl and a `kubectl get node -o json` sample."""

from __future__ import annotations

import json
from typing import Any

from fleet.domain.ports import AdminState
from fleet.schedulers.kubernetes import GPU_OPERATOR_SKIP, NVSENTINEL_MANAGED, KubernetesScheduler

from .conftest import FakeCluster, k8s_node


def _k8s(cluster: FakeCluster, nodes: dict[str, dict[str, Any]],
         pods: dict[str, list[dict[str, Any]]] | None = None) -> KubernetesScheduler:
    st = cluster.read()
    st["k8s"]["nodes"] = nodes
    st["k8s"]["pods"] = pods or {}
    cluster.write(st)
    return KubernetesScheduler(cluster.runner, context="gpu-prod")


def test_state_of_the_sample(node_json: dict[str, Any]) -> None:
    s = KubernetesScheduler(lambda argv, t: (0, json.dumps(node_json), ""))
    assert s.state("gpu-h100-017") == AdminState("available")


def test_cordon_drain_label_and_restore(cluster: FakeCluster, node_json: dict[str, Any]) -> None:
    pods = {"gpu-h100-017": [
        {"name": "nvidia-dcgm-exporter-x", "namespace": "gpu-operator", "daemonset": True},
        {"name": "trainer-0", "namespace": "ml", "emptydir": True},
    ]}
    s = _k8s(cluster, {"gpu-h100-017": k8s_node(node_json, "gpu-h100-017")}, pods)
    r = s.drain("gpu-h100-017", "upgrade to r580-cuda13.0", wait_s=120)
    assert r.ok and r.changed, r.error
    node = cluster.k8s_node("gpu-h100-017")
    assert node["spec"]["unschedulable"] is True
    labels, notes = node["metadata"]["labels"], node["metadata"]["annotations"]
    assert labels[GPU_OPERATOR_SKIP] == "true"
    assert labels[NVSENTINEL_MANAGED] == "false"
    assert notes["fleet.local/drained-by"] == "fleet"
    assert notes["fleet.local/drain-reason"] == "fleet: upgrade to r580-cuda13.0"
    assert json.loads(notes["fleet.local/prior-labels"]) == {
        GPU_OPERATOR_SKIP: None, NVSENTINEL_MANAGED: None}
    drains = [a for a in cluster.log() if a[1:4] == ["--context", "gpu-prod", "drain"]]
    assert drains == [["kubectl", "--context", "gpu-prod", "drain", "gpu-h100-017",
                       "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=120s"]]
    # ownership annotation precedes the cordon in the log
    verbs = [a[3] for a in cluster.log() if a[0] == "kubectl" and a[3] != "get"]
    assert verbs.index("annotate") < verbs.index("cordon")
    st = s.state("gpu-h100-017")
    assert (st.state, st.by_fleet, st.reason) == ("drained", True,
                                                  "fleet: upgrade to r580-cuda13.0")
    u = s.undrain("gpu-h100-017")
    assert u.ok and u.changed, u.error
    node = cluster.k8s_node("gpu-h100-017")
    assert "unschedulable" not in node["spec"]
    assert GPU_OPERATOR_SKIP not in node["metadata"]["labels"]
    assert NVSENTINEL_MANAGED not in node["metadata"]["labels"]
    assert not [k for k in node["metadata"]["annotations"] if k.startswith("fleet.local/")]
    assert s.state("gpu-h100-017") == AdminState("available")


def test_prior_opt_out_labels_survive(cluster: FakeCluster, node_json: dict[str, Any]) -> None:
    node = k8s_node(node_json, "gpu1", labels={NVSENTINEL_MANAGED: "false"})
    s = _k8s(cluster, {"gpu1": node})
    assert s.drain("gpu1", "wave 1").ok
    assert s.undrain("gpu1").ok
    labels = cluster.k8s_node("gpu1")["metadata"]["labels"]
    assert labels[NVSENTINEL_MANAGED] == "false"  # the operator's opt-out stays
    assert GPU_OPERATOR_SKIP not in labels


def test_never_uncordon_a_node_cordoned_by_someone_else(
        cluster: FakeCluster, node_json: dict[str, Any]) -> None:
    node = k8s_node(node_json, "gpu2", unschedulable=True, annotations={
        "k8saas.nvidia.com/cordon-by": "NVSentinel",
        "k8saas.nvidia.com/cordon-reason": "GpuXidError"})
    s = _k8s(cluster, {"gpu2": node})
    st = s.state("gpu2")
    assert (st.state, st.by_fleet, st.reason) == ("drained", False, "GpuXidError")
    d = s.drain("gpu2", "wave 1", wait_s=30)
    assert d.ok and not d.changed
    u = s.undrain("gpu2")
    assert not u.ok and "NVSentinel" in (u.error or "")
    after = cluster.k8s_node("gpu2")
    assert after["spec"]["unschedulable"] is True
    assert GPU_OPERATOR_SKIP not in after["metadata"]["labels"]
    assert not [a for a in cluster.log() if a[3] in ("cordon", "uncordon", "label", "drain")]


def test_drain_blocked_by_a_disruption_budget(
        cluster: FakeCluster, node_json: dict[str, Any]) -> None:
    pods = {"gpu3": [{"name": "inference-0", "namespace": "serve", "pdb_blocked": True}]}
    s = _k8s(cluster, {"gpu3": k8s_node(node_json, "gpu3")}, pods)
    r = s.drain("gpu3", "wave 1", wait_s=30)
    assert not r.ok and r.changed
    assert "global timeout reached: 30s" in (r.error or "")
    st = s.state("gpu3")
    assert (st.state, st.by_fleet) == ("drained", True)  # ours: the engine may undrain it
    assert s.undrain("gpu3").ok


def test_wait_zero_cordons_without_evicting(
        cluster: FakeCluster, node_json: dict[str, Any]) -> None:
    s = _k8s(cluster, {"gpu4": k8s_node(node_json, "gpu4")})
    assert s.drain("gpu4", "wave 1").ok
    assert not [a for a in cluster.log() if "drain" in a]


def test_crash_between_annotate_and_cordon_keeps_the_first_record(
        cluster: FakeCluster, node_json: dict[str, Any]) -> None:
    # a previous run annotated and labelled, then died before the cordon
    node = k8s_node(node_json, "gpu5", labels={GPU_OPERATOR_SKIP: "true",
                                                NVSENTINEL_MANAGED: "false"},
                    annotations={"fleet.local/drained-by": "fleet",
                                 "fleet.local/prior-labels": json.dumps(
                                     {GPU_OPERATOR_SKIP: None, NVSENTINEL_MANAGED: None})})
    s = _k8s(cluster, {"gpu5": node})
    assert s.state("gpu5") == AdminState("available")
    assert s.drain("gpu5", "wave 1").ok
    assert s.undrain("gpu5").ok
    labels = cluster.k8s_node("gpu5")["metadata"]["labels"]
    assert GPU_OPERATOR_SKIP not in labels and NVSENTINEL_MANAGED not in labels


def test_not_ready_node_is_down(cluster: FakeCluster, node_json: dict[str, Any]) -> None:
    s = _k8s(cluster, {"gpu6": k8s_node(node_json, "gpu6", ready=False)})
    st = s.state("gpu6")
    assert (st.state, st.reason) == ("down", "NodeStatusUnknown")
    r = s.drain("gpu6", "wave 1")
    assert not r.ok and "NotReady" in (r.error or "")


def test_unknown_node(cluster: FakeCluster) -> None:
    s = _k8s(cluster, {})
    st = s.state("ghost")
    assert st.state == "unknown"
    assert st.reason == 'Error from server (NotFound): nodes "ghost" not found'
