"""CDI specs against the installed driver: the container side of a driver upgrade.

`nvidia-ctk cdi generate` writes a spec (/etc/cdi/nvidia.yaml, /var/run/cdi/nvidia.yaml) that
names the driver's library files by version (libnvidia-ml.so.580.95.05). After a driver upgrade an
old spec still names the old files; they are gone, and every container that asks for
`nvidia.com/gpu` fails to start (or, with a spec that half-matches, gets the wrong libraries)
while the host itself looks healthy. Toolkit 1.18+ refreshes /var/run/cdi with a systemd unit
(nvidia-cdi-refresh); a spec written by hand or by an older toolkit under /etc/cdi is not.

Pure: reads `HostFacts.container_runtime.cdi` and `.toolkit` (see the probe's
`probe_cdi_specs`), which are None for sources that have no such facts (nvidia-smi imports, the
simulated fleet): then this check says nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from fleet.domain.checks.models import Expectations, Finding, Severity
from fleet.domain.facts import CdiSpec, HostFacts
from fleet.domain.matrix.models import Thresholds

CHECK_ID = "container_runtime.cdi"
READS = ("container_runtime.cdi", "container_runtime.toolkit", "versions.driver_library")
SUMMARY = "CDI specs were generated for the installed driver and name files that exist"


def regenerate_command(path: str) -> str:
    """The remediation, writing the spec where the stale one is."""
    return f"nvidia-ctk cdi generate --output={path}"


def _nvidia(spec: CdiSpec) -> bool:
    """An NVIDIA spec (kind nvidia.com/gpu, management.nvidia.com/gpu, ...), or an unreadable
    file whose name says NVIDIA."""
    if spec.kind is not None:
        return spec.kind.split("/", 1)[0].endswith("nvidia.com")
    return "nvidia" in spec.path.rsplit("/", 1)[-1].lower()


def _finding(sev: Severity, msg: str, spec_path: str | None, **evidence: object) -> Finding:
    if spec_path is not None:
        evidence.setdefault("command", regenerate_command(spec_path))
    return Finding(
        check=CHECK_ID,
        severity=sev,
        remediation="fix_container_runtime",
        message=msg,
        facts=list(READS),
        evidence=evidence,
    )


def _installed(facts: HostFacts) -> tuple[str | None, str]:
    """The driver whose files are on disk: NVML's (the user-space library) else the module's."""
    v = facts.versions
    if v.driver_library:
        return v.driver_library, "driver library"
    return v.driver_kernel_module, "kernel module"


def cdi_specs(facts: HostFacts, exp: Expectations, th: Thresholds) -> Iterable[Finding]:
    """A stale, broken or unreadable CDI spec fails; so does CDI mode with no NVIDIA spec."""
    cr = facts.container_runtime
    if cr is None or cr.cdi is None:
        return
    installed, source = _installed(facts)
    for spec in cr.cdi:
        if spec.parsed is not True:
            reason = spec.unreadable.get("parsed", "unknown reason")
            fix = (
                f"regenerate it: {regenerate_command(spec.path)}"
                if _nvidia(spec)
                else "fix or remove it"
            )
            yield _finding(
                Severity.FAIL if _nvidia(spec) else Severity.WARN,
                f"CDI spec {spec.path} could not be read ({reason}): container engines cannot "
                f"use it; {fix}",
                spec.path if _nvidia(spec) else None,
                path=spec.path,
                reason=reason,
            )
            continue
        if not _nvidia(spec):
            continue
        named = set(spec.driver_versions)
        if spec.host_driver_version:
            named.add(spec.host_driver_version)
        stale = sorted(v for v in named if installed is not None and v != installed)
        missing = spec.missing_count or 0
        if stale:
            example = spec.driver_versions.get(stale[0], f"--host-driver-version={stale[0]}")
            yield _finding(
                Severity.FAIL,
                f"CDI spec {spec.path} was generated for driver {', '.join(stale)} but driver "
                f"{installed} is installed ({source}): it mounts {example}"
                + (
                    f" ({missing} of {spec.mount_count} mounted files are missing): containers "
                    f"asking for {spec.kind} fail to start"
                    if missing
                    else f": containers asking for {spec.kind} get the old driver's libraries"
                )
                + f". Run {regenerate_command(spec.path)}",
                spec.path,
                path=spec.path,
                spec_driver=stale,
                installed=installed,
                missing_host_paths=spec.missing_host_paths,
                missing_count=missing,
            )
        elif missing:
            yield _finding(
                Severity.FAIL,
                f"CDI spec {spec.path} mounts {missing} file(s) that do not exist on the host "
                f"(first: {spec.missing_host_paths[0] if spec.missing_host_paths else '?'}); "
                f"containers asking for {spec.kind} fail. Run {regenerate_command(spec.path)}",
                spec.path,
                path=spec.path,
                missing_host_paths=spec.missing_host_paths,
                missing_count=missing,
            )
    yield from _cdi_mode(facts)


def _cdi_mode(facts: HostFacts) -> Iterable[Finding]:
    """The toolkit's runtime in `mode = "cdi"` needs an NVIDIA spec in its spec-dirs."""
    cr = facts.container_runtime
    tk = cr.toolkit if cr is not None else None
    if cr is None or tk is None:
        return
    if tk.config is None:
        reason = tk.unreadable.get("config", "")
        if not reason.startswith("not_found"):  # no config file: the toolkit's defaults apply
            yield _finding(
                Severity.WARN,
                f"NVIDIA container toolkit config {tk.config_path} could not be read ({reason})",
                None,
                path=tk.config_path,
                reason=reason,
            )
        return
    if tk.config.get("mode") != "cdi":
        return
    dirs = tk.config.get("cdi_spec_dirs") or ["/etc/cdi", "/var/run/cdi"]
    dirs = [str(d).rstrip("/") for d in dirs]
    usable = [
        s
        for s in cr.cdi or []
        if s.parsed is True and _nvidia(s) and s.path.rsplit("/", 1)[0] in dirs
    ]
    if not usable:
        yield _finding(
            Severity.FAIL,
            f"the NVIDIA container runtime is in CDI mode but no NVIDIA CDI spec is in its "
            f"spec-dirs ({', '.join(dirs)}): containers get no GPU. Run "
            f"{regenerate_command(dirs[0] + '/nvidia.yaml')}",
            dirs[0] + "/nvidia.yaml",
            spec_dirs=dirs,
        )
