"""The lab's fake NVML and fake nvidia-smi grow what `fleet diagnose` reads (processes and their
memory, a leak, CPU affinity and NUMA node, clocks and throttle reasons, power, PCIe): built
here with gcc and run through plain pynvml, their output parsed by the bundle parsers and judged
by the questions, and the lab faults of each class produce it. No root, no lab."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleet.domain.diagnose.bundle import evidence
from fleet.domain.diagnose.parse_smi import parse_smi_xml
from fleet.domain.diagnose.parse_streams import parse_dmon, parse_pmon, parse_topo
from fleet.domain.diagnose.questions import diagnose
from fleet.lab import faults as F
from fleet.lab import nvml_build
from fleet.lab.model import HostSpec

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc (fake NVML)")

SMI = Path(__file__).parents[3] / "fleet" / "lab" / "nvml" / "nvidia_smi.py"


@pytest.fixture(scope="module")
def libdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fakenvml")
    nvml_build.build(d)
    return d


@pytest.fixture
def smi(libdir: Path, tmp_path: Path):  # noqa: ANN201
    def run(state: str, *args: str) -> str:
        (tmp_path / "driver.conf").write_text("driver_version=550.54.15\n"
                                              "cuda_driver_version=12040\n")
        (tmp_path / "version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  "
                                          "550.54.15  Tue Mar  5 22:23:56 UTC 2024\n")
        (tmp_path / "state").write_text(state)
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("GPUSIM_")},
               "LD_LIBRARY_PATH": str(libdir), "GPUSIM_STATE": str(tmp_path / "state"),
               "GPUSIM_DRIVER_FILE": str(tmp_path / "driver.conf"),
               "GPUSIM_PROC_VERSION": str(tmp_path / "version")}
        cp = subprocess.run([sys.executable, str(SMI), *args], env=env, capture_output=True,
                            text=True, timeout=60, check=False)
        assert cp.returncode == 0, cp.stdout + cp.stderr
        return cp.stdout

    return run


def _state(host: HostSpec, *specs: str) -> str:
    """The state lines a lab host would have after these faults ({now}: this second)."""
    lines = {"gpu.count": "2"}
    for f in F.parse(list(specs), 2):
        e = F.effects(f, host)
        lines.update({k: v.replace("{now}", str(int(time.time()))) for k, v in e.set.items()})
    return "".join(f"{k}={v}\n" for k, v in lines.items())


@pytest.fixture
def host() -> HostSpec:
    from fleet.lab.model import PROFILES

    return HostSpec(name="h1", index=1, address="10.77.0.11", pool="p",
                    gpu_model=next(iter(PROFILES)), gpu_count=2, unit="u1")


def test_healthy_xml_parses_and_reads_healthy(smi) -> None:  # noqa: ANN001
    snap = parse_smi_xml(smi("gpu.count=2\n", "-q", "-x"))
    assert len(snap.gpus) == 2 and snap.driver == "550.54.15"
    g = snap.gpus[0]
    assert (g.pcie_gen, g.pcie_width, g.pcie_width_max) == (5, 16, 16)
    assert g.reasons == [] and g.processes == [] and g.fb_total_mib and g.clock_sm_max
    files = {"nvidia-smi-q.xml": smi("gpu.count=2\n", "-q", "-x"),
             "topo.txt": smi("gpu.count=2\n", "topo", "-m"),
             "dmon.txt": smi("gpu.count=2\n", "dmon", "-s", "pucm", "-c", "2"),
             "pmon.txt": smi("gpu.count=2\n", "pmon", "-s", "um", "-c", "2")}
    assert diagnose(evidence(files)).verdict == "healthy"


def test_processes_and_a_leak(smi) -> None:  # noqa: ANN001
    now = int(time.time())
    state = f"gpu.count=2\ngpu0.procs=4242:2048:200,4243:100\ngpu0.procs_since={now}\n"
    rows = parse_pmon(smi(state, "pmon", "-s", "um", "-c", "3"))
    leak = [r.fb_mib for r in rows if r.pid == 4242]
    steady = {r.fb_mib for r in rows if r.pid == 4243}
    assert len(leak) == 3 and leak[-1] - leak[0] >= 300 and steady == {100}
    snap = parse_smi_xml(smi(state, "-q", "-x"))
    assert {p.pid for p in snap.gpus[0].processes} == {4242, 4243}
    assert snap.gpus[0].fb_used_mib and snap.gpus[0].fb_used_mib > 2048


def test_cpu_affinity_and_numa_node(smi) -> None:  # noqa: ANN001
    t = parse_topo(smi("gpu.count=2\ngpu1.cpus=4-7\ngpu1.numa=1\n", "topo", "-m"))
    assert t[1].cpus == frozenset({4, 5, 6, 7}) and t[1].numa == 1 and t[0].numa == 0
    assert t[0].links["GPU1"] == "NV18"


def test_dmon_samples_once_a_second(smi) -> None:  # noqa: ANN001
    start = time.monotonic()
    rows = parse_dmon(smi("gpu.count=1\ngpu0.util.gpu=90\ngpu0.util.memory=40\n", "dmon", "-s",
                          "pucm", "-c", "3"))
    assert time.monotonic() - start >= 2
    assert [r.values["sm"] for r in rows] == [90, 90, 90] and rows[0].values["mem"] == 40


@pytest.mark.parametrize(("fault", "expected"), [
    ("power", "throttled"), ("pcie-downtrain:gen=3,width=8", "pcie"),
    ("gpu-leak:rate=300", "gpu_memory"), ("busy:util=95,mem=85", "memory_bound"),
])
def test_each_fault_gives_its_class(smi, host: HostSpec, fault: str, expected: str) -> None:  # noqa: ANN001
    state = _state(host, fault)
    files = {"nvidia-smi-q.xml": smi(state, "-q", "-x"),
             "dmon.txt": smi(state, "dmon", "-s", "pucm", "-c", "3"),
             "pmon.txt": smi(state, "pmon", "-s", "um", "-c", "3")}
    d = diagnose(evidence(files))
    assert d.verdict == expected, [f.summary for f in d.findings]


def test_far_numa_fault(smi, host: HostSpec) -> None:  # noqa: ANN001
    state = _state(host, f"far-numa:pid={os.getpid()},cpus=1,node=1")
    me = os.getpid()
    files = {"nvidia-smi-q.xml": smi(state, "-q", "-x"), "topo.txt": smi(state, "topo", "-m"),
             "ps.txt": f"  PID PSR %CPU RSS COMMAND\n {me} 0 1.0 1000 python3 -m pytest\n"}
    d = diagnose(evidence(files))
    assert d.verdict == "numa", [f.summary for f in d.findings]


def test_fault_parameters_checked() -> None:
    from fleet.errors import BadInput

    with pytest.raises(BadInput, match="cpus must be N or N-M"):
        F.parse(["far-numa:cpus=0;reboot"])
    with pytest.raises(BadInput, match="pid must be a number"):
        F.parse(["gpu-leak:pid=x"])
