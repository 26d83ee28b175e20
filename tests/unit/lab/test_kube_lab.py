"""The lab's Kubernetes pieces that need no API server: the kubelet stand-in's loop over a fake
API, the build cache's verification, the private apt options, the command lines and kubeconfig
(everything under the run dir, loopback only), and `fleet lab pod`'s labels."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.errors import BadInput
from fleet.lab import kube, kube_build
from fleet.lab.kube_api import STRATEGIC, KubeApiError
from fleet.lab.kubelet_standin import HEARTBEAT_S, KubeletStandin, terminating


class FakeApi:
    """Records requests; answers pod lists from `pods`; `fail` makes the next call raise."""

    def __init__(self, pods: list[dict[str, Any]] | None = None) -> None:
        self.pods = pods or []
        self.calls: list[tuple[str, str, Any]] = []
        self.existing: set[str] = set()

    def get(self, path: str) -> Any:
        self.calls.append(("GET", path, None))
        return {"items": self.pods}

    def post(self, path: str, body: Any) -> Any:
        self.calls.append(("POST", path, body))
        name = body["metadata"]["name"]
        if name in self.existing:
            raise KubeApiError(409, "already exists")
        return body

    def patch(self, path: str, body: Any, content_type: str = "") -> Any:
        self.calls.append(("PATCH", path, (body, content_type)))
        return body

    def delete(self, path: str, body: Any = None) -> Any:
        self.calls.append(("DELETE", path, body))
        return None


def pod(name: str, node: str, deleting: bool = False, uid: str = "u1") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node}}


def test_only_terminating_pods_on_lab_nodes_are_ended() -> None:
    pods = [pod("a", "h1", deleting=True, uid="ua"), pod("b", "h1"),
            pod("c", "other", deleting=True), pod("d", "h2", deleting=True, uid="ud")]
    assert terminating(pods, {"h1", "h2"}) == [("ns", "a", "ua"), ("ns", "d", "ud")]
    api = FakeApi(pods)
    standin = KubeletStandin(api, ["h1", "h2"], lambda n: True)  # type: ignore[arg-type]
    assert standin.end_terminating() == 2
    deletes = [(p, b) for m, p, b in api.calls if m == "DELETE"]
    assert deletes == [
        ("/api/v1/namespaces/ns/pods/a", {"gracePeriodSeconds": 0, "preconditions": {"uid": "ua"}}),
        ("/api/v1/namespaces/ns/pods/d", {"gracePeriodSeconds": 0, "preconditions": {"uid": "ud"}}),
    ]


def test_nodes_follow_their_host_and_are_written_on_change_or_heartbeat() -> None:
    up = {"h1": True, "h2": False}
    now = [100.0]
    api = FakeApi()
    standin = KubeletStandin(api, ["h1", "h2"], up.__getitem__,  # type: ignore[arg-type]
                             clock=lambda: now[0])

    def written() -> dict[str, str]:
        out = {}
        for m, path, arg in api.calls:
            if m == "PATCH":
                body, ctype = arg
                assert ctype == STRATEGIC and path.endswith("/status")
                (cond,) = body["status"]["conditions"]
                out[path.split("/")[4]] = cond["status"]
        api.calls.clear()
        return out

    standin.report_nodes()
    assert written() == {"h1": "True", "h2": "False"}
    standin.report_nodes()
    assert written() == {}  # nothing changed, no heartbeat due
    up["h1"] = False  # h1 reboots
    standin.report_nodes()
    assert written() == {"h1": "False"}
    now[0] += HEARTBEAT_S + 1
    standin.report_nodes()
    assert written() == {"h1": "False", "h2": "False"}


def test_existing_nodes_are_kept() -> None:
    api = FakeApi()
    api.existing = {"h1"}
    KubeletStandin(api, ["h1", "h2"], lambda n: True).create_nodes()  # type: ignore[arg-type]
    assert [b["metadata"]["name"] for m, _, b in api.calls if m == "POST"] == ["h1", "h2"]


def _fake_cache(where: Path, **over: Any) -> None:
    where.mkdir(parents=True)
    sums = {}
    for name in kube_build.BINARIES:
        (where / name).write_bytes(name.encode())
        sums[name] = hashlib.sha256(name.encode()).hexdigest()
    manifest = {"version": kube_build.K8S_VERSION, "debian_version": kube_build.DEBIAN_VERSION,
                "sha256": sums, **over}
    (where / kube_build.MANIFEST).write_text(json.dumps(manifest))


def test_the_cache_is_used_only_when_version_and_every_sha_match(tmp_path: Path) -> None:
    good = tmp_path / "good"
    _fake_cache(good)
    assert kube_build.cached(good) == {n: good / n for n in kube_build.BINARIES}
    old = tmp_path / "old"
    _fake_cache(old, version="1.19.0")
    assert kube_build.cached(old) is None
    changed = tmp_path / "changed"
    _fake_cache(changed)
    (changed / "kube-apiserver").write_bytes(b"truncated")
    assert kube_build.cached(changed) is None
    assert kube_build.cached(tmp_path / "none") is None


def test_the_source_fetch_never_names_the_machines_apt_dirs(tmp_path: Path) -> None:
    opts = kube_build.apt_options(tmp_path)
    values = [o.split("=", 1)[1] for o in opts if "=" in o and o.startswith("Dir::")]
    assert values and all(v.startswith(str(tmp_path)) or v == "/nonexistent" for v in values)
    assert {o.split("=", 1)[0] for o in opts if o.startswith("Dir::")} >= {
        "Dir::Etc::SourceList", "Dir::Etc::SourceParts", "Dir::State::Lists", "Dir::Cache"}
    text = kube_build.sources_list()
    assert all(line.startswith("deb-src ") for line in text.splitlines())
    assert "bookworm main" in text and "bookworm-security main" in text


def test_every_process_names_the_run_dir_and_listens_on_loopback(tmp_path: Path) -> None:
    kp = kube.KubePaths(tmp_path / "run" / "kube")
    bins = {n: Path("/cache") / n for n in kube_build.BINARIES}
    for name, argv in kube.argvs(kp, bins).items():
        assert any(str(kp.root) in a for a in argv), name  # `fleet lab down` finds it
        urls = [a for a in argv if "://" in a and "issuer" not in a]
        assert all("127.0.0.1" in u for u in urls), (name, urls)
    cm = kube.argvs(kp, bins)["kube-controller-manager"]
    assert "--controllers=disruption" in cm and "--leader-elect=false" in cm


def test_the_kubeconfig_names_only_the_lab_server() -> None:
    doc = yaml.safe_load(kube.kubeconfig_text("tok"))
    assert [c["cluster"]["server"] for c in doc["clusters"]] == [f"https://127.0.0.1:{kube.API_PORT}"]
    assert doc["current-context"] == kube.CONTEXT and doc["users"][0]["user"] == {"token": "tok"}
    env = kube.kubectl_env("/run/x/kube/kubeconfig",
                           {"HOME": "/root", "KUBECONFIG": "/root/.kube/config"})
    assert env["KUBECONFIG"] == "/run/x/kube/kubeconfig"
    assert env["KUBECACHEDIR"] == "/run/x/kube/cache"


def test_pod_labels() -> None:
    assert kube.parse_labels(["app=web", "tier="]) == {"app": "web", "tier": ""}
    with pytest.raises(BadInput, match="expected KEY=VALUE"):
        kube.parse_labels(["app"])
