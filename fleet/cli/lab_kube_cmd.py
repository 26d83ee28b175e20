"""`fleet lab pod` and the lab's kubeconfig lines (`fleet lab up --kubernetes`)."""

from __future__ import annotations

from typing import Annotated

import typer

from fleet.cli.output import emit_json, stdout
from fleet.lab.paths import LabPaths


def say_kubeconfig(kubeconfig: str, ready_s: float | None) -> None:
    """How to reach the lab's API server with kubectl, and nothing else."""
    took = f" (API server ready {ready_s:.1f} s after etcd started)" if ready_s else ""
    stdout.print(f"Kubernetes 1.20 API server{took}; for kubectl:", markup=False)
    stdout.print(f"export KUBECONFIG={kubeconfig} KUBECACHEDIR={kubeconfig.rsplit('/', 1)[0]}"
                 "/cache", markup=False, soft_wrap=True)


def pod_cmd(
    host: Annotated[str, typer.Argument(help="Lab host (its Node).")],
    name: Annotated[str, typer.Option("--name", help="The pod's name.")],
    labels: Annotated[
        list[str] | None,
        typer.Option("--labels", metavar="K=V", help="A pod label (repeatable); default app=NAME."),
    ] = None,
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="The pod's namespace.")] = (
        "default"),
    owner: Annotated[
        str | None,
        typer.Option("--owner", help="Its ReplicaSet (created when missing); default: NAME."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="The pod object as JSON.")] = False,
) -> None:
    """Place a Running, Ready pod on a host's Node, owned by a ReplicaSet (`--kubernetes` labs)."""
    from fleet.lab import kube

    pod = kube.lab_pod(LabPaths.from_env(), host, name, kube.parse_labels(labels or []),
                       namespace, owner)
    if json_out:
        emit_json(pod)
        return
    meta = pod.get("metadata") or {}
    stdout.print(f"pod {meta.get('namespace')}/{meta.get('name')} Running on {host} "
                 f"(ReplicaSet {owner or name})", markup=False)
