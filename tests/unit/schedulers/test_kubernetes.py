"""The Kubernetes adapter against real `kubectl get node/pods -o json` captures.

Captures (tests/data/schedulers/README.md says where each comes from): a GPU node ("nori", GPU
Operator labels), the kube-system pods of a minikube node (a DaemonSet pod, three mirror pods,
ReplicaSet pods and pods no controller owns) and three pods of another node (one with an emptyDir
volume, one with no controller). They are served either by a runner that answers from the
captures, or by the fake kubectl (tests/data/schedulers/bin) behind the real subprocess runner.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fleet.domain.ports import AdminState
from fleet.errors import BadInput
from fleet.schedulers.kubernetes import (
    GPU_OPERATOR_SKIP,
    NVSENTINEL_MANAGED,
    KubernetesScheduler,
    parse_drain_failure,
    parse_selector,
    pod_kind,
    pods_to_go,
)

from .conftest import DATA, FakeCluster, k8s_node

MINIKUBE_PODS = json.loads((DATA / "kubectl_get_pods_minikube.json").read_text())["items"]
VBOX_PODS = json.loads((DATA / "kubectl_get_pods_virtualbox.json").read_text())["items"]
EVICTABLE = ["kube-system/coredns-569467d7c-4f4sz", "kube-system/coredns-569467d7c-6q4mq",
             "kube-system/kubernetes-dashboard-679fb79dd5-8gbz9"]
UNMANAGED = ["kube-system/etcd-minikube", "kube-system/kube-addon-manager-minikube",
             "kube-system/storage-provisioner"]
MIRROR = ["kube-system/kube-apiserver-minikube", "kube-system/kube-controller-manager-minikube",
          "kube-system/kube-scheduler-minikube"]
DAEMONSET = ["kube-system/kube-proxy-6p8h4"]
PDB_MSG = "Cannot evict pod as it would violate the pod's disruption budget."


def _name(pod: dict[str, Any]) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def _pods(names: list[str], source: list[dict[str, Any]] = MINIKUBE_PODS
          ) -> list[dict[str, Any]]:
    return [copy.deepcopy(p) for p in source if _name(p) in names]


def _pod_list(items: list[dict[str, Any]]) -> str:
    return json.dumps({"apiVersion": "v1", "items": items, "kind": "List",
                       "metadata": {"resourceVersion": ""}}, indent=4)


class Captures:
    """A runner answering `get node` and `get pods` from captures; records every argv."""

    def __init__(self, node: dict[str, Any], pods: list[dict[str, Any]] | None = None,
                 drain: tuple[int, str, str] = (0, "", "")) -> None:
        self.node, self.pods, self.drain = node, pods or [], drain
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], timeout: float | None) -> tuple[int, str, str]:
        self.calls.append(argv)
        rest = argv[1:]
        while rest[:1] in (["--context"], ["--kubeconfig"]):
            rest = rest[2:]
        verbs = [a for a in rest if not a.startswith("-")]
        if verbs[:2] == ["get", "node"]:
            return 0, json.dumps(self.node, indent=4), ""
        if verbs[:2] == ["get", "pods"]:
            return 0, _pod_list(self.pods), ""
        if verbs[:1] == ["drain"]:
            return self.drain
        return 0, "", ""


def cordoned(sample: dict[str, Any], name: str, ours: bool = True) -> dict[str, Any]:
    notes = ({"fleet.local/drained-by": "fleet", "fleet.local/drain-reason": "fleet: wave 1"}
             if ours else {"k8saas.nvidia.com/cordon-by": "NVSentinel",
                           "k8saas.nvidia.com/cordon-reason": "GpuXidError"})
    return k8s_node(sample, name, unschedulable=True, annotations=notes)


def _k8s(cluster: FakeCluster, nodes: dict[str, dict[str, Any]],
         pods: list[dict[str, Any]] | None = None, **opts: Any) -> KubernetesScheduler:
    st = cluster.read()
    st["k8s"]["nodes"] = nodes
    st["k8s"]["pods"] = pods or []
    for key in ("pdb_blocked", "stuck"):
        if key in opts:
            st["k8s"][key] = opts.pop(key)
    cluster.write(st)
    opts.setdefault("context", "gpu-prod")
    return KubernetesScheduler(cluster.runner, **opts)


def _kubectl_calls(cluster: FakeCluster) -> list[list[str]]:
    return [a for a in cluster.log() if a[0] == "kubectl"]


def _verb(argv: list[str]) -> str:
    rest = argv[1:]
    while rest and rest[0] in ("--context", "--kubeconfig"):
        rest = rest[2:]
    return rest[0]


# ----------------------------------------------------------------------------- the capture
def test_state_of_the_real_gpu_node(node_json: dict[str, Any]) -> None:
    cap = Captures(node_json)
    s = KubernetesScheduler(cap)
    assert s.state("nori") == AdminState("available")
    assert s.ready(node_json) == (True, "KubeletReady")
    assert node_json["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A16-4Q"
    assert len(cap.calls) == 1  # an uncordoned node needs no pod list


def test_real_pods_classified_like_kubectl() -> None:
    kinds = {_name(p): pod_kind(p) for p in MINIKUBE_PODS}
    assert [n for n, k in kinds.items() if k == "daemonset"] == DAEMONSET
    assert sorted(n for n, k in kinds.items() if k == "mirror") == MIRROR
    assert sorted(n for n, k in kinds.items() if k == "evictable") == EVICTABLE
    assert sorted(n for n, k in kinds.items() if k == "unmanaged") == UNMANAGED
    assert pods_to_go(MINIKUBE_PODS) == sorted(EVICTABLE + UNMANAGED)
    vbox = {_name(p): pod_kind(p) for p in VBOX_PODS}
    assert vbox == {"default/nginx-deployment-dd485bc9-bfgnh": "local-storage",
                    "default/nginx-external-666b749977-qmkbp": "evictable",
                    "default/privileged": "unmanaged"}


# ------------------------------------------------------------- drained only when pods are gone
def test_cordoned_node_with_pods_left_is_draining(node_json: dict[str, Any]) -> None:
    cap = Captures(cordoned(node_json, "minikube"), MINIKUBE_PODS)
    s = KubernetesScheduler(cap)
    st = s.state("minikube")
    assert (st.state, st.by_fleet, st.reason) == ("draining", True, "fleet: wave 1")
    assert st.jobs == tuple(sorted(EVICTABLE + UNMANAGED))
    assert s.jobs("minikube") == sorted(EVICTABLE + UNMANAGED)
    assert cap.calls[1][1:] == ["get", "pods", "--all-namespaces", "--field-selector",
                                "spec.nodeName=minikube", "-o", "json"]


def test_daemonset_and_mirror_pods_do_not_keep_a_node_draining(
        node_json: dict[str, Any]) -> None:
    cap = Captures(cordoned(node_json, "minikube"), _pods(DAEMONSET + MIRROR))
    st = KubernetesScheduler(cap).state("minikube")
    assert (st.state, st.by_fleet, st.jobs) == ("drained", True, ())


def test_finished_pods_do_not_count(node_json: dict[str, Any]) -> None:
    pods = _pods(EVICTABLE + UNMANAGED)
    for p, phase in zip(pods, ["Succeeded", "Failed"] * 3, strict=True):
        p["status"]["phase"] = phase  # the capture's pods, run to completion
    st = KubernetesScheduler(Captures(cordoned(node_json, "minikube"), pods)).state("minikube")
    assert (st.state, st.jobs) == ("drained", ())


def test_someone_elses_cordon_reads_drained_or_draining_by_them(
        node_json: dict[str, Any]) -> None:
    node = cordoned(node_json, "minikube", ours=False)
    st = KubernetesScheduler(Captures(node, MINIKUBE_PODS)).state("minikube")
    assert (st.state, st.by_fleet, st.reason, st.owner) == (
        "draining", False, "GpuXidError", "NVSentinel")
    st = KubernetesScheduler(Captures(node, _pods(DAEMONSET))).state("minikube")
    assert (st.state, st.by_fleet) == ("drained", False)


def test_pod_list_failure_never_reads_drained(node_json: dict[str, Any]) -> None:
    node = cordoned(node_json, "minikube")

    def runner(argv: list[str], timeout: float | None) -> tuple[int, str, str]:
        if "pods" in argv:
            return 1, "", 'Error from server (Forbidden): pods is forbidden: User "x" cannot ' \
                          'list resource "pods" in API group "" at the cluster scope'
        return 0, json.dumps(node), ""

    s = KubernetesScheduler(runner)
    st = s.state("minikube")
    assert (st.state, st.by_fleet) == ("unknown", True) and "forbidden" in (st.reason or "")
    jobs = s.jobs("minikube")
    assert isinstance(jobs, str) and "forbidden" in jobs
    r = s.drain("minikube", "wave 1", wait_s=30)
    assert not r.ok and "forbidden" in (r.error or "")


# ---------------------------------------------------------------------------- pod selector
@pytest.mark.parametrize(("selector", "expected"), [
    ("k8s-app=kube-dns", ["kube-system/coredns-569467d7c-6q4mq"]),  # the other has no labels
    ("component in (etcd,kube-addon-manager)",
     ["kube-system/etcd-minikube", "kube-system/kube-addon-manager-minikube"]),
    ("addonmanager.kubernetes.io/mode=Reconcile,app notin (kubernetes-dashboard)",
     ["kube-system/storage-provisioner"]),
    ("!component,!k8s-app", ["kube-system/coredns-569467d7c-4f4sz",
                             "kube-system/kubernetes-dashboard-679fb79dd5-8gbz9",
                             "kube-system/storage-provisioner"]),
    ("tier=control-plane", ["kube-system/etcd-minikube"]),  # the others are mirror pods
])
def test_pod_selector_limits_what_must_go(node_json: dict[str, Any], selector: str,
                                          expected: list[str]) -> None:
    s = KubernetesScheduler(Captures(cordoned(node_json, "minikube"), MINIKUBE_PODS),
                            pod_selector=selector)
    assert s.jobs("minikube") == expected
    assert s.state("minikube").jobs == tuple(expected)


def test_pod_selector_reaches_kubectl_drain_canonical(node_json: dict[str, Any]) -> None:
    cap = Captures(cordoned(node_json, "minikube"), MINIKUBE_PODS)
    s = KubernetesScheduler(cap, pod_selector=" k8s-app in ( kube-dns , x ),!skip ",
                            grace_period_s=120, timeout_s=45)
    assert s.drain("minikube", "wave 1", wait_s=s.drain_kick_s).ok
    drain = next(a for a in cap.calls if "drain" in a)
    assert drain == ["kubectl", "drain", "minikube", "--ignore-daemonsets",
                     "--pod-selector=k8s-app in (kube-dns,x),!skip", "--grace-period=120",
                     "--timeout=45s"]


# ----------------------------------------------------------------------- draining for real
def test_cordon_evict_label_and_restore(cluster: FakeCluster, node_json: dict[str, Any]) -> None:
    pods = _pods(EVICTABLE + DAEMONSET + MIRROR)
    s = _k8s(cluster, {"minikube": k8s_node(node_json, "minikube")}, pods)
    r = s.drain("minikube", "upgrade to r580-cuda13.0", wait_s=120)
    assert r.ok and r.changed, r.error
    node = cluster.k8s_node("minikube")
    assert node["spec"]["unschedulable"] is True
    labels, notes = node["metadata"]["labels"], node["metadata"]["annotations"]
    assert labels[GPU_OPERATOR_SKIP] == "true"
    assert labels[NVSENTINEL_MANAGED] == "false"
    assert notes["fleet.local/drained-by"] == "fleet"
    assert notes["fleet.local/drain-reason"] == "fleet: upgrade to r580-cuda13.0"
    assert json.loads(notes["fleet.local/prior-labels"]) == {
        GPU_OPERATOR_SKIP: None, NVSENTINEL_MANAGED: None}
    drains = [a for a in _kubectl_calls(cluster) if _verb(a) == "drain"]
    assert drains == [["kubectl", "--context", "gpu-prod", "drain", "minikube",
                       "--ignore-daemonsets", "--timeout=120s"]]
    verbs = [_verb(a) for a in _kubectl_calls(cluster) if _verb(a) != "get"]
    assert verbs.index("annotate") < verbs.index("cordon") < verbs.index("drain")
    left = sorted(_name(p) for p in cluster.read()["k8s"]["pods"])
    assert left == sorted(DAEMONSET + MIRROR)  # what kubectl leaves
    st = s.state("minikube")
    assert (st.state, st.by_fleet, st.reason, st.jobs) == (
        "drained", True, "fleet: upgrade to r580-cuda13.0", ())
    u = s.undrain("minikube")
    assert u.ok and u.changed, u.error
    node = cluster.k8s_node("minikube")
    assert "unschedulable" not in node["spec"]
    assert GPU_OPERATOR_SKIP not in node["metadata"]["labels"]
    assert NVSENTINEL_MANAGED not in node["metadata"]["labels"]
    assert not [k for k in node["metadata"]["annotations"] if k.startswith("fleet.local/")]
    assert s.state("minikube") == AdminState("available")


def test_repeated_drains_are_cheap_once_empty(cluster: FakeCluster,
                                              node_json: dict[str, Any]) -> None:
    s = _k8s(cluster, {"minikube": k8s_node(node_json, "minikube")}, _pods(EVICTABLE + DAEMONSET))
    assert s.drain("minikube", "wave 1", wait_s=30).ok
    before = len(_kubectl_calls(cluster))
    for _ in range(3):  # the engine, once per poll
        r = s.drain("minikube", "wave 1", wait_s=30)
        assert r.ok and not r.changed
    again = _kubectl_calls(cluster)[before:]
    assert [(_verb(a), a[4]) for a in again] == [("get", "node"), ("get", "pods")] * 3


def test_drain_blocked_by_a_disruption_budget(cluster: FakeCluster,
                                              node_json: dict[str, Any]) -> None:
    blocked = "kube-system/coredns-569467d7c-4f4sz"
    s = _k8s(cluster, {"minikube": k8s_node(node_json, "minikube")},
             _pods(EVICTABLE + DAEMONSET + MIRROR), pdb_blocked=[blocked])
    r = s.drain("minikube", "wave 1", wait_s=30)
    assert not r.ok and r.changed
    err = r.error or ""
    assert err.startswith("kubectl drain minikube failed (exit 1): ")
    assert f"a PodDisruptionBudget blocks eviction of {blocked} ({PDB_MSG})" in err
    assert "coredns-569467d7c-6q4mq" not in err  # evicted
    st = s.state("minikube")
    assert (st.state, st.by_fleet, st.jobs) == ("draining", True, (blocked,))
    assert s.undrain("minikube").ok  # ours: the engine may give the node back


def test_pods_kubectl_refuses_block_the_drain(cluster: FakeCluster,
                                              node_json: dict[str, Any]) -> None:
    node = k8s_node(node_json, "david-virtualbox")
    s = _k8s(cluster, {"david-virtualbox": node}, copy.deepcopy(VBOX_PODS))
    r = s.drain("david-virtualbox", "wave 1", wait_s=30)
    assert not r.ok
    err = r.error or ""
    assert ("kubectl cannot delete Pods with local storage (use --delete-emptydir-data to "
            "override): default/nginx-deployment-dd485bc9-bfgnh (fleet: their emptyDir data "
            "would be lost") in err
    assert ("kubectl cannot delete Pods that declare no controller (use --force to override): "
            "default/privileged (fleet never passes --force") in err
    assert len(cluster.read()["k8s"]["pods"]) == 3  # kubectl evicts nothing then
    assert s.state("david-virtualbox").state == "draining"


def test_delete_emptydir_data_lets_those_pods_go(cluster: FakeCluster,
                                                 node_json: dict[str, Any]) -> None:
    node = k8s_node(node_json, "david-virtualbox")
    s = _k8s(cluster, {"david-virtualbox": node},
             _pods(["default/nginx-deployment-dd485bc9-bfgnh"], VBOX_PODS),
             delete_emptydir_data=True)
    assert s.drain("david-virtualbox", "wave 1", wait_s=30).ok
    drain = next(a for a in _kubectl_calls(cluster) if _verb(a) == "drain")
    assert "--delete-emptydir-data" in drain
    assert s.state("david-virtualbox").state == "drained"


def test_pods_still_terminating_are_named(cluster: FakeCluster,
                                          node_json: dict[str, Any]) -> None:
    stuck = "kube-system/kubernetes-dashboard-679fb79dd5-8gbz9"
    s = _k8s(cluster, {"minikube": k8s_node(node_json, "minikube")}, _pods(EVICTABLE),
             stuck=[stuck])
    r = s.drain("minikube", "wave 1", wait_s=5)
    assert not r.ok
    assert f"evicted but still terminating after the timeout: {stuck}" in (r.error or "")


def test_never_evicts_past_budgets_or_with_force(cluster: FakeCluster,
                                                 node_json: dict[str, Any]) -> None:
    s = _k8s(cluster, {"minikube": k8s_node(node_json, "minikube")}, copy.deepcopy(MINIKUBE_PODS),
             delete_emptydir_data=True, grace_period_s=30, pod_selector="k8s-app")
    s.drain("minikube", "wave 1", wait_s=10)
    for argv in _kubectl_calls(cluster):
        assert not {"--force", "--disable-eviction"} & {a.split("=")[0] for a in argv}
    with pytest.raises(BadInput, match="never passed"):
        KubernetesScheduler(cluster.runner, disable_eviction=True)


def test_context_and_kubeconfig_on_every_call(cluster: FakeCluster,
                                              node_json: dict[str, Any]) -> None:
    s = _k8s(cluster, {"minikube": k8s_node(node_json, "minikube")},
             _pods(EVICTABLE + DAEMONSET), pdb_blocked=[EVICTABLE[0]],
             context="arn:aws:eks:us-west-2:123456789012:cluster/gpu-prod",
             kubeconfig="/etc/fleet/kubeconfig")
    s.state("minikube")
    s.drain("minikube", "wave 1", wait_s=10)
    s.jobs("minikube")
    s.state("minikube")
    s.undrain("minikube")
    calls = _kubectl_calls(cluster)
    assert {_verb(a) for a in calls} == {"get", "annotate", "label", "cordon", "drain",
                                         "uncordon"}
    for argv in calls:
        assert argv[:5] == ["kubectl", "--kubeconfig", "/etc/fleet/kubeconfig", "--context",
                            "arn:aws:eks:us-west-2:123456789012:cluster/gpu-prod"], argv


def test_wait_zero_cordons_without_evicting(cluster: FakeCluster,
                                            node_json: dict[str, Any]) -> None:
    s = _k8s(cluster, {"gpu4": k8s_node(node_json, "gpu4")})
    assert s.drain("gpu4", "wave 1").ok
    assert not [a for a in _kubectl_calls(cluster) if _verb(a) in ("drain",)]
    assert not [a for a in _kubectl_calls(cluster) if "pods" in a]


def test_timeout_is_never_zero_or_unbounded(node_json: dict[str, Any]) -> None:
    cap = Captures(cordoned(node_json, "minikube"), MINIKUBE_PODS)
    s = KubernetesScheduler(cap)
    assert s.drain("minikube", "wave 1", wait_s=0.2).ok
    assert next(a for a in cap.calls if "drain" in a)[-1] == "--timeout=1s"
    r = s.drain("minikube", "wave 1", wait_s=float("inf"))
    assert not r.ok and "finite" in (r.error or "")


# --------------------------------------------------------------------------- ownership
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
    node = cordoned(node_json, "minikube", ours=False)
    s = _k8s(cluster, {"minikube": node}, _pods(EVICTABLE))
    st = s.state("minikube")
    assert (st.state, st.by_fleet, st.reason) == ("draining", False, "GpuXidError")
    d = s.drain("minikube", "wave 1", wait_s=30)
    assert d.ok and not d.changed
    u = s.undrain("minikube")
    assert not u.ok and "NVSentinel" in (u.error or "")
    after = cluster.k8s_node("minikube")
    assert after["spec"]["unschedulable"] is True
    assert GPU_OPERATOR_SKIP not in after["metadata"]["labels"]
    assert not [a for a in _kubectl_calls(cluster)
                if _verb(a) in ("cordon", "uncordon", "label", "annotate", "drain")]
    assert len(cluster.read()["k8s"]["pods"]) == 3  # nothing evicted


def test_plain_cordon_without_annotation_is_not_ours(
        cluster: FakeCluster, node_json: dict[str, Any]) -> None:
    # `kubectl cordon` by an operator: unschedulable, no annotation at all
    s = _k8s(cluster, {"minikube": k8s_node(node_json, "minikube", unschedulable=True)})
    assert not s.undrain("minikube").ok
    assert cluster.k8s_node("minikube")["spec"]["unschedulable"] is True


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


# ---------------------------------------------------------------- refused before any call
@pytest.mark.parametrize(("opts", "field"), [
    ({"pod_selector": "app in (a"}, "pod_selector"),
    ({"pod_selector": "app=a;rm -rf /"}, "pod_selector"),
    ({"pod_selector": "-l=x"}, "pod_selector"),
    ({"pod_selector": "app=a\nb"}, "pod_selector"),
    ({"pod_selector": "Example.com/app=a"}, "pod_selector"),
    ({"grace_period_s": 0}, "grace_period_s"),
    ({"grace_period_s": 1.5}, "grace_period_s"),
    ({"timeout_s": 0}, "timeout_s"),
    ({"timeout_s": float("nan")}, "timeout_s"),
    ({"delete_emptydir_data": "yes"}, "delete_emptydir_data"),
    ({"context": "--kubeconfig=/tmp/x"}, "context"),
    ({"kubeconfig": "--as=admin"}, "kubeconfig"),
    ({"kubeconfig": "/tmp/a\nb"}, "kubeconfig"),
])
def test_bad_settings_refused_before_any_call(opts: dict[str, Any], field: str) -> None:
    calls: list[list[str]] = []

    def runner(argv: list[str], timeout: float | None) -> tuple[int, str, str]:
        calls.append(argv)
        return 0, "{}", ""

    with pytest.raises(BadInput) as info:
        KubernetesScheduler(runner, **opts)
    assert info.value.problems[0].field == f"drain.{field}"
    assert calls == []


def test_bad_node_name_refused_before_any_call() -> None:
    calls: list[list[str]] = []

    def runner(argv: list[str], timeout: float | None) -> tuple[int, str, str]:
        calls.append(argv)
        return 0, "", ""

    s = KubernetesScheduler(runner)
    for name in ("--all", "a b", "-n", ""):
        with pytest.raises(ValueError):
            s.state(name)
    assert calls == []


# ------------------------------------------------------------------- selector grammar
@pytest.mark.parametrize(("text", "canonical"), [
    ("app=a,tier!=b", "app=a,tier!=b"),
    ("tier!=b, app = a", "app=a,tier!=b"),
    ("x in (foo,,baz),y,z notin ()", "x in (,baz,foo),y,z notin ()"),
    ("a==b", "a==b"),
    ("a=", "a="),
    ("!a", "!a"),
    ("in=1,a=notin", "a=notin,in=1"),
    ("gpu>3", "gpu>3"),
    ("example.com/team in(ml)", "example.com/team in (ml)"),
])
def test_selector_canonical(text: str, canonical: str) -> None:
    assert str(parse_selector(text)) == canonical
    assert str(parse_selector(canonical)) == canonical


@pytest.mark.parametrize("text", [
    "a,", ",", "a in (b", "a in (b,,)", "a b", "!a=b", "!!a", "a===b", "a>x", "a>1_0", "a<+5",
    "a/b/c", "/a", "a/", "-a", "a=-b", "a=b-", "_a", "a=" + "x" * 64, "k" * 64, "é=1", "a=(",
])
def test_selector_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_selector(text)


def test_selector_matching_semantics() -> None:
    labels = {"app": "trainer", "gpu": "8"}
    assert parse_selector("app in (trainer,serve)").matches(labels)
    assert parse_selector("team notin (ml)").matches(labels)  # absent label: notin matches
    assert parse_selector("team!=ml").matches(labels)
    assert not parse_selector("team=").matches(labels)  # = needs the label
    assert parse_selector("gpu>4,gpu<9").matches(labels)
    assert not parse_selector("app>4").matches(labels)  # not a number: no match
    assert not parse_selector("app,!gpu").matches(labels)


# ----------------------------------------------------------------- kubectl's own messages
def test_parse_pdb_timeout_as_kubectl_prints_it() -> None:
    # pkg/drain/drain.go and pkg/cmd/drain/drain.go texts, two pods under one budget, one evicted
    err = (
        'error when evicting pods/"inference-0" -n "serve" (will retry after 5s): ' + PDB_MSG
        + '\nerror when evicting pods/"inference-1" -n "serve" (will retry after 5s): '
        + PDB_MSG + "\n"
        'error when evicting pods/"inference-0" -n "serve" (will retry after 5s): ' + PDB_MSG
        + '\nThere are pending pods in node "gpu3" when an error occurred: error when evicting '
        'pods/"inference-0" -n "serve": global timeout reached: 30s\npod/inference-0\n'
        'error: unable to drain node "gpu3" due to error: error when evicting pods/"inference-0" '
        '-n "serve": global timeout reached: 30s, continuing command...\n'
        "There are pending nodes to be drained:\n gpu3\n"
        'error: error when evicting pods/"inference-0" -n "serve": global timeout reached: 30s\n')
    f = parse_drain_failure(err)
    assert f.pdb_blocked == {"serve/inference-0": PDB_MSG}  # inference-1 went in the end
    assert f.timeout == "30s"
    assert f.summary() == (f"a PodDisruptionBudget blocks eviction of serve/inference-0 "
                           f"({PDB_MSG})")


def test_parse_budget_that_let_go_late() -> None:
    # retried for its budget, evicted in the end, still terminating at the timeout: not blocked
    f = parse_drain_failure(
        'error when evicting pods/"web-1" -n "shop" (will retry after 5s): ' + PDB_MSG + "\n"
        'error: unable to drain node "n" due to error: error when waiting for pod "web-1" in '
        'namespace "shop" to terminate: context deadline exceeded, continuing command...\n')
    assert f.pdb_blocked == {} and f.terminating == ["shop/web-1"]
    assert f.summary() == "evicted but still terminating after the timeout: shop/web-1"


def test_parse_kubectl_1_20_messages() -> None:
    # kubernetes-1.20.0: aggregate in brackets, the older wait message and unmanaged text
    err = (
        'error: unable to drain node "n1" due to error:[error when evicting pods/"a" -n "x": '
        'global timeout reached: 1m0s, error when waiting for pod "b" terminating: global '
        "timeout reached: 1m0s], continuing command...\n"
        "error: cannot delete Pods not managed by ReplicationController, ReplicaSet, Job, "
        "DaemonSet or StatefulSet (use --force to override): x/c, x/d\n")
    f = parse_drain_failure(err)
    assert f.timed_out == ["x/a"] and f.terminating == ["?/b"]
    assert f.refused == {"Pods not managed by ReplicationController, ReplicaSet, Job, "
                         "DaemonSet or StatefulSet (use --force to override)": ["x/c", "x/d"]}
    assert "not evicted within 1m0s: x/a" in f.summary()
    assert f.blocking == ["x/a", "?/b", "x/c", "x/d"]


def test_parse_two_budgets_and_other_errors() -> None:
    f = parse_drain_failure(
        'error: unable to drain node "n" due to error: error when evicting pods/"p" -n "ns": '
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does "
        "not support., continuing command...\n")
    assert list(f.pdb_blocked) == ["ns/p"]
    assert parse_drain_failure("drain did not complete within 30s").summary() == (
        "drain did not complete within 30s")


# ------------------------------------------------------------- the real kubectl, when there
KUBECTL = shutil.which("kubectl")


@pytest.fixture
def real_kubectl(tmp_path: Path) -> Callable[[list[str]], subprocess.CompletedProcess[str]]:
    """Runs the real kubectl against a kubeconfig pointing at nothing (127.0.0.1:1)."""
    if KUBECTL is None:
        pytest.skip("kubectl not installed (scripts/test installs kubernetes-client)")
    kc = tmp_path / "kubeconfig"
    kc.write_text(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster: {server: 'https://127.0.0.1:1'}\n"
        "  name: nowhere\ncontexts:\n- context: {cluster: nowhere, user: u}\n  name: gpu-prod\n"
        "current-context: gpu-prod\nusers:\n- name: u\n  user: {token: x}\n")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        argv = [KUBECTL or "kubectl", *argv[1:]]
        argv = [a if a != "KUBECONFIG" else str(kc) for a in argv]
        return subprocess.run([*argv, "--request-timeout=2s"], capture_output=True, text=True,
                              env=env, timeout=60, check=False)

    return run


def test_real_kubectl_parses_every_argv_fleet_builds(
        real_kubectl: Callable[[list[str]], subprocess.CompletedProcess[str]],
        node_json: dict[str, Any]) -> None:
    cap = Captures(cordoned(node_json, "minikube"), MINIKUBE_PODS)
    s = KubernetesScheduler(cap, kubeconfig="KUBECONFIG", context="gpu-prod",
                            pod_selector="k8s-app in (kube-dns),!skip,tier!=system",
                            delete_emptydir_data=True, grace_period_s=300, timeout_s=90)
    s.drain("minikube", "wave 1", wait_s=s.drain_kick_s)
    s.jobs("minikube")
    take = Captures(k8s_node(node_json, "minikube"))
    KubernetesScheduler(take, kubeconfig="KUBECONFIG", context="gpu-prod").drain("minikube", "x")
    give = Captures(cordoned(node_json, "minikube"))
    KubernetesScheduler(give, kubeconfig="KUBECONFIG", context="gpu-prod").undrain("minikube")
    argvs = cap.calls + take.calls + give.calls
    assert {a[5] for a in argvs} == {"get", "drain", "annotate", "label", "cordon", "uncordon"}
    for argv in argvs:
        p = real_kubectl(argv)
        out = p.stdout + p.stderr
        assert p.returncode != 0 and "127.0.0.1:1" in out, (argv, out)  # reached the network
        assert "unknown flag" not in out and "must be a valid label selector" not in out, argv


@pytest.mark.parametrize("text", [
    "app=a,tier!=b", "x in (foo,,baz),y,z notin ()", "a in (,)", "in=1", "a>5", "a<+5",
    "a in (b,,)", "!a=b", "a===b", "a,", "Ex.com/a=b", "a=" + "x" * 64, "a in(b)", "a=b_",
    " a = b ", "a notin (b c)", "x.y/z=1", "a>99999999999999999999",
])
def test_selector_grammar_agrees_with_real_kubectl(
        real_kubectl: Callable[[list[str]], subprocess.CompletedProcess[str]], text: str) -> None:
    p = real_kubectl(["kubectl", "--kubeconfig", "KUBECONFIG", "drain", "nori",
                      f"--pod-selector={text}"])
    kubectl_ok = "must be a valid label selector" not in p.stderr
    try:
        canonical = str(parse_selector(text))
    except ValueError:
        assert not kubectl_ok, f"fleet refuses {text!r}, kubectl accepts it"
        return
    assert kubectl_ok, f"fleet accepts {text!r}, kubectl refuses it"
    p = real_kubectl(["kubectl", "--kubeconfig", "KUBECONFIG", "drain", "nori",
                      f"--pod-selector={canonical}"])
    assert "must be a valid label selector" not in p.stderr
