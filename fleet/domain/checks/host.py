"""Host plumbing checks: device nodes, container runtime and CDI specs, other releases'
packages, framework CPU fallback, and how the GPU facts were obtained.
"""

from __future__ import annotations

from collections.abc import Iterable

import fleet.domain.checks.cdi as cdi_check
import fleet.domain.checks.packages as packages_check
from fleet.domain.checks.base import FAIL, WARN, Check, finding, registrar
from fleet.domain.checks.models import Expectations, Finding
from fleet.domain.checks.versions import driver_packages
from fleet.domain.facts import HostFacts
from fleet.domain.matrix.models import Thresholds

CHECKS: list[Check] = []
check = registrar(CHECKS)


@check("device_nodes", ("device_nodes", "gpus.minor_number"), "/dev/nvidia* nodes present")
def device_nodes(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    if facts.device_nodes is None or not (facts.gpus or exp.gpu_count):
        return
    have = {n.path: n for n in facts.device_nodes}
    wanted = ["/dev/nvidiactl", "/dev/nvidia-uvm"]
    wanted += [f"/dev/nvidia{g.minor_number}" for g in facts.gpus if g.minor_number is not None]
    missing = [p for p in wanted if p not in have]
    if missing:
        yield finding(
            "device_nodes",
            FAIL,
            "reinstall_driver",
            f"device nodes missing: {', '.join(missing)}",
            facts=["device_nodes"],
            missing=missing,
        )
    closed = [p for p in wanted if p in have and not have[p].mode.endswith("6")]
    if closed:
        yield finding(
            "device_nodes",
            WARN,
            "none",
            f"device nodes not readable and writable by all: {', '.join(closed)}",
            facts=["device_nodes"],
            modes={p: have[p].mode for p in closed},
        )


@check("container_runtime", ("container_runtime",), "NVIDIA container runtime configured")
def container_runtime(
    facts: HostFacts, exp: Expectations, th: Thresholds
) -> Iterable[Finding]:
    cr = facts.container_runtime
    if cr is None or cr.configured:
        return
    if exp.container_runtime:
        yield finding(
            "container_runtime",
            FAIL,
            "fix_container_runtime",
            "NVIDIA container runtime not configured (docker, containerd or CDI)",
            facts=["container_runtime"],
        )
    elif cr.docker_installed or cr.containerd_installed:
        yield finding(
            "container_runtime",
            WARN,
            "fix_container_runtime",
            "a container engine is installed but the NVIDIA runtime is not configured: "
            "containers will not see the GPUs (run nvidia-ctk runtime configure)",
            facts=["container_runtime"],
        )


# stale CDI specs after a driver upgrade (fleet/domain/checks/cdi.py)
CHECKS.append(Check(cdi_check.CHECK_ID, cdi_check.READS, cdi_check.cdi_specs, cdi_check.SUMMARY))
# another release's packages, holds or `rc` configuration (fleet/domain/checks/packages.py)
CHECKS.append(
    Check(
        packages_check.CHECK_ID,
        packages_check.READS,
        packages_check.other_release_packages,
        packages_check.SUMMARY,
    )
)


@check("frameworks.cpu_fallback", ("frameworks", "gpus"), "torch/onnxruntime see the GPUs")
def cpu_fallback(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    if not facts.frameworks:
        return
    has_gpus = bool(facts.gpus) or bool(facts.gpu_count) or bool(exp.gpu_count)
    for fw in facts.frameworks:
        if fw.result is None:
            yield finding(
                "frameworks.cpu_fallback",
                WARN,
                "none",
                f"{fw.name}: could not check ({fw.unreadable.get('result', 'unknown')})",
                facts=["frameworks"],
            )
        elif has_gpus and fw.sees_gpu is False:
            yield finding(
                "frameworks.cpu_fallback",
                FAIL,
                "reinstall_driver",
                f"{fw.name} {fw.result.get('version', '')} sees no GPU: work would silently "
                "run on the CPU",
                facts=["frameworks", "gpus"],
                result=fw.result,
            )


@check("probe.source", ("source", "source_errors"), "GPU facts came from NVML")
def probe_source(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    if facts.source == "nvidia-smi":
        yield finding(
            "probe.source",
            WARN,
            "none",
            f"NVML unavailable, facts read from nvidia-smi ({facts.source_errors.get('nvml', {})})",
            facts=["source"],
        )
    elif facts.source == "none":
        expected = bool(exp.gpu_count) or bool(facts.device_nodes) or bool(driver_packages(facts))
        if expected:
            yield finding(
                "probe.source",
                FAIL,
                "reinstall_driver",
                "no GPU facts: NVML and nvidia-smi both failed on a host with an NVIDIA "
                "driver installed",
                facts=["source", "source_errors"],
                errors=facts.source_errors,
            )
