"""The repo generator (control fields, scripts) and fault parsing: pure, no root."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fleet.errors import BadInput
from fleet.lab import faults as F
from fleet.lab import repo
from fleet.lab.model import plan_hosts, pools_for
from fleet.lab.perf import parse_perf

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class Spec:
    name: str
    version: str
    component: str


@dataclass
class Drv:
    version: str
    flavor: str = "proprietary"


@dataclass
class Rel:
    """A stand-in with the shape of fleet.domain.matrix.models.Release."""

    name: str
    driver: Drv
    cuda: str
    extra: list[Spec] = field(default_factory=list)

    @property
    def branch(self) -> str:
        return self.driver.version.split(".")[0]

    def packages(self, os_family: str) -> list[Spec]:
        mm = self.cuda.split(".")
        return [
            Spec(f"nvidia-driver-{self.branch}", self.driver.version, "driver"),
            Spec(f"cuda-toolkit-{mm[0]}-{mm[1]}", self.cuda, "cuda"),
            *self.extra,
        ]


RELS = [
    Rel("r550", Drv("550.54.15"), "12.4", [Spec("datacenter-gpu-manager", "3.3.9", "dcgm")]),
    Rel("r550b", Drv("550.90.07"), "12.4"),
    Rel("r555", Drv("555.42.02"), "12.5", [Spec("datacenter-gpu-manager", "3.3.9", "dcgm")]),
]


def test_driver_package_fields() -> None:
    pkgs = repo.plan_packages(RELS, {"r555": repo.Perf(0.75, 0.05)}, b"ELF")
    by = {(p.name, p.version): p for p in pkgs}
    d = by[("nvidia-driver-555", "555.42.02-1")]
    c = d.control
    assert c["Provides"] == "nvidia-driver (= 555.42.02-1), libnvidia-ml1"
    assert c["Conflicts"] == "nvidia-driver" and c["Replaces"] == "nvidia-driver"
    conf = d.files["usr/share/gpusim/driver.conf"][0]
    assert isinstance(conf, str)
    assert "driver_version=555.42.02\n" in conf and "cuda_driver_version=12050\n" in conf
    assert "perf_factor=0.75\n" in conf and "release=r555\n" in conf
    assert d.symlinks["usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"] == "libnvidia-ml.so.555.42.02"
    assert "module.pending" in d.scripts["postinst"] and "ldconfig" in d.scripts["postinst"]
    assert "555.42.02" in d.scripts["postrm"]


def test_shared_packages_once_with_every_release() -> None:
    pkgs = repo.plan_packages(RELS)
    cuda = [p for p in pkgs if p.name == "cuda-toolkit-12-4"]
    assert len(cuda) == 1 and cuda[0].releases == ["r550", "r550b"]
    dcgm = [p for p in pkgs if p.name == "datacenter-gpu-manager"]
    assert len(dcgm) == 1 and dcgm[0].releases == ["r550", "r555"]
    # DCGM 3 as NVIDIA ships it: epoch 1, no revision; the file name leaves the epoch out
    assert dcgm[0].version == "1:3.3.9"
    assert dcgm[0].deb_name == "datacenter-gpu-manager_3.3.9_amd64.deb"
    assert len({p.deb_name for p in pkgs}) == len(pkgs)


def test_unsafe_versions_are_refused() -> None:
    bad = Rel("x", Drv("550.54.15; rm -rf /"), "12.4")
    with pytest.raises(BadInput):
        repo.plan_packages([bad])


def test_real_matrix_plans_branch_packages() -> None:
    from fleet.domain.matrix.loader import load_matrix

    m = load_matrix(ROOT / "matrices" / "example.yaml").matrix
    pkgs = repo.plan_packages(m.releases)
    drivers = [p for p in pkgs if "Conflicts" in p.control]
    assert drivers and all(p.version.endswith("-1") for p in drivers)
    by = {p.name: p.version for p in pkgs}
    # NVIDIA's epochs and revisions (fleet/data/nvidia/packages.yaml), DCGM 4 under its names
    assert by["datacenter-gpu-manager-4-core"].startswith("1:")
    assert by["datacenter-gpu-manager-4-cuda12"] == "1:4.1.1-1"
    assert by["tensorrt"].startswith("10.9.0.34-1+cuda12.8")
    assert "datacenter-gpu-manager" not in by
    for rel in m.releases:
        first = rel.packages("debian")[0]
        assert any(p.name == first.name and p.upstream == first.version for p in drivers)


@pytest.mark.skipif(
    shutil.which("dpkg-scanpackages") is None or shutil.which("apt-ftparchive") is None,
    reason="needs dpkg-dev and apt-utils",
)
def test_build_repo_indexes_every_version(tmp_path: Path) -> None:
    out = repo.build_repo(repo.plan_packages(RELS, nvml_lib=b"\x7fELF"), tmp_path / "repo")
    text = (out / "Packages").read_text()
    assert text.count("Package: nvidia-driver-550\n") == 2, "--multiversion keeps both"
    assert "Release" in {p.name for p in out.iterdir()}
    info = subprocess.run(
        ["dpkg-deb", "-f", str(out / "nvidia-driver-555_555.42.02-1_amd64.deb"), "Conflicts"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert info.stdout.strip() == "nvidia-driver"


def test_fault_parsing_reports_every_problem() -> None:
    with pytest.raises(BadInput) as exc:
        F.parse(
            ["nope", "ecc-corrected:gpu=x", "xid:colour=red", "ecc-corrected:gpu=8", "bad key=1"],
            gpu_count=8,
        )
    assert len(exc.value.problems) == 5
    ok = F.parse(["ecc-corrected", "xid:gpu=2,code=79", "gpu0.temp=90"], gpu_count=8)
    assert [f.name for f in ok] == ["ecc-corrected", "xid", "raw"]
    assert ok[0].params == {"gpu": "0", "count": "10"}


def test_fault_effects_use_real_formats() -> None:
    host = plan_hosts(3, "netns")[0]
    e = F.effects(F.Fault("xid", {"gpu": "2", "code": "79"}), host)
    assert e.log == [
        "NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus."
    ]
    e = F.effects(F.Fault("aer-corrected", {"gpu": "0", "count": "3"}), host)
    assert ("0000:17:00.0", "aer_dev_correctable", "TOTAL_ERR_COR", 3) in e.aer
    from datetime import UTC, datetime

    line = F.syslog_line(datetime(2024, 3, 5, 7, 8, 9, tzinfo=UTC), "lab-h1", 123.4567891, "x")
    assert line == "Mar  5 07:08:09 lab-h1 kernel: [  123.456789] x"
    assert (
        F.parse_aer_file(F.aer_file({"RxErr": 2, "TOTAL_ERR_COR": 2}, "aer_dev_correctable"))[
            "TOTAL_ERR_COR"
        ]
        == 2
    )


def test_pools_and_gpu_mix() -> None:
    hosts = plan_hosts(8, "netns")
    assert [h.wave for h in hosts][:2] == ["canary", "wave1"]
    assert [h.pool for h in hosts][:2] == ["canary", "wave1"]  # no matrix pools: the wave
    assert {h.gpu_model for h in hosts} == {"H100", "A100", "L40S"}
    assert [h.gpu_count for h in hosts if h.gpu_model == "L40S"][0] == 4
    assert len(set(h.address for h in plan_hosts(50, "loopback"))) == 50
    assert pools_for(50).count("canary") == 2


def test_perf_flags() -> None:
    assert parse_perf(["r570=0.75:0.03"])["r570"] == repo.Perf(0.75, 0.03)
    with pytest.raises(BadInput):
        parse_perf(["r570", "x=0", "y=1:5"])


def test_hosts_land_in_the_matrix_pool_of_their_gpu_model() -> None:
    pools = {"h100-canary": ("H100", True), "h100": ("H100", False), "a100": ("A100", False),
             "l40s": ("L40S", False)}
    hosts = plan_hosts(8, "netns", pools)
    by_model: dict[str, list[str]] = {}
    for h in hosts:
        by_model.setdefault(h.gpu_model, []).append(h.pool)
    assert by_model["H100"][0] == "h100-canary"
    assert set(by_model["H100"][1:]) == {"h100"}
    assert set(by_model["A100"]) == {"a100"} and set(by_model["L40S"]) == {"l40s"}
