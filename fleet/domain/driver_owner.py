"""Who manages a host's NVIDIA driver: the host's packages, or the GPU Operator's driver container.

The GPU Operator (driver.enabled, the default) runs the driver in a container of the
`nvidia-driver-daemonset` DaemonSet: the kernel modules are loaded from it and its root is
mounted on the host at /run/nvidia/driver. The container's startup probe writes
/run/nvidia/validations/.driver-ctr-ready once nvidia-smi works, and the operator's validator
writes /run/nvidia/validations/driver-ready (KEY=VALUE lines: IS_HOST_DRIVER, NVIDIA_DRIVER_ROOT,
...) for the other operands. On a node with a driver installed on the host the driver container
disables itself and labels the Node `nvidia.com/gpu.deploy.driver=pre-installed`.

On an operator-driver host, pinning host packages would install a second driver under the
container's: fleet refuses and points at the operator's own settings. Pure: the host-side reading
is `fleet.remote.facts.DriverRoot` (pyinfra) and the probe's `probe_driver_container`, both in
the shape of `DriverContainer`; the Node's side comes from the Kubernetes scheduler.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from fleet.domain.fact_base import FactsModel

DRIVER_ROOT = "/run/nvidia/driver"
VALIDATIONS = "/run/nvidia/validations"
DEPLOY_DRIVER_LABEL = "nvidia.com/gpu.deploy.driver"
DRIVER_DAEMONSET = "nvidia-driver-daemonset"
MARKS = (".driver-ctr-ready", "host-driver-ready", "driver-ready")
MAX_ENTRIES = 64
MAX_READY_BYTES = 4096

Kind = Literal["host", "gpu-operator", "unknown"]
RootState = Literal["absent", "empty", "populated", "host-root", "not-a-directory"]


class DriverContainer(FactsModel):
    """The host's side: /run/nvidia/driver and the operator's validation marks.

    `root`: absent, empty, populated (a driver container's root is mounted there), host-root
    (a link to / : the host's own driver, as some operator setups make it) or not-a-directory;
    None when unreadable (the reason in `unreadable`). `driver_ready`: the validator's file as
    KEY=VALUE pairs, None when it is absent."""

    root: RootState | None = None
    entries: list[str] = Field(default_factory=list)
    marks: list[str] = Field(default_factory=list)
    driver_ready: dict[str, str] | None = None


@dataclass(frozen=True)
class DriverOwner:
    kind: Kind
    why: str

    @property
    def operator(self) -> bool:
        return self.kind == "gpu-operator"


def parse_env_lines(text: str) -> dict[str, str]:
    """KEY=VALUE lines (the validator's driver-ready); other lines are ignored."""
    out: dict[str, str] = {}
    for line in text[:MAX_READY_BYTES].splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key.replace("_", "").isalnum():
            out[key] = value.strip().strip('"')
    return out


def parse_driver_root(lines: Iterable[str]) -> DriverContainer:
    """The output of `fleet.remote.facts.DriverRoot`'s command: tagged lines
    `root STATE`, `entry NAME`, `mark NAME`, `ready KEY=VALUE`, `unreadable WHAT`."""
    root: str | None = None
    entries: list[str] = []
    marks: list[str] = []
    ready: list[str] | None = None
    reasons: dict[str, str] = {}
    for line in lines:
        tag, _, rest = line.rstrip("\n").partition(" ")
        if tag == "root":
            root = rest.strip()
        elif tag == "entry" and len(entries) < MAX_ENTRIES:
            entries.append(rest.strip())
        elif tag == "mark" and rest.strip() in MARKS:
            marks.append(rest.strip())
        elif tag == "ready":
            ready = [*(ready or []), rest]
        elif tag == "unreadable":
            what = rest.strip() or "root"
            reasons["driver_ready" if what == "driver-ready" else "root"] = (
                f"cannot read {VALIDATIONS}/driver-ready" if what == "driver-ready"
                else f"cannot list {DRIVER_ROOT}")
    if root is None and "root" not in reasons:
        reasons["root"] = "no answer about " + DRIVER_ROOT
    if root is not None and root not in ("absent", "empty", "populated", "host-root",
                                         "not-a-directory"):
        reasons["root"], root = f"unexpected state {root[:40]!r}", None
    if "root" in reasons:
        root = None
    parsed = parse_env_lines("\n".join(ready)) if ready is not None else None
    if parsed is None and "driver-ready" in marks and "driver_ready" not in reasons:
        parsed = {}
    return DriverContainer.model_validate({
        "root": root, "entries": entries, "marks": marks, "driver_ready": parsed,
        "unreadable": reasons})


def from_host(dc: DriverContainer | None) -> DriverOwner:
    """Judge the host's side. Unreadable, or signs that contradict each other: unknown."""
    if dc is None:
        return DriverOwner("unknown", f"{DRIVER_ROOT} was not read")
    if dc.unreadable:
        return DriverOwner("unknown", "; ".join(f"{k}: {v}" for k, v in
                                                sorted(dc.unreadable.items())))
    signs = []
    ready = dc.driver_ready or {}
    is_host = ready.get("IS_HOST_DRIVER", "").lower()
    if is_host == "false":
        signs.append(f"{VALIDATIONS}/driver-ready says IS_HOST_DRIVER=false"
                     + (f" (NVIDIA_DRIVER_ROOT={ready['NVIDIA_DRIVER_ROOT']})"
                        if ready.get("NVIDIA_DRIVER_ROOT") else ""))
    if ".driver-ctr-ready" in dc.marks:
        signs.append(f"the driver container's {VALIDATIONS}/.driver-ctr-ready is present")
    if dc.root == "populated":
        shown = ", ".join(dc.entries[:5]) + (", ..." if len(dc.entries) > 5 else "")
        signs.append(f"{DRIVER_ROOT} holds a driver root ({shown})")
    if signs and (is_host == "true" or "host-driver-ready" in dc.marks):
        return DriverOwner("unknown", "the GPU Operator's marks disagree: "
                           + "; ".join(signs) + f", yet {VALIDATIONS} names a host driver")
    if signs:
        return DriverOwner("gpu-operator", "; ".join(signs))
    if is_host == "true":
        return DriverOwner("host", "the GPU Operator's validator found the host's driver")
    return DriverOwner("host", f"no driver container ({DRIVER_ROOT} {dc.root})")


def from_node(labels: Mapping[str, str], driver_pods: Sequence[str] | None) -> DriverOwner | None:
    """Judge the Node's side: its `nvidia.com/gpu.deploy.driver` label and the pods of the
    operator's driver DaemonSet on it (None: not listed). None when the Node says nothing (no
    GPU Operator, or a cluster that does not label it)."""
    value = labels.get(DEPLOY_DRIVER_LABEL)
    if driver_pods:
        return DriverOwner("gpu-operator", f"pod {driver_pods[0]} of the GPU Operator's "
                           f"{DRIVER_DAEMONSET} runs on the node")
    if value == "true" and driver_pods is None:
        return DriverOwner("unknown", f"node label {DEPLOY_DRIVER_LABEL}=true and the "
                           "operator's driver pods could not be listed")
    if value in ("pre-installed", "false"):
        return DriverOwner("host", f"node label {DEPLOY_DRIVER_LABEL}={value}")
    return None


def combine(owners: Iterable[DriverOwner | None]) -> DriverOwner:
    """Any side that sees the operator's driver wins; else any that cannot tell; else host."""
    seen = [o for o in owners if o is not None]
    for kind in ("gpu-operator", "unknown"):
        hits = [o.why for o in seen if o.kind == kind]
        if hits:
            return DriverOwner(kind, "; ".join(hits))
    return seen[0] if seen else DriverOwner("unknown", "nothing read")


OPERATOR_SETTINGS = ("set the driver version in the GPU Operator instead: ClusterPolicy "
                     "spec.driver.version (helm value driver.version), or the NVIDIADriver "
                     "resource that selects this node")


def refusal(owner: DriverOwner) -> str | None:
    """Why fleet pins no host driver packages on this host, or None where it may."""
    if owner.kind == "gpu-operator":
        return (f"the NVIDIA driver here is a container managed by the GPU Operator "
                f"({owner.why}): fleet pins no host driver packages on it; {OPERATOR_SETTINGS}")
    if owner.kind == "unknown":
        return (f"cannot tell whether the GPU Operator manages the NVIDIA driver here "
                f"({owner.why}): fleet pins nothing it cannot account for")
    return None
