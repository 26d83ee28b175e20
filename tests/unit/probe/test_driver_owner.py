"""Who manages the driver: the host's packages or the GPU Operator's container.

Both readers of /run/nvidia (the probe's `probe_driver_container` and the pyinfra fact
`DriverRoot`'s shell command, run here against the fixture trees in tests/data/driver-root)
give the same `DriverContainer`; one judge (`fleet.domain.driver_owner`) decides.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fleet.domain.driver_owner import (
    DriverContainer,
    DriverOwner,
    combine,
    from_host,
    from_node,
    parse_driver_root,
    refusal,
)
from fleet.probe.hostprobe import Host, probe_driver_container
from fleet.remote.backend import driver_refusals
from fleet.remote.facts import DriverRoot

DATA = Path(__file__).resolve().parents[2] / "data" / "driver-root"
CASES = {"operator": "gpu-operator", "preinstalled": "host", "plain": "host",
         "disagree": "unknown"}


def fact_reading(root: Path) -> DriverContainer:
    """The pyinfra fact's command, with /run/nvidia moved under `root`, through its parser."""
    cmd = DriverRoot().command().replace("/run/nvidia", str(root / "run" / "nvidia"))
    cmd = cmd.replace('= / ]', f'= {root} ]')
    r = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=10, check=True)
    return DriverRoot().process(r.stdout.splitlines())


@pytest.mark.parametrize("case", sorted(CASES))
def test_both_readers_agree_and_the_judge_names_the_owner(case: str) -> None:
    probed = DriverContainer.model_validate(probe_driver_container(Host(str(DATA / case))))
    assert fact_reading(DATA / case) == probed
    assert from_host(probed).kind == CASES[case]


def test_the_operators_tree_reads_as_its_container() -> None:
    dc = fact_reading(DATA / "operator")
    assert dc.root == "populated" and dc.entries == ["lib", "usr"]
    assert dc.marks == [".driver-ctr-ready", "driver-ready"]
    assert dc.driver_ready is not None and dc.driver_ready["IS_HOST_DRIVER"] == "false"
    owner = from_host(dc)
    assert "IS_HOST_DRIVER=false" in owner.why and ".driver-ctr-ready" in owner.why
    why = refusal(owner)
    assert why is not None and "spec.driver.version" in why and "NVIDIADriver" in why


def test_an_empty_mount_point_or_a_link_to_the_root_is_the_hosts_driver(tmp_path: Path) -> None:
    (tmp_path / "run" / "nvidia" / "driver").mkdir(parents=True)
    assert fact_reading(tmp_path).root == "empty"
    assert from_host(fact_reading(tmp_path)).kind == "host"
    (tmp_path / "run" / "nvidia" / "driver").rmdir()
    (tmp_path / "run" / "nvidia" / "driver").symlink_to(tmp_path)
    assert fact_reading(tmp_path).root == "host-root"
    probed = probe_driver_container(Host(str(tmp_path)))
    assert probed["root"] == "host-root"
    assert refusal(from_host(fact_reading(tmp_path))) is None


def test_what_cannot_be_read_is_unknown_and_refused() -> None:
    for lines in (["unreadable root"], [], ["root absent", "mark driver-ready",
                                             "unreadable driver-ready"], ["root weird"]):
        owner = from_host(parse_driver_root(lines))
        assert owner.kind == "unknown", lines
        assert "cannot tell" in (refusal(owner) or "")
    assert from_host(None).kind == "unknown"
    probed = DriverContainer.model_validate({"root": {"error": "os_error", "detail": "EIO"}})
    assert from_host(probed).kind == "unknown" and "EIO" in from_host(probed).why


def test_the_backend_refuses_operator_hosts_and_failed_readings() -> None:
    got = driver_refusals({
        "op": fact_reading(DATA / "operator"), "plain": fact_reading(DATA / "plain"),
        "broken": RuntimeError("connection dropped")})
    assert set(got) == {"op", "broken"}
    assert "GPU Operator" in got["op"] and "connection dropped" in got["broken"]


def test_the_nodes_side() -> None:
    label = "nvidia.com/gpu.deploy.driver"
    assert from_node({}, []) is None  # no operator on this cluster
    assert from_node({label: "pre-installed"}, []) == DriverOwner(
        "host", f"node label {label}=pre-installed")
    op = from_node({label: "true"}, ["gpu-operator/nvidia-driver-daemonset-x7k2p"])
    assert op is not None and op.operator and "nvidia-driver-daemonset-x7k2p" in op.why
    unk = from_node({label: "true"}, None)
    assert unk is not None and unk.kind == "unknown"
    assert from_node({label: "true"}, []) is None  # labelled, its pod not there yet
    # any side that sees the container wins; one that cannot tell beats "host"
    host = DriverOwner("host", "h")
    assert combine([host, op]).operator
    assert combine([host, unk]).kind == "unknown"
    assert combine([host, None]) == host
    assert combine([]).kind == "unknown"


def operator_host(module: str | None = "550.54.15") -> dict[str, object]:
    """A host whose driver is the GPU Operator's container: the module it loaded, no NVML on
    the host's library path, no driver packages, no CUDA toolkit."""
    from tests.unit.probe.test_checks import healthy

    return healthy(source="none", versions={
        "driver_library": {"error": "not_available", "detail": "no NVML and no nvidia-smi"},
        "driver_kernel_module": module, "kernel_module_flavor": "open",
        "packages": {"manager": "dpkg", "items": []}, "toolkits": []},
        driver_container=probe_driver_container(Host(str(DATA / "operator"))))


def test_check_judges_the_containers_driver_not_host_packages() -> None:
    from tests.unit.probe.test_checks import findings, healthy

    got = findings(operator_host())
    assert ("driver.owner", "ok", "none") in got
    assert not [f for f in got if f[0] == "release.conformance"], got  # no "not installed"
    # the same host without the operator's marks: the packages are missing
    plain = {**operator_host(), "driver_container": probe_driver_container(
        Host(str(DATA / "plain")))}
    assert ("release.conformance", "fail", "reinstall_driver") in findings(plain)
    assert findings(healthy(driver_container=probe_driver_container(
        Host(str(DATA / "plain"))))) == []


def test_a_wrong_container_driver_points_at_the_operator() -> None:
    from fleet.domain.checks import run_checks
    from fleet.domain.facts import HostFacts
    from tests.unit.probe.test_checks import EXP

    out = run_checks(HostFacts.model_validate(operator_host("535.161.08")), EXP)
    (bad,) = [f for f in out if f.check == "release.conformance"]
    assert bad.severity.value == "fail" and "spec.driver.version" in bad.message
    out = run_checks(HostFacts.model_validate(operator_host(None)), EXP)
    (bad,) = [f for f in out if f.check == "release.conformance"]
    assert "container loaded no kernel module" in bad.message and bad.remediation == "none"
