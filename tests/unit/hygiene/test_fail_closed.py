"""The weekly audit fails closed: what it cannot read is never conformant or healthy.

Issue 31, defects 1 and 2: a host whose running driver cannot be read, a GPU NVML cannot open,
NVML unable to count its GPUs, ECC switched off, an unreadable kernel log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleet.domain.drift import DriftInput, audit_host
from fleet.domain.facts import HostFacts
from fleet.errors import ExitCode
from fleet.history import open_history
from fleet.jobs.hygiene import run_hygiene
from tests.unit.hygiene.fakes import (
    NOW,
    FakeBackend,
    FakeHost,
    FakeScheduler,
    example_matrix,
    fleet,
)


def _doc(host: FakeHost) -> dict[str, Any]:
    return host.facts().model_dump(mode="json", by_alias=True)


def _driver_not_loaded(host: FakeHost) -> HostFacts:
    d = _doc(host)
    d["source"] = "none"
    d["source_errors"] = {"nvml": {"error": "driver_not_loaded"}}
    d["versions"]["driver_library"] = {"error": "not_available", "detail": "no NVML"}
    d["versions"]["driver_kernel_module"] = {"error": "not_found",
                                             "detail": "/proc/driver/nvidia/version"}
    d["gpus"], d["gpu_count"] = [], None
    return HostFacts.model_validate(d)


def test_a_host_with_no_driver_loaded_is_not_conformant() -> None:
    m = example_matrix()
    h = fleet(m, {"h100": 1})[0]
    verdict = audit_host(DriftInput(h.name, "h100", True, _driver_not_loaded(h)), m)
    assert not verdict.conformant
    loaded = [d for d in verdict.differences if d.component == "driver (loaded)"]
    assert loaded and "not_found" in loaded[0].have and "not_available" in loaded[0].have
    plain = audit_host(DriftInput(h.name, "h100", True, h.facts()), m)
    assert plain.conformant, plain.differences  # the same host with its driver read passes


def test_failing_health_checks_make_the_run_exit_1(tmp_path: Path) -> None:
    m = example_matrix()
    hosts = fleet(m, {"h100": 3})
    history = open_history(str(tmp_path / "h.db"))
    clean = run_hygiene(FakeBackend(hosts), FakeScheduler(), history, m, now=NOW, judge=None,
                        benchmark=False)
    assert clean.exit_code == ExitCode.OK, clean.problems()
    hosts[0].counters[0]["temperature_c"] = 200  # a failing check, no drift, no trend
    report = run_hygiene(FakeBackend(hosts), FakeScheduler(), history, m, now=NOW, judge=None,
                         benchmark=False)
    assert not report.non_conformant
    assert report.exit_code == ExitCode.PROBLEMS
    assert any("gpu.temperature" in p and hosts[0].name in p for p in report.problems())


def test_the_driver_not_loaded_run_exits_1(tmp_path: Path) -> None:
    m = example_matrix()
    hosts = fleet(m, {"h100": 3})
    broken = hosts[0]
    broken.facts = lambda: _driver_not_loaded(FakeHost(broken.name, broken.pool,  # type: ignore[method-assign]
                                                       broken.release))
    report = run_hygiene(FakeBackend(hosts), FakeScheduler(), open_history(str(tmp_path / "h.db")),
                         m, now=NOW, judge=None, benchmark=False)
    assert [d.host for d in report.non_conformant] == [broken.name]
    assert report.exit_code == ExitCode.PROBLEMS
