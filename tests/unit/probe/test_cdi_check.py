"""The CDI check (fleet/domain/checks/cdi.py) over HostFacts, and the pin's verify step failing a
host whose CDI spec still names the driver it had before the pin."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from fleet.domain.checks import Expectations, run_checks
from fleet.domain.facts import HostFacts
from fleet.domain.matrix.loader import load_matrix
from fleet.domain.ports import HostResult
from fleet.history import open_history
from fleet.jobs.apply import pin_hosts
from fleet.probe import hostprobe as hp
from tests.unit.jobs.test_apply_job import MemoryBackend, setup
from tests.unit.probe.test_cdi_probe import golden

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "cdi"
LIB = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{}"
CMD = "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"


def spec(version: str | None = "580.95.05", path: str = "/etc/cdi/nvidia.yaml",
         **over: Any) -> dict[str, Any]:
    s: dict[str, Any] = {
        "path": path, "parsed": True, "format": "yaml", "cdi_version": "0.5.0",
        "kind": "nvidia.com/gpu", "devices": ["0", "all"], "mount_count": 30,
        "driver_versions": {version: LIB.format(version)} if version else {},
        "host_driver_version": version, "missing_host_paths": [], "missing_count": 0,
    }
    s.update(over)
    return s


def host(specs: list[dict[str, Any]] | None, driver: str | None = "580.95.05",
         config: Any = None) -> HostFacts:
    cr: dict[str, Any] = {"configured": True, "cdi": specs}
    if config is not None:
        cr["toolkit"] = {"config_path": "/etc/nvidia-container-runtime/config.toml",
                         "config": config, "version": "1.17.8"}
    return HostFacts.model_validate({
        "source": "nvml",
        "versions": {"driver_library": driver, "driver_kernel_module": driver},
        "container_runtime": cr,
    })


def cdi(facts: HostFacts) -> list[tuple[str, str, str | None]]:
    return [(f.severity.value, f.remediation, f.evidence.get("command"))
            for f in run_checks(facts, Expectations()) if f.check == "container_runtime.cdi"]


FAIL = ("fail", "fix_container_runtime", CMD)


def test_a_current_spec_passes() -> None:
    assert cdi(host([spec()])) == []


def test_no_cdi_facts_says_nothing() -> None:
    assert cdi(host(None)) == []  # nvidia-smi imports, the simulated fleet
    assert cdi(host([])) == []


def test_a_spec_for_another_driver_fails_with_the_regenerate_command() -> None:
    stale = spec("570.133.20", missing_host_paths=[LIB.format("570.133.20")], missing_count=24)
    (f,) = [f for f in run_checks(host([stale])) if f.check == "container_runtime.cdi"]
    assert (f.severity.value, f.remediation, f.evidence["command"]) == FAIL
    assert f.evidence["spec_driver"] == ["570.133.20"] and f.evidence["installed"] == "580.95.05"
    assert "570.133.20" in f.message and "580.95.05" in f.message and CMD in f.message
    assert "24 of 30" in f.message


def test_stale_even_when_the_old_files_are_still_there() -> None:
    # the old libraries left on disk: containers would mix them with the new kernel module
    assert cdi(host([spec("570.133.20")])) == [FAIL]
    # only the hook names the old version
    assert cdi(host([spec(None, host_driver_version="570.133.20")])) == [FAIL]


def test_the_spec_is_judged_against_the_user_space_library() -> None:
    # upgraded, not yet rebooted: the files on disk are 580; a 580 spec is right
    facts = HostFacts.model_validate({
        "versions": {"driver_library": "580.95.05", "driver_kernel_module": "570.133.20"},
        "container_runtime": {"cdi": [spec()]},
    })
    assert cdi(facts) == []


def test_missing_files_fail_even_for_the_installed_version() -> None:
    broken = spec(missing_host_paths=["/usr/bin/nvidia-smi"], missing_count=1)
    assert cdi(host([broken])) == [FAIL]
    assert cdi(host([broken], driver=None)) == [FAIL]  # driver unknown: the files still decide


def test_unknown_driver_and_nothing_missing_says_nothing() -> None:
    assert cdi(host([spec("570.133.20")], driver=None)) == []


def test_each_stale_spec_names_its_own_path() -> None:
    specs = [spec(), spec("570.133.20", path="/var/run/cdi/nvidia.yaml")]
    assert cdi(host(specs)) == [
        ("fail", "fix_container_runtime",
         "nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml")
    ]


def test_unreadable_specs_are_findings_not_silent_passes() -> None:
    bad = {"path": "/etc/cdi/nvidia.yaml", "parsed": {"error": "unparsable", "detail": "x"}}
    assert cdi(host([bad])) == [FAIL]
    other = {"path": "/etc/cdi/vendor.json", "parsed": {"error": "no_permission", "detail": "x"}}
    assert cdi(host([other])) == [("warn", "fix_container_runtime", None)]


def test_other_vendors_specs_are_not_judged() -> None:
    assert cdi(host([spec("123.45", kind="vendor.example.com/device")])) == []


def test_cdi_mode_needs_a_spec_in_its_spec_dirs() -> None:
    mode = {"mode": "cdi", "cdi_spec_dirs": ["/etc/cdi"]}
    assert cdi(host([], config=mode)) == [FAIL]
    assert cdi(host([spec()], config=mode)) == []
    assert cdi(host([spec(path="/var/run/cdi/nvidia.yaml")], config=mode)) == [FAIL]
    assert cdi(host([], config={"mode": "auto"})) == []
    assert cdi(host([spec(path="/var/run/cdi/nvidia.yaml")], config={"mode": "cdi"})) == []


def test_toolkit_config_unreadable_warns_missing_is_fine() -> None:
    bad = {"error": "unparsable", "detail": "line 2"}
    assert cdi(host([], config=bad)) == [("warn", "fix_container_runtime", None)]
    assert cdi(host([], config={"error": "not_found", "detail": "config.toml"})) == []


@pytest.mark.parametrize("name", ["nvidia-580.95.05.yaml", "nvidia-570.86.15.json",
                                  "truncated.yaml", "broken.json", "other-vendor.yaml"])
def test_fixture_findings_golden(name: str) -> None:
    """Each fixture as the probe reads it on a host running 580.95.05 where every file exists."""
    parsed = hp.parse_cdi_spec((DATA / name).read_text(), name)
    entry = ({"path": f"/etc/cdi/{name}", "parsed": parsed} if hp.is_err(parsed) else
             {**{k: v for k, v in parsed.items() if k != "host_paths"},
              "path": f"/etc/cdi/{name}", "parsed": True, "missing_count": 0})
    found = [f.model_dump(mode="json") for f in run_checks(host([entry]))
             if f.check == "container_runtime.cdi"]
    expected = {
        "nvidia-580.95.05.yaml": [],
        "nvidia-570.86.15.json": [("fail", "570.86.15")],
        "truncated.yaml": [("warn", None)],  # not named nvidia*: the kind is unknown
        "broken.json": [("warn", None)],
        "other-vendor.yaml": [],
    }[name]
    assert [(f["severity"], (f["evidence"].get("spec_driver") or [None])[0])
            for f in found] == expected
    golden(DATA / name, found, "findings")


class StaleCdiBackend(MemoryBackend):
    """After the pin the host's CDI spec still names the driver it had before (nobody ran
    nvidia-ctk cdi generate)."""

    def __init__(self, *args: Any, spec_driver: str) -> None:
        super().__init__(*args)
        self.spec_driver = spec_driver

    def probe(self, hosts: Sequence[str], *, since: Mapping[str, str | None] | None = None,
              ) -> dict[str, HostResult[HostFacts]]:
        out = super().probe(hosts, since=since)
        for res in out.values():
            assert res.value is not None
            raw = res.value.model_dump(by_alias=True)
            raw["container_runtime"] = {"configured": True, "cdi": [spec(self.spec_driver)]}
            res.value = HostFacts.model_validate(raw)
        return out


def test_the_pin_verify_step_fails_a_host_with_a_stale_cdi_spec(tmp_path: Path) -> None:
    matrix = load_matrix(ROOT / "matrices" / "example.yaml").matrix
    mem, golden, other = setup(matrix, n=1)
    backend = StaleCdiBackend(mem.refs, mem.installed, spec_driver=golden.driver.version)
    with open_history(str(tmp_path / "h.db")) as h:
        (res,) = pin_hosts(backend, h, matrix, {"h0": other},
                           now=lambda: datetime(2026, 11, 30, tzinfo=UTC))
    assert res.outcome == "failed", res
    assert "CDI spec /etc/cdi/nvidia.yaml" in (res.error or "")
    assert any(f.check == "container_runtime.cdi" and f.evidence["command"] == CMD
               for f in res.findings)
    # the same pin on a host whose spec is regenerated for the new driver verifies
    mem, _, _ = setup(matrix, n=1)
    fresh = StaleCdiBackend(mem.refs, mem.installed, spec_driver=other.driver.version)
    with open_history(str(tmp_path / "h2.db")) as h:
        (ok,) = pin_hosts(fresh, h, matrix, {"h0": other},
                          now=lambda: datetime(2026, 11, 30, tzinfo=UTC))
    assert ok.outcome == "changed", ok.error
