"""The Kubernetes adapter beside others on the cluster: the PodDisruptionBudget that held a drain
is named (the API server's 429 names none), and a node the GPU Operator is upgrading is left
alone (issue 25). Fakes: tests/data/schedulers/bin/kubectl."""

from __future__ import annotations

from typing import Any

from fleet.schedulers.kube_pods import budgets_for
from fleet.schedulers.kubernetes import GPU_OPERATOR_STATE

from .conftest import FakeCluster, k8s_node
from .test_kubernetes import EVICTABLE, _k8s, _kubectl_calls, _pods, _verb

BLOCKED = "kube-system/coredns-569467d7c-6q4mq"  # labels k8s-app=kube-dns


def pdb(name: str, ns: str, selector: dict[str, Any] | None, version: str = "policy/v1beta1",
        **spec: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "apiVersion": version, "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": ns},
        "spec": {**spec, **({"selector": selector} if selector is not None else {})},
        "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "expectedPods": 1}}
    return out


def test_budgets_are_matched_by_namespace_and_selector() -> None:
    pod = {"metadata": {"namespace": "shop", "labels": {"app": "db", "tier": "data"}}}
    pdbs = [
        pdb("db", "shop", {"matchLabels": {"app": "db"}}, minAvailable=1),
        pdb("other-ns", "bank", {"matchLabels": {"app": "db"}}, minAvailable=1),
        pdb("web", "shop", {"matchLabels": {"app": "web"}}, minAvailable=1),
        pdb("expr", "shop", {"matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["data"]},
            {"key": "canary", "operator": "DoesNotExist"}]}, maxUnavailable=0),
        pdb("empty-v1beta1", "shop", {}, minAvailable=1),  # selects nothing in v1beta1
        pdb("empty-v1", "shop", {}, "policy/v1", minAvailable=1),  # everything in v1
        pdb("none", "shop", None, minAvailable=1),
    ]
    assert budgets_for(pdbs, pod) == [
        "shop/db (minAvailable 1, 0 disruptions allowed, 1 of 1 healthy)",
        "shop/empty-v1 (minAvailable 1, 0 disruptions allowed, 1 of 1 healthy)",
        "shop/expr (maxUnavailable 0, 0 disruptions allowed, 1 of 1 healthy)",
    ]


def test_a_drain_a_budget_blocks_names_the_budget(cluster: FakeCluster,
                                                  node_json: dict[str, Any]) -> None:
    s = _k8s(cluster, {"minikube": k8s_node(node_json, "minikube")}, _pods(EVICTABLE),
             pdb_blocked=[BLOCKED])
    st = cluster.read()
    st["k8s"]["pdbs"] = [pdb("dns", "kube-system", {"matchLabels": {"k8s-app": "kube-dns"}},
                             minAvailable=1),
                         pdb("dash", "kube-system", {"matchLabels": {"app": "dashboard"}},
                             minAvailable=1)]
    cluster.write(st)
    r = s.drain("minikube", "wave 1", wait_s=30)
    assert not r.ok
    assert ("held by budget(s) kube-system/dns (minAvailable 1, 0 disruptions allowed, "
            "1 of 1 healthy)") in (r.error or ""), r.error
    assert "dash" not in (r.error or "")


def test_a_node_the_gpu_operator_is_upgrading_is_left_alone(cluster: FakeCluster,
                                                            node_json: dict[str, Any]) -> None:
    nodes = {"n1": k8s_node(node_json, "n1", labels={GPU_OPERATOR_STATE: "upgrade-required"}),
             "n2": k8s_node(node_json, "n2", labels={GPU_OPERATOR_STATE: "upgrade-done"})}
    s = _k8s(cluster, nodes)
    st = s.state("n1")
    assert (st.state, st.by_fleet, st.owner) == ("draining", False, "gpu-operator")
    assert f"{GPU_OPERATOR_STATE}=upgrade-required" in (st.reason or "")
    before = len(_kubectl_calls(cluster))
    r = s.drain("n1", "wave 1", wait_s=30)
    assert r.ok and not r.changed  # not taken: no annotate, label, cordon or drain
    assert {_verb(a) for a in _kubectl_calls(cluster)[before:]} == {"get"}
    assert s.idle("n1").value is False
    assert s.state("n2").state == "available"  # done: an ordinary node again
    assert s.drain("n2", "wave 1").changed


def driver_pod(node: str, owner: str = "nvidia-driver-daemonset") -> dict[str, Any]:
    """A pod of the GPU Operator's driver DaemonSet, bound to `node` (kube-proxy's capture with
    the operator's names)."""
    (p,) = _pods(["kube-system/kube-proxy-6p8h4"])
    p["metadata"].update(name=f"{owner}-x7k2p", namespace="gpu-operator")
    p["metadata"]["ownerReferences"][0]["name"] = owner
    p["spec"]["nodeName"] = node
    return p


def test_the_node_says_whether_the_gpu_operator_runs_the_driver(
        cluster: FakeCluster, node_json: dict[str, Any]) -> None:
    label = "nvidia.com/gpu.deploy.driver"
    nodes = {"ctr": k8s_node(node_json, "ctr", labels={label: "true"}),
             "pre": k8s_node(node_json, "pre", labels={label: "pre-installed"}),
             "soon": k8s_node(node_json, "soon", labels={label: "true"}),
             "none": k8s_node(node_json, "none")}
    del nodes["none"]["metadata"]["labels"][label]  # the capture's GPU Operator labelled it
    s = _k8s(cluster, nodes, [driver_pod("ctr"), driver_pod("soon", "nvidia-device-plugin")])
    ctr = s.driver_owner("ctr")
    assert ctr is not None and ctr.operator
    assert "gpu-operator/nvidia-driver-daemonset-x7k2p" in ctr.why
    pre = s.driver_owner("pre")
    assert pre is not None and pre.kind == "host"
    assert s.driver_owner("soon") is None  # labelled, no driver pod there (yet): the host's side
    assert s.driver_owner("none") is None  # no GPU Operator on this node
    gone = s.driver_owner("missing")
    assert gone is not None and gone.kind == "unknown"
    # only a node labelled `true` costs a pod listing
    calls = [a for a in _kubectl_calls(cluster) if "pods" in a]
    assert len(calls) == 2, calls
