"""The fake NVML through plain pynvml on the controller: no root, no lab.

Each check runs in a fresh interpreter with LD_LIBRARY_PATH pointing at the freshly built library,
so pynvml finds it by soname exactly as on a lab host (where ldconfig registers it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fleet.lab import nvml_build

pytestmark = pytest.mark.skipif(
    shutil.which("gcc") is None, reason="needs gcc to build the fake NVML"
)

PROC_VERSION = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  {v}  Tue Mar  5 22:23:56 UTC 2024\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
)


@pytest.fixture(scope="module")
def libdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fakenvml")
    nvml_build.build(d)
    return d


@pytest.fixture
def sim(libdir: Path, tmp_path: Path):
    """Write driver/module/state files and run a pynvml snippet against them; returns its JSON."""

    def go(
        code: str,
        *,
        lib: str | None = "550.54.15",
        module: str | None = "550.54.15",
        state: str = "gpu.count=2\n",
        cuda: int = 12040,
    ) -> object:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSIM_")}
        drv = tmp_path / "driver.conf"
        drv.unlink(missing_ok=True)
        if lib is not None:
            drv.write_text(f"driver_version={lib}\ncuda_driver_version={cuda}\n")
        proc = tmp_path / "version"
        proc.unlink(missing_ok=True)
        if module is not None:
            proc.write_text(PROC_VERSION.format(v=module))
        (tmp_path / "state").write_text(state)
        env.update(
            LD_LIBRARY_PATH=str(libdir),
            GPUSIM_DRIVER_FILE=str(drv),
            GPUSIM_PROC_VERSION=str(proc),
            GPUSIM_STATE=str(tmp_path / "state"),
        )
        prog = "import json, os, pynvml as n\n" + textwrap.dedent(code)
        cp = subprocess.run(
            [sys.executable, "-c", prog],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert cp.returncode == 0, cp.stderr
        return json.loads(cp.stdout)

    return go


def test_library_exports_what_pynvml_calls(libdir: Path) -> None:
    syms = nvml_build.exported_symbols(libdir / "libnvidia-ml.so.1")
    for name in [
        "nvmlInitWithFlags",
        "nvmlInit_v2",
        "nvmlShutdown",
        "nvmlErrorString",
        "nvmlSystemGetDriverVersion",
        "nvmlSystemGetCudaDriverVersion_v2",
        "nvmlSystemGetNVMLVersion",
        "nvmlDeviceGetCount_v2",
        "nvmlDeviceGetHandleByIndex_v2",
        "nvmlDeviceGetPciInfo_v3",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetRetiredPages_v2",
        "nvmlDeviceGetTemperatureV",
        "nvmlDeviceGetMemoryInfo_v2",
        "nvmlDeviceGetPcieReplayCounter",
    ]:
        assert name in syms, name
    assert not any(s.startswith("kv_") or s == "reload" for s in syms), "internals leak"


def test_every_probe_field_reads_through_pynvml(sim) -> None:
    out = sim(
        """
        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(1)
        pci = n.nvmlDeviceGetPciInfo(h)
        rr = n.nvmlDeviceGetRemappedRows(h)
        mem = n.nvmlDeviceGetMemoryInfo(h)
        u = n.nvmlDeviceGetUtilizationRates(h)
        r = dict(
          driver=n.nvmlSystemGetDriverVersion(), cuda=n.nvmlSystemGetCudaDriverVersion_v2(),
          nvml=n.nvmlSystemGetNVMLVersion(), count=n.nvmlDeviceGetCount(),
          name=n.nvmlDeviceGetName(h), uuid=n.nvmlDeviceGetUUID(h),
          serial=n.nvmlDeviceGetSerial(h), bus=pci.busId,
          gen=[n.nvmlDeviceGetCurrPcieLinkGeneration(h),
               n.nvmlDeviceGetMaxPcieLinkGeneration(h)],
          width=[n.nvmlDeviceGetCurrPcieLinkWidth(h), n.nvmlDeviceGetMaxPcieLinkWidth(h)],
          replay=n.nvmlDeviceGetPcieReplayCounter(h),
          sm=n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
          smmax=n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM),
          reasons=n.nvmlDeviceGetCurrentClocksEventReasons(h),
          throttle=n.nvmlDeviceGetCurrentClocksThrottleReasons(h),
          temp=n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
          tempv=n.nvmlDeviceGetTemperatureV(h, n.NVML_TEMPERATURE_GPU),
          power=n.nvmlDeviceGetPowerUsage(h), limit=n.nvmlDeviceGetEnforcedPowerLimit(h),
          mlimit=n.nvmlDeviceGetPowerManagementLimit(h),
          ecc=n.nvmlDeviceGetEccMode(h),
          sbe=n.nvmlDeviceGetTotalEccErrors(
              h, n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_VOLATILE_ECC),
          dbe_agg=n.nvmlDeviceGetTotalEccErrors(
              h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_AGGREGATE_ECC),
          memerr=n.nvmlDeviceGetMemoryErrorCounter(
              h, n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_VOLATILE_ECC,
              n.NVML_MEMORY_LOCATION_DEVICE_MEMORY),
          retired=n.nvmlDeviceGetRetiredPages_v2(
              h, n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
          retired_v1=n.nvmlDeviceGetRetiredPages(
              h, n.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
          retired_pending=n.nvmlDeviceGetRetiredPagesPendingStatus(h),
          remap=[rr[0], rr[1], rr[2], rr[3]], mig=n.nvmlDeviceGetMigMode(h),
          persistence=n.nvmlDeviceGetPersistenceMode(h), mem=[mem.total, mem.used, mem.free],
          util=[u.gpu, u.memory], arch=n.nvmlDeviceGetArchitecture(h),
          brand=n.nvmlDeviceGetBrand(h),
          minor=n.nvmlDeviceGetMinorNumber(h), part=n.nvmlDeviceGetBoardPartNumber(h),
          byuuid=n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByUUID(n.nvmlDeviceGetUUID(h))),
        )
        n.nvmlShutdown()
        print(json.dumps(r))
    """,
        state="gpu.count=2\ngpu*.name=NVIDIA A100-SXM4-80GB\ngpu1.ecc.volatile.sbe=14\n"
        "gpu1.ecc.aggregate.dbe=2\ngpu1.retired.dbe=2\ngpu1.remapped.pending=1\n"
        "gpu1.pcie.gen.curr=3\ngpu1.throttle_reasons=0x48\ngpu1.temp=91\narch=7\n",
    )
    assert isinstance(out, dict)
    assert out["driver"] == "550.54.15" and out["cuda"] == 12040 and out["count"] == 2
    assert out["name"] == "NVIDIA A100-SXM4-80GB"
    assert out["uuid"].startswith("GPU-") and out["bus"] == "00000000:2A:00.0"
    assert out["gen"] == [3, 5] and out["width"] == [16, 16]
    assert out["reasons"] == out["throttle"] == 0x48
    assert out["temp"] == out["tempv"] == 91
    assert out["sbe"] == 14 and out["memerr"] == 14 and out["dbe_agg"] == 2
    assert len(out["retired"]) == 2 and out["retired_v1"] == []
    assert out["remap"] == [0, 0, 1, 0]
    assert out["ecc"] == [1, 1] and out["mig"] == [0, 0] and out["persistence"] == 1
    assert out["minor"] == 1 and out["byuuid"] == 1
    assert out["mem"][0] == out["mem"][1] + out["mem"][2]


def test_module_library_mismatch_until_reboot(sim) -> None:
    code = """
        try:
            n.nvmlInit(); print(json.dumps(n.nvmlSystemGetDriverVersion()))
        except n.NVMLError as e:
            print(json.dumps(type(e).__name__ + ":" + str(e.value)))
    """
    assert sim(code, lib="555.42.02", module="550.54.15") == "NVMLError_LibRmVersionMismatch:18"
    assert sim(code, lib="555.42.02", module=None) == "NVMLError_DriverNotLoaded:9"
    assert sim(code, lib="555.42.02", module="555.42.02") == "555.42.02"


def test_library_missing_is_library_not_found(tmp_path: Path) -> None:
    prog = (
        "import json, pynvml as n\n"
        "try:\n    n.nvmlInit(); print(json.dumps('ok'))\n"
        "except n.NVMLError as e:\n    print(json.dumps(type(e).__name__))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", prog],
        env={**os.environ, "LD_LIBRARY_PATH": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    )
    if "ok" in out.stdout:
        pytest.skip("this machine has a real libnvidia-ml.so.1")
    assert json.loads(out.stdout) == "NVMLError_LibraryNotFound"


def test_injected_errors_lost_gpu_and_missing_symbols(sim) -> None:
    out = sim(
        """
        n.nvmlInit()
        r = {}
        def err(f, *a):
            try:
                f(*a); return "ok"
            except n.NVMLError as e:
                return type(e).__name__
        h0 = n.nvmlDeviceGetHandleByIndex(0)
        r["lost"] = err(n.nvmlDeviceGetHandleByIndex, 1)
        r["temp"] = err(n.nvmlDeviceGetTemperature, h0, 0)
        r["fan"] = err(n.nvmlDeviceGetFanSpeed, h0)
        r["missing"] = err(n.nvmlDeviceGetBAR1MemoryInfo, h0)
        r["missing2"] = err(n.nvmlDeviceGetEncoderUtilization, h0)
        print(json.dumps(r))
    """,
        state="gpu.count=2\ngpu1.error.*=15\ngpu0.error.nvmlDeviceGetTemperature=3\n",
    )
    assert out == {
        "lost": "NVMLError_GpuIsLost",
        "temp": "NVMLError_NotSupported",
        "fan": "NVMLError_NotSupported",
        "missing": "NVMLError_FunctionNotFound",
        "missing2": "NVMLError_FunctionNotFound",
    }


def test_state_is_reread_when_it_changes(sim) -> None:
    out = sim("""
        n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0)
        a = n.nvmlDeviceGetTemperature(h, 0)
        p = os.environ["GPUSIM_STATE"]
        with open(p, "a") as f: f.write("gpu0.temp=88\\n")
        os.utime(p, ns=(1, 1))
        print(json.dumps([a, n.nvmlDeviceGetTemperature(h, 0)]))
    """)
    assert out == [34, 88]


def test_steady_ecc_growth(sim) -> None:
    out = sim(
        """
        import time
        n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0)
        print(json.dumps(n.nvmlDeviceGetTotalEccErrors(h, 0, 0)))
    """,
        state="gpu.count=1\ngpu0.ecc.volatile.sbe=5\ngpu0.ecc.volatile.sbe.per_hour=3600\n"
        f"gpu0.ecc.growth_since={int(__import__('time').time()) - 100}\n",
    )
    assert isinstance(out, int) and 100 <= out - 5 <= 110
