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
