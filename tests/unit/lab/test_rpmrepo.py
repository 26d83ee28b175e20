"""The el9 lab flavor's pure parts: the RPM plan from a matrix, `--os`, and host planning."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.errors import BadInput
from fleet.lab import rpmrepo
from fleet.lab.lab import load_releases, parse_os
from fleet.lab.model import plan_hosts

MATRIX = Path(__file__).resolve().parents[2] / "integration" / "dnf" / "matrix.yaml"


def test_rpm_plan_uses_rhel_names_epochs_and_the_driver_payload() -> None:
    releases, _, _ = load_releases(MATRIX)
    rpms = rpmrepo.plan_rpms(releases, nvml_lib=b"\x7fELF fake")
    by = {(p.name, p.version): p for p in rpms}
    assert rpms[0].name == rpmrepo.SYSTEM_PACKAGE and "/bin/sh" in rpms[0].provides
    driver = by[("nvidia-driver", "580.95.05")]
    assert driver.evr == "3:580.95.05-1.el9" and driver.releases == ["r580-cuda13.0"]
    assert driver.files["usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.95.05"][0] == b"\x7fELF fake"
    assert "driver_version=580.95.05" in str(driver.files["usr/share/gpusim/driver.conf"][0])
    assert "580.95.05 > /var/lib/gpusim/module.pending" in driver.scripts["post"]
    assert "fail-install" in driver.scripts["pre"] and '"$1" = 0' in driver.scripts["postun"]
    dcgm = by[("datacenter-gpu-manager-4-core", "4.4.1")]  # DCGM 4's own name
    assert dcgm.evr == "1:4.4.1-1.el9" and dcgm.releases == ["r595-cuda13.2"]
    assert by[("datacenter-gpu-manager-4-cuda13", "4.4.1")].evr == "1:4.4.1-1.el9"
    assert by[("datacenter-gpu-manager", "3.3.9")].evr == "1:3.3.9-1.el9"  # DCGM 3, epoch 1
    cudnn = by[("cudnn9-cuda-13", "9.13.0.50")]
    assert cudnn.releases == ["r580-cuda13.0", "r595-cuda13.2"]  # shared: built once
    assert by[("cuda-toolkit-13-0", "13.0.2")].evr == "0:13.0.2-1.el9"
    spec = driver.spec(Path("/tmp/tree"))
    assert "Epoch: 3\n" in spec and "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1" in spec
    assert "Epoch" not in by[("cuda-toolkit-13-0", "13.0.2")].spec(Path("/t"))


def test_repo_file_is_unsigned_and_never_cached() -> None:
    text = rpmrepo.repo_file("http://127.0.0.1:8077/el9/")
    assert "baseurl=http://127.0.0.1:8077/el9/\n" in text
    assert "gpgcheck=0" in text and "metadata_expire=0" in text


@pytest.mark.parametrize(("spec", "n"), [("debian", 0), ("el9", 4), ("el9:1", 1), ("el9:4", 4)])
def test_os_option(spec: str, n: int) -> None:
    assert parse_os(spec, 4) == n


@pytest.mark.parametrize("spec", ["el8", "el9:0", "el9:5", "el9:x", "debian:2", ""])
def test_os_option_refuses(spec: str) -> None:
    with pytest.raises(BadInput, match="--os"):
        parse_os(spec, 4)


def test_mixed_lab_keeps_its_first_hosts_debian() -> None:
    hosts = plan_hosts(4, "loopback", el9=2)
    assert [h.os for h in hosts] == ["debian", "debian", "el9", "el9"]
    assert all(h.os == "debian" for h in plan_hosts(3, "loopback"))


def test_driver_streams_per_branch_and_the_virtual_open_stream() -> None:
    releases, _, _ = load_releases(MATRIX)
    streams = rpmrepo.driver_streams(releases, rpmrepo.plan_rpms(releases))
    assert streams["580-open"] == ["nvidia-driver-3:580.95.05-1.el9.x86_64"]
    assert len(streams["open-dkms"]) == 3 and "latest-dkms" not in streams  # every release open
    text = rpmrepo.modules_yaml(streams)
    assert text.count("document: modulemd") == 4 and '  stream: "595-open"\n' in text
