"""Drains against the lab's real Kubernetes API server (1.20.2: etcd, kube-apiserver, the
disruption controller; a kubelet stand-in ends evicted pods and reports Node readiness).

`fleet apply --scheduler kubernetes` on a node whose pod a PodDisruptionBudget protects: no
eviction, no reboot, the budget named; with the budget gone the same apply drains through the
Eviction API, pins, reboots and uncordons. An admin's cordon, and a node the GPU Operator is
upgrading, are left alone and named.

Pool h100 of the session lab is h2 and h5 (H100). Each test starts from its host pinned to r580,
every pool node schedulable and without fleet's marks, and removes the pods and budgets it made.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.lab import hosts as H
from fleet.lab import kube, lab
from fleet.lab.kube_api import KubeApi, KubeApiError
from tests.integration.fleet_cli import fleet

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[3]
POOL_HOSTS = ("h2", "h5")
R580, R595 = "r580-cuda13.0", "r595-cuda13.2"
NS = "default"
TEST_LABEL = "fleet-test"
UPGRADE_STATE = "nvidia.com/gpu-driver-upgrade-state"


def write_matrix(path: Path, **drain: Any) -> Path:
    """matrices/lab.yaml with pool h100's drain quick (15 s timeout, 1 s polls) and the
    benchmark and live gates off (these tests judge drains; the gate swings under CI load)."""
    doc = yaml.safe_load((ROOT / "matrices" / "lab.yaml").read_text())
    doc["pools"]["h100"]["rollout"]["drain"] = {"poll_seconds": 1, "timeout_minutes": 0.25,
                                                **drain}
    doc["pools"]["h100"]["rollout"]["gates"]["benchmark"] = False
    doc["pools"]["h100"]["rollout"]["gates"]["live"] = {"enabled": False}  # not about traffic
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def kubectl(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    r = subprocess.run(["kubectl", *args], env=env, input=stdin, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, f"kubectl {args}: {r.stderr}{r.stdout}"
    return r.stdout


def boot_id(lab_paths, name: str) -> str:  # noqa: ANN001
    return str(H.boot_info(lab_paths, name).get("boot_id"))


def node(api: KubeApi, name: str) -> dict[str, Any]:
    return dict(api.get(f"/api/v1/nodes/{name}"))


def pod_phase(api: KubeApi, name: str) -> str | None:
    try:
        p = api.get(f"/api/v1/namespaces/{NS}/pods/{name}")
    except KubeApiError as exc:
        if exc.status == 404:
            return None
        raise
    return "Terminating" if p["metadata"].get("deletionTimestamp") else p["status"].get("phase")


def until(what: str, check: Any, timeout: float = 60) -> Any:
    """Poll `check()` until truthy (generous deadline: a loaded CI machine)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


PDB = """apiVersion: policy/v1beta1
kind: PodDisruptionBudget
metadata: {{name: {name}, namespace: default, labels: {{fleet-test: kube}}}}
spec: {{minAvailable: 1, selector: {{matchLabels: {{app: {app}}}}}}}
"""


def budget(env: dict[str, str], api: KubeApi, name: str, app: str) -> None:
    """A v1beta1 budget allowing no disruption of the one `app` pod, once the disruption
    controller has counted it (before that, every eviction is refused for another reason)."""
    kubectl(env, "create", "-f", "-", stdin=PDB.format(name=name, app=app))
    path = f"/apis/policy/v1beta1/namespaces/{NS}/poddisruptionbudgets/{name}"

    def counted() -> bool:
        st = api.get(path).get("status") or {}
        return st.get("currentHealthy") == 1 and st.get("disruptionsAllowed") == 0

    until(f"budget {name} counted by the disruption controller", counted)


def clean(api: KubeApi) -> None:
    """Remove the tests' pods, ReplicaSets and budgets; every pool node schedulable, unmarked."""
    sel = f"?labelSelector={TEST_LABEL}%3Dkube"
    for path in (f"/apis/policy/v1beta1/namespaces/{NS}/poddisruptionbudgets",
                 f"/apis/apps/v1/namespaces/{NS}/replicasets", f"/api/v1/namespaces/{NS}/pods"):
        for item in (api.get(path + sel) or {}).get("items") or []:
            try:
                api.delete(f"{path}/{item['metadata']['name']}", {"gracePeriodSeconds": 0})
            except KubeApiError as exc:
                if exc.status != 404:
                    raise
    until("the tests' pods gone", lambda: not api.get(f"/api/v1/namespaces/{NS}/pods{sel}")
          ["items"])
    for name in POOL_HOSTS:
        labels = {k: None for k in node(api, name)["metadata"].get("labels", {})
                  if k in (UPGRADE_STATE, "nvidia.com/gpu-driver-upgrade.skip",
                           "k8saas.nvidia.com/ManagedByNVSentinel")}
        notes = {k: None for k in node(api, name)["metadata"].get("annotations", {})
                 if k.startswith("fleet.local/")}
        api.patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": labels, "annotations": notes},
                                            "spec": {"unschedulable": None}})


@pytest.fixture(scope="module")
def api(lab_state) -> KubeApi:  # noqa: ANN001
    assert lab_state.kubeconfig, "the session lab runs with kubernetes"
    return kube.api_for(lab_state.kubeconfig)


@pytest.fixture
def env(lab_paths, lab_state, kube_env, api, tmp_path) -> Iterator[dict[str, str]]:  # noqa: ANN001
    assert sorted(h.name for h in lab_state.hosts if h.pool == "h100") == list(POOL_HOSTS)
    for name in POOL_HOSTS:
        lab.reset(lab_paths, name)
    clean(api)
    yield fleet_env(kube_env, lab_paths, tmp_path)
    clean(api)


def fleet_env(kube_env: dict[str, str], lab_paths: Any, d: Path) -> dict[str, str]:
    """`fleet`'s environment: kubectl's, the lab, a history and matrix of its own in `d`."""
    return {**kube_env, "FLEET_LAB_DIR": str(lab_paths.run), "FLEET_DB": str(d / "f.db"),
            "FLEET_MATRIX": str(write_matrix(d / "m.yaml")),
            "FLEET_INVENTORY": str(ROOT / "inventories" / "lab.py"), "COLUMNS": "200"}


@pytest.fixture(scope="module", autouse=True)
def leave_the_pool_on_r580(lab_paths, kube_env, api, tmp_path_factory) -> Iterator[None]:  # noqa: ANN001
    """The tests here leave pool h100 on r595; later modules expect the session lab's golden
    r580, every package of it (test_lab.py moves only the driver back, so a stray r595 Fabric
    Manager stayed, failed against the r580 driver, and h2 ran no release at all)."""
    yield
    env = fleet_env(kube_env, lab_paths, tmp_path_factory.mktemp("kube-teardown"))
    for host in POOL_HOSTS:
        lab.reset(lab_paths, host)
    clean(api)
    for host in POOL_HOSTS:
        pinned(env, api, host)


def pinned(env: dict[str, str], api: KubeApi, host: str) -> None:
    """`host` on r580 (a no-op when it is: no reboot) and its Node Ready."""
    rc, doc = fleet(env, "apply", "-r", R580, "-l", host, "--scheduler", "none", "--no-drain",
                    "--reason", "test setup")
    assert rc == 0, doc
    until(f"{host} Ready", lambda: kube.node_ready(api, host))


def result(doc: dict[str, Any], host: str) -> dict[str, Any]:
    (r,) = [h for h in doc["hosts"] if h["host"] == host]
    return dict(r)


def test_lab_pod_places_a_running_pod_with_a_controller(env, api) -> None:  # noqa: ANN001
    r = subprocess.run([sys.executable, "-m", "fleet", "lab", "pod", "h2", "--name", "web-1",
                        "--labels", "app=web", "--labels", f"{TEST_LABEL}=kube", "--json"],
                       env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    p = api.get(f"/api/v1/namespaces/{NS}/pods/web-1")
    assert p["spec"]["nodeName"] == "h2" and p["status"]["phase"] == "Running"
    (owner,) = p["metadata"]["ownerReferences"]
    assert owner["kind"] == "ReplicaSet" and owner["controller"] is True
    ready = [c for c in p["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True"
    # kubectl, fleet's own client, sees it the same way (the lab's kubeconfig only)
    out = kubectl(env, "get", "pods", "--field-selector", "spec.nodeName=h2", "-o", "name")
    assert "pod/web-1" in out.split()


def test_a_budget_allowing_no_disruption_blocks_the_apply(env, api, lab_paths) -> None:  # noqa: ANN001
    pinned(env, api, "h2")
    kube.place_pod(api, "h2", "db-1", {"app": "db", TEST_LABEL: "kube"})
    budget(env, api, "db-pdb", "db")
    first = boot_id(lab_paths, "h2")
    rc, doc = fleet(env, "apply", "-r", R595, "-l", "h2", "--scheduler", "kubernetes")
    h2 = result(doc, "h2")
    assert rc != 0 and h2["outcome"] == "failed", doc
    assert "db-pdb" in h2["error"] and "default/db-1" in h2["error"], h2["error"]
    assert boot_id(lab_paths, "h2") == first  # nothing rebooted
    assert pod_phase(api, "db-1") == "Running"  # the protected pod untouched
    n = node(api, "h2")
    assert not n["spec"].get("unschedulable"), "fleet put back what it cordoned"
    assert not any(k.startswith("fleet.local/") for k in n["metadata"].get("annotations", {}))

    # the budget removed: the same apply evicts, pins, reboots and uncordons
    kubectl(env, "delete", "pdb", "db-pdb", "-n", NS)
    rc, doc = fleet(env, "apply", "-r", R595, "-l", "h2", "--scheduler", "kubernetes")
    h2 = result(doc, "h2")
    assert rc == 0 and h2["outcome"] == "changed" and h2["rebooted"], doc
    assert pod_phase(api, "db-1") is None  # evicted through the API, ended by the "kubelet"
    assert boot_id(lab_paths, "h2") != first
    n = node(api, "h2")
    assert not n["spec"].get("unschedulable")
    assert not any(k.startswith("fleet.local/") for k in n["metadata"].get("annotations", {}))
    until("h2 Ready again after its reboot", lambda: kube.node_ready(api, "h2"))


def test_an_admins_cordon_is_left_in_place_and_named(env, api, lab_paths) -> None:  # noqa: ANN001
    pinned(env, api, "h5")
    kube.place_pod(api, "h5", "train-1", {"app": "train", TEST_LABEL: "kube"})
    kubectl(env, "cordon", "h5")
    first = boot_id(lab_paths, "h5")
    rc, doc = fleet(env, "apply", "-r", R595, "-l", "h5", "--scheduler", "kubernetes")
    h5 = result(doc, "h5")
    assert rc != 0 and h5["outcome"] == "failed", doc
    assert "drained by someone else" in h5["error"] and "default/train-1" in h5["error"], h5
    assert boot_id(lab_paths, "h5") == first
    assert pod_phase(api, "train-1") == "Running"
    n = node(api, "h5")
    assert n["spec"].get("unschedulable") is True, "the admin's cordon stays"
    assert not any(k.startswith("fleet.local/") for k in n["metadata"].get("annotations", {}))


def test_a_node_the_gpu_operator_is_upgrading_is_skipped_and_named(env, api, lab_paths) -> None:  # noqa: ANN001
    pinned(env, api, "h5")
    kubectl(env, "label", "node", "h5", f"{UPGRADE_STATE}=upgrade-required")
    first = boot_id(lab_paths, "h5")
    rc, doc = fleet(env, "apply", "-r", R595, "-l", "h5", "--scheduler", "kubernetes")
    h5 = result(doc, "h5")
    assert rc != 0 and h5["outcome"] == "failed", doc
    assert "GPU Operator" in h5["error"] and "upgrade-required" in h5["error"], h5["error"]
    assert boot_id(lab_paths, "h5") == first
    n = node(api, "h5")
    assert not n["spec"].get("unschedulable"), "fleet did not cordon it"
    assert not any(k.startswith("fleet.local/") for k in n["metadata"].get("annotations", {}))
    assert "nvidia.com/gpu-driver-upgrade.skip" not in n["metadata"]["labels"]


def test_a_host_whose_driver_the_gpu_operator_runs_is_refused_and_still_probed(
        env, api, lab_paths) -> None:  # noqa: ANN001
    """The lab fault operator-driver: the GPU Operator's driver root and marks under
    /run/nvidia. apply refuses before draining or installing (pointing at the operator's
    settings); probe and check read the host as the operator's, not as a host without its
    driver packages. The module fixture's lab.reset takes the marks away."""
    pinned(env, api, "h5")
    lab.inject(lab_paths, "h5", ["operator-driver"])
    first = boot_id(lab_paths, "h5")
    rc, doc = fleet(env, "apply", "-r", R595, "-l", "h5", "--scheduler", "kubernetes")
    h5 = result(doc, "h5")
    assert rc != 0 and h5["outcome"] == "refused", doc
    assert "GPU Operator" in h5["error"] and "spec.driver.version" in h5["error"], h5["error"]
    assert "IS_HOST_DRIVER=false" in h5["error"], h5["error"]
    assert not h5["rebooted"] and not h5["drained"] and h5["changes"] == []
    assert boot_id(lab_paths, "h5") == first
    n = node(api, "h5")
    assert not n["spec"].get("unschedulable"), "refused before any drain"
    assert not any(k.startswith("fleet.local/") for k in n["metadata"].get("annotations", {}))

    rc, doc = fleet(env, "probe", "-l", "h5", "--no-frameworks")
    assert rc == 0, doc
    rc, doc = fleet(env, "check", "-l", "h5", "--all")
    assert rc == 0, doc
    owner = [f for f in doc["findings"] if f["check"] == "driver.owner"]
    assert [f["severity"] for f in owner] == ["ok"], doc["findings"]
    assert "GPU Operator" in owner[0]["message"]
    assert not [f for f in doc["findings"] if f["severity"] == "fail"], doc["findings"]
    # nothing installed: the same apply without the marks still has r595 to pin
    lab.reset(lab_paths, "h5")
    rc, doc = fleet(env, "apply", "-r", R595, "-l", "h5", "--dry")
    assert result(doc, "h5")["outcome"] == "would_change", doc


def reboots(lab_paths, name: str) -> int:  # noqa: ANN001
    """How often the host ran its reboot command (the lab's /var/log/lab-reboots.log)."""
    log = lab_paths.host_root(name) / "var/log/lab-reboots.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def marked(n: dict[str, Any]) -> bool:
    return any(k.startswith("fleet.local/") for k in n["metadata"].get("annotations", {}))


def test_a_controller_killed_while_waiting_resumes_and_leaves_an_admins_cordon(
        env, api, lab_paths, tmp_path) -> None:  # noqa: ANN001
    """`fleet rollout start` on pool h100 waits on a budget that allows no disruption of the
    `db` pods (one on each host); SIGKILL its controller mid-wait. Meanwhile an admin cordons
    the other host (kubectl). With the budget gone, `rollout resume` finishes the host it was
    draining (pod evicted, one reboot, uncordoned, fleet's annotation gone) and leaves the
    admin's cordon in place, that host skipped and named, its pod Running."""
    env = {**env, "FLEET_MATRIX": str(write_matrix(tmp_path / "wait.yaml",
                                                   timeout_minutes=3))}
    for h in POOL_HOSTS:
        pinned(env, api, h)
    for i, h in enumerate(POOL_HOSTS):
        kube.place_pod(api, h, f"db-{i}", {"app": "db", TEST_LABEL: "kube"})
    kubectl(env, "create", "-f", "-", stdin=PDB.format(name="db-all", app="db").replace(
        "minAvailable: 1", "minAvailable: 2"))
    until("budget db-all counted", lambda: (api.get(
        f"/apis/policy/v1beta1/namespaces/{NS}/poddisruptionbudgets/db-all").get("status")
        or {}).get("currentHealthy") == 2)
    count = {h: reboots(lab_paths, h) for h in POOL_HOSTS}
    proc = subprocess.Popen([sys.executable, "-m", "fleet", "rollout", "start", "--pool", "h100",
                             "--release", R595, "--scheduler", "kubernetes"], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def waiting() -> tuple[int, str] | None:
            r = subprocess.run([sys.executable, "-m", "fleet", "rollout", "status", "--json"],
                               env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
            st = json.loads(r.stdout) if r.returncode == 0 else {}
            return (st["id"], st["waiting"][0]["host"]) if st.get("waiting") else None

        rid, first = until("the rollout waits on the budget", waiting, timeout=90)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    (other,) = [h for h in POOL_HOSTS if h != first]
    n = node(api, first)
    assert n["spec"].get("unschedulable") is True and marked(n), "fleet's own cordon, kept"
    kubectl(env, "cordon", other)  # an admin's, while the rollout is under way
    kubectl(env, "delete", "pdb", "db-all", "-n", NS)
    rc, doc = fleet(env, "rollout", "resume", str(rid), "--force")
    assert rc == 0 and doc["status"] == "completed", doc
    assert doc["hosts"] == {"done": 1, "skipped": 1}, doc
    rc, st = fleet(env, "rollout", "status", str(rid), "--hosts")
    steps = {s["host"]: s for s in st["host_steps"]}
    assert steps[first]["state"] == "done", steps
    assert steps[other]["state"] == "skipped", steps  # named, with why
    assert "someone else" in json.dumps(steps[other]["detail"]), steps[other]
    assert {h: reboots(lab_paths, h) - count[h] for h in POOL_HOSTS} == {first: 1, other: 0}
    assert pod_phase(api, f"db-{POOL_HOSTS.index(first)}") is None  # evicted
    assert pod_phase(api, f"db-{POOL_HOSTS.index(other)}") == "Running"
    n = node(api, first)
    assert not n["spec"].get("unschedulable") and not marked(n), n["metadata"]
    n = node(api, other)
    assert n["spec"].get("unschedulable") is True, "the admin's cordon stays"
    assert not marked(n)
    until(f"{first} Ready again", lambda: kube.node_ready(api, first))
