"""A real Kubernetes API server for the lab (`fleet lab up --kubernetes`).

What runs (all children of the lab daemon, in the root namespaces, on loopback ports of the lab's
own; see docs/lab.md "Kubernetes" and shared/spikes/kubernetes/README.md for the traps):

- etcd (Debian's etcd-server) on 127.0.0.1:ETCD_PORT, its data under `RUN/kube/etcd`;
- kube-apiserver 1.20.2 (built once from Debian's source package, `fleet.lab.kube_build`) on
  https://127.0.0.1:API_PORT, its self-signed serving certificate in `RUN/kube/certs`, a static
  token in group system:masters, RBAC on, the ServiceAccount admission plugin off (no
  service-account controller runs);
- kube-controller-manager with only the disruption controller (it fills in PodDisruptionBudget
  status; without it every covered pod's eviction is refused);
- the kubelet stand-in (`fleet.lab.kubelet_standin`): one Node per lab host, Ready while the host is
  up, NotReady while it reboots; a Terminating pod on a lab node is ended at once.

`RUN/kube/kubeconfig` names only this server (its own cluster, user and context, `fleet-lab`), so
nothing of the lab ever reads or writes ~/.kube or reaches a cluster the machine may already know:
the lab's kubectl environment (`kubectl_env`) sets KUBECONFIG and KUBECACHEDIR under the run dir.
Teardown is the lab's: the daemon stops the three processes, `fleet lab down` kills anything
left whose command line names the run dir and removes the run dir.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fleet.errors import BadInput, CouldNotComplete
from fleet.lab import kube_build
from fleet.lab.kube_api import KubeApi, KubeApiError
from fleet.lab.kubelet_standin import KubeletStandin
from fleet.lab.paths import LabPaths
from fleet.lab.sysutil import atomic_write, require_free_ports, run

ETCD_PORT = 6930
ETCD_PEER_PORT = 6931
API_PORT = 6932
CONTEXT = "fleet-lab"
OWNER_ENV = "FLEET_LAB_OWNED"  # as the lab's Slurm: `fleet lab down` finds these processes
PAUSE_IMAGE = "fleet-lab/none:0"  # never pulled: no kubelet runs


@dataclass(frozen=True)
class KubePaths:
    """Everything of the lab's Kubernetes, under `RUN/kube/`."""

    root: Path

    @classmethod
    def of(cls, paths: LabPaths) -> KubePaths:
        return cls(paths.run / "kube")

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def token(self) -> Path:
        return self.root / "token"

    @property
    def cache(self) -> Path:
        """kubectl's discovery and HTTP cache (KUBECACHEDIR): never ~/.kube/cache."""
        return self.root / "cache"

    @property
    def ready(self) -> Path:
        """Written by the daemon once the server answers and every Node exists."""
        return self.root / "ready"

    @property
    def failed(self) -> Path:
        return self.root / "failed"


def server_url() -> str:
    return f"https://127.0.0.1:{API_PORT}"


def missing_tools() -> list[str]:
    """Debian packages `--kubernetes` needs to run (the build's own are checked by the build)."""
    return [] if _which("etcd") else ["etcd-server"]


def _which(tool: str) -> bool:
    return any(os.access(Path(d) / tool, os.X_OK)
               for d in os.environ.get("PATH", "/usr/bin:/bin").split(":") if d)


def check() -> None:
    """Before `lab up` starts anything: the packages are here and the ports are free."""
    lacking = missing_tools() + ([] if kube_build.cached() else kube_build.missing_tools())
    if lacking:
        raise BadInput.single("--kubernetes needs these Debian packages: " + " ".join(lacking),
                              field="--kubernetes")
    check_ports()


def check_ports() -> None:
    """Refuse to start when something (another lab, a cluster of the machine) holds a port."""
    require_free_ports(((ETCD_PORT, "etcd"), (ETCD_PEER_PORT, "etcd peer"),
                        (API_PORT, "kube-apiserver")), "--kubernetes")


def kubeconfig_text(token: str) -> str:
    """A kubeconfig that names the lab's server only (token auth, loopback, self-signed)."""
    doc = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": CONTEXT, "cluster": {"server": server_url(),
                                                   "insecure-skip-tls-verify": True}}],
        "users": [{"name": CONTEXT, "user": {"token": token}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT}}],
        "current-context": CONTEXT,
    }  # fmt: skip
    return str(yaml.safe_dump(doc, sort_keys=False))


def configure(paths: LabPaths) -> Path:
    """Build (or reuse) the binaries, write the token, keys and kubeconfig; returns the
    kubeconfig path. Run by `fleet lab up` before the daemon starts."""
    kube_build.build()
    kp = KubePaths.of(paths)
    for d in (kp.root, kp.root / "certs", kp.root / "etcd", kp.cache):
        d.mkdir(parents=True, exist_ok=True)
    os.chmod(kp.root, 0o700)
    token = secrets.token_hex(24)
    atomic_write(kp.token, token + "\n", 0o600)
    atomic_write(kp.root / "tokens.csv", f'{token},fleet-lab-admin,fleet-lab-admin,'
                                         f'"system:masters"\n', 0o600)
    run(["openssl", "genrsa", "-out", kp.root / "sa.key", "2048"])
    run(["openssl", "rsa", "-in", kp.root / "sa.key", "-pubout", "-out", kp.root / "sa.pub"])
    atomic_write(kp.kubeconfig, kubeconfig_text(token), 0o600)
    return kp.kubeconfig


def kubectl_env(kubeconfig: str | Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment for kubectl against the lab only: its kubeconfig, its cache dir."""
    env = dict(os.environ if base is None else base)
    env["KUBECONFIG"] = str(kubeconfig)
    env["KUBECACHEDIR"] = str(Path(kubeconfig).parent / "cache")
    return env


def api_for(kubeconfig: str | Path) -> KubeApi:
    """A client of the lab's server from the token beside its kubeconfig."""
    token = (Path(kubeconfig).parent / "token").read_text().strip()
    return KubeApi(server_url(), token)


# ------------------------------------------------------------------------ in the lab daemon
def argvs(kp: KubePaths, bins: Mapping[str, Path]) -> dict[str, list[str]]:
    """The three command lines (each names the run dir, so `fleet lab down` finds them)."""
    return {
        "etcd": [
            "etcd", "--name", "fleet-lab", "--data-dir", str(kp.root / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{ETCD_PORT}",
            "--advertise-client-urls", f"http://127.0.0.1:{ETCD_PORT}",
            "--listen-peer-urls", f"http://127.0.0.1:{ETCD_PEER_PORT}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{ETCD_PEER_PORT}",
            "--initial-cluster", f"fleet-lab=http://127.0.0.1:{ETCD_PEER_PORT}",
        ],
        "kube-apiserver": [
            str(bins["kube-apiserver"]), f"--etcd-servers=http://127.0.0.1:{ETCD_PORT}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={API_PORT}", "--insecure-port=0", f"--cert-dir={kp.root / 'certs'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={kp.root / 'sa.pub'}",
            f"--service-account-signing-key-file={kp.root / 'sa.key'}",
            f"--token-auth-file={kp.root / 'tokens.csv'}", "--authorization-mode=RBAC",
            "--disable-admission-plugins=ServiceAccount", "--profiling=false",
        ],
        "kube-controller-manager": [
            str(bins["kube-controller-manager"]), f"--kubeconfig={kp.kubeconfig}",
            "--controllers=disruption", "--leader-elect=false", "--port=0",
            "--secure-port=0", "--profiling=false",
        ],
    }  # fmt: skip


class ControlPlane:
    """etcd, the API server, the controller manager and the kubelet stand-in, in the daemon."""

    def __init__(self, paths: LabPaths, nodes: Sequence[str],
                 host_up: Callable[[str], bool]) -> None:
        self.paths = paths
        self.kp = KubePaths.of(paths)
        self.nodes = list(nodes)
        self.host_up = host_up
        self.procs: list[subprocess.Popen[bytes]] = []
        self.names: list[str] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._main, name="kube", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.paths.logs / f"{name}.out", "ab")  # noqa: SIM115
        env = {**os.environ, OWNER_ENV: str(self.paths.run), "HOME": str(self.kp.root)}
        self.names.append(name)
        self.procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                           stderr=subprocess.STDOUT, env=env, cwd=self.kp.root))
        log.close()

    def _log(self, msg: str) -> None:
        with open(self.paths.logs / "kubelet-standin.log", "a") as f:
            f.write(f"{time.strftime('%H:%M:%S')} {msg}\n")

    def _main(self) -> None:
        try:
            started = time.monotonic()
            bins = kube_build.cached()
            if bins is None:
                raise CouldNotComplete("the kubernetes binaries are gone from "
                                       f"{kube_build.cache_dir()}")
            cmds = argvs(self.kp, bins)
            api = api_for(self.kp.kubeconfig)
            self._spawn("etcd", cmds["etcd"])
            self._spawn("kube-apiserver", cmds["kube-apiserver"])
            while not api.ready():
                dead = [n for n, p in zip(self.names, self.procs, strict=True)
                        if p.poll() is not None]
                if dead:
                    raise CouldNotComplete(f"{dead[0]} exited; see {self.paths.logs}/"
                                           f"{dead[0]}.out")
                if self.stopping.wait(0.2):
                    return
            self._spawn("kube-controller-manager", cmds["kube-controller-manager"])
            standin = KubeletStandin(api, self.nodes, self.host_up, log=self._log)
            standin.create_nodes()
            standin.step()
            atomic_write(self.kp.ready, f"{time.monotonic() - started:.2f}\n")
            standin.run(self.stopping)
        except (CouldNotComplete, KubeApiError, OSError) as exc:
            atomic_write(self.kp.failed, f"{exc}\n")

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=5)
        for p in reversed(self.procs):  # the controller manager, the API server, then etcd
            if p.poll() is None:
                p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)


# --------------------------------------------------------------------------- in `lab up`
def wait_ready(paths: LabPaths, timeout: float = 120) -> float:
    """Seconds from the daemon's start of etcd to the API server ready with every Node Ready
    (what `fleet lab up` waits for); raises with the daemon's reason when it failed."""
    kp = KubePaths.of(paths)
    api = api_for(kp.kubeconfig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if kp.failed.exists():
            raise CouldNotComplete("the lab's Kubernetes did not start: "
                                   + kp.failed.read_text().strip())
        if kp.ready.exists():
            with contextlib.suppress(KubeApiError):
                if all(node_ready(api, n) for n in node_names(api)):
                    return float(kp.ready.read_text().split()[0])
        time.sleep(0.2)
    raise CouldNotComplete(f"the lab's Kubernetes was not ready within {timeout:.0f} s; see "
                           f"{paths.logs}/kube-apiserver.out")


def node_names(api: KubeApi) -> list[str]:
    items = (api.get("/api/v1/nodes") or {}).get("items") or []
    return sorted(str((n.get("metadata") or {}).get("name")) for n in items)


def node_ready(api: KubeApi, name: str) -> bool:
    node = api.get(f"/api/v1/nodes/{name}")
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return False


# --------------------------------------------------------------------------- `fleet lab pod`
def parse_labels(specs: Sequence[str]) -> dict[str, str]:
    """`K=V` options -> labels; a bad one is bad input naming it."""
    labels: dict[str, str] = {}
    for spec in specs:
        key, eq, value = spec.partition("=")
        if not eq or not key:
            raise BadInput.single(f"--labels {spec!r}: expected KEY=VALUE", field="--labels")
        labels[key] = value
    return labels


def place_pod(api: KubeApi, node: str, name: str, labels: Mapping[str, str],
              namespace: str = "default", owner: str | None = None) -> dict[str, Any]:
    """A Running, Ready pod `name` bound to `node`, whose controller is ReplicaSet `owner`
    (default: the pod's name; created when missing, replicas 1, nothing reconciles it: no
    ReplicaSet controller runs). Returns the pod. The status is set after the create (a create
    resets it: trap 3)."""
    labels = dict(labels) or {"app": name}
    rs_name = owner or name
    rs_path = f"/apis/apps/v1/namespaces/{namespace}/replicasets"
    try:
        rs = api.get(f"{rs_path}/{rs_name}")
    except KubeApiError as exc:
        if exc.status != 404:
            raise
        rs = api.post(rs_path, {
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": rs_name, "labels": labels},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "main",
                                                           "image": PAUSE_IMAGE}]}}},
        })  # fmt: skip
    pods = f"/api/v1/namespaces/{namespace}/pods"
    api.post(pods, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs_name,
            "uid": rs["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": PAUSE_IMAGE}]},
    })  # fmt: skip
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {"status": {
        "phase": "Running", "startTime": now,
        "conditions": [{"type": t, "status": "True", "lastTransitionTime": now}
                       for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
        "containerStatuses": [{"name": "main", "image": PAUSE_IMAGE, "imageID": "",
                               "ready": True, "restartCount": 0, "started": True,
                               "state": {"running": {"startedAt": now}}}],
    }}  # fmt: skip
    pod: dict[str, Any] = api.patch(f"{pods}/{name}/status", status)
    return pod


def lab_pod(paths: LabPaths, host: str, name: str, labels: Mapping[str, str],
            namespace: str = "default", owner: str | None = None) -> dict[str, Any]:
    """`fleet lab pod`: `place_pod` on the running lab's Node for `host`."""
    from fleet.lab.model import LabState

    if not paths.state_file.exists():
        raise BadInput.single(f"no lab is up (no {paths.state_file}); run `fleet lab up`")
    state = LabState.load(paths.state_file)
    if not state.kubeconfig:
        raise BadInput.single("this lab runs no Kubernetes: `fleet lab up --kubernetes`",
                              field="--kubernetes")
    try:
        node = state.host(host).name
    except KeyError:
        raise BadInput.single(f"no lab host {host!r}; hosts: "
                              + ", ".join(h.name for h in state.hosts)) from None
    try:
        return place_pod(api_for(state.kubeconfig), node, name, labels, namespace, owner)
    except KubeApiError as exc:
        raise CouldNotComplete(f"placing pod {namespace}/{name} on {node}: {exc}") from None
