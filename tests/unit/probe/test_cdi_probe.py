"""The probe's reading of CDI specs and the container toolkit config (tests/data/cdi, see
SOURCES.md there): golden summaries, the line reader of YAML against a real YAML parser, and
files read from a fake root (missing host files, unreadable specs)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from fleet.domain.checks import run_checks
from fleet.domain.facts import HostFacts
from fleet.lab.faults import cdi_spec
from fleet.probe import hostprobe as hp

DATA = Path(__file__).parents[2] / "data" / "cdi"
REGEN = os.environ.get("FLEET_REGEN_GOLDEN") == "1"
SPECS = sorted(
    p for p in DATA.iterdir()
    if p.suffix in (".yaml", ".json") and not p.name.endswith(".expected.json")
)
CONFIGS = sorted(p for p in DATA.iterdir() if p.suffix == ".toml")


def golden(path: Path, actual: object, kind: str = "") -> None:
    """Compare with `<input>[.kind].expected.json` (FLEET_REGEN_GOLDEN=1 rewrites it)."""
    expected = path.with_name(path.name + (f".{kind}" if kind else "") + ".expected.json")
    text = json.dumps(actual, indent=2, sort_keys=True) + "\n"
    if REGEN or not expected.exists():
        expected.write_text(text)
        if not REGEN:
            pytest.fail(f"wrote new golden {expected.name}; review it and rerun")
    assert json.loads(expected.read_text()) == json.loads(text)


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_spec_golden(path: Path) -> None:
    golden(path, hp.parse_cdi_spec(path.read_text(), path.name))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_toolkit_config_golden(path: Path) -> None:
    golden(path, hp.parse_toolkit_config(path.read_text()))


def _yaml_truth(doc: dict) -> tuple[list[str], list[str], list[str]]:
    """hostPaths, device names and /dev paths of a spec, read by PyYAML."""
    edits = [doc.get("containerEdits") or {}]
    edits += [d.get("containerEdits") or {} for d in doc.get("devices") or []]
    hosts = [m["hostPath"] for e in edits for m in e.get("mounts") or []]
    nodes = sorted({n["path"] for e in edits for n in e.get("deviceNodes") or []})
    names = [str(d["name"]) for d in doc.get("devices") or []]
    return hosts, names, nodes


@pytest.mark.parametrize(
    "text",
    [(DATA / "nvidia-580.95.05.yaml").read_text(), cdi_spec("570.133.20", 4)],
    ids=["fixture", "lab-fault"],
)
def test_line_reader_agrees_with_a_yaml_parser(text: str) -> None:
    doc = yaml.safe_load(text)
    got = hp.parse_cdi_spec(text, "nvidia.yaml")
    assert (got["host_paths"], got["devices"], got["device_nodes"]) == _yaml_truth(doc)
    assert (got["kind"], got["cdi_version"]) == (doc["kind"], str(doc["cdiVersion"]))
    # the same spec as JSON (nvidia-ctk cdi generate --format=json) reads the same
    as_json = hp.parse_cdi_spec(json.dumps(doc), "nvidia.json")
    assert {**as_json, "format": "yaml"} == got


def test_driver_versions_skip_libraries_with_their_own_version() -> None:
    got = hp.parse_cdi_spec((DATA / "nvidia-580.95.05.yaml").read_text(), "nvidia.yaml")
    assert got["driver_versions"] == {
        "580.95.05": "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.95.05"
    }
    assert "/usr/lib/x86_64-linux-gnu/libnvidia-egl-wayland.so.1.1.19" in got["host_paths"]
    assert got["host_driver_version"] == "580.95.05"


def test_toml_reader_without_tomllib_agrees_and_names_the_line() -> None:
    import tomllib

    text = (DATA / "config-default.toml").read_text()
    lite = hp._toml_lite(text)
    full = tomllib.loads(text)
    assert lite["nvidia-container-runtime.modes.cdi"] == full["nvidia-container-runtime"][
        "modes"]["cdi"]
    assert lite["nvidia-container-cli"]["load-kmods"] is True
    with pytest.raises(ValueError, match="line 3"):
        hp._toml_lite((DATA / "config-multiline.toml").read_text())
    with pytest.raises(ValueError, match="line 2"):
        hp._toml_lite((DATA / "config-broken.toml").read_text())


def test_ctk_version() -> None:
    out = "NVIDIA Container Toolkit CLI version 1.17.8\ncommit: f202b80a9b9d0db00d9b1d73c\n"
    assert hp.parse_ctk_version(out) == "1.17.8"
    assert hp.is_err(hp.parse_ctk_version("nvidia-ctk: unknown flag"))


def _root(tmp: Path, installed: str, spec_version: str) -> Path:
    lib = tmp / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / f"libnvidia-ml.so.{installed}").write_text("")
    (tmp / "usr/bin").mkdir(parents=True)
    (tmp / "usr/bin/nvidia-smi").write_text("")
    (tmp / "proc/driver/nvidia").mkdir(parents=True)
    (tmp / "proc/driver/nvidia/version").write_text(
        f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {installed}  Release Build\n"
    )
    (tmp / "etc/cdi").mkdir(parents=True)
    (tmp / "etc/cdi/nvidia.yaml").write_text(cdi_spec(spec_version, 2))
    (tmp / "var/run/cdi").mkdir(parents=True)
    (tmp / "etc/nvidia-container-runtime").mkdir(parents=True)
    (tmp / "etc/nvidia-container-runtime/config.toml").write_text(
        (DATA / "config-default.toml").read_text()
    )
    return tmp


def _cdi_findings(root: Path) -> tuple[HostFacts, list]:
    facts = HostFacts.model_validate(hp.probe(root=str(root), kernel_log="none",
                                              frameworks=False))
    return facts, [f for f in run_checks(facts) if f.check == "container_runtime.cdi"]


def test_probe_of_a_fake_root_finds_the_stale_spec(tmp_path: Path) -> None:
    facts, found = _cdi_findings(_root(tmp_path, "580.95.05", "570.133.20"))
    cr = facts.container_runtime
    assert cr is not None and cr.cdi is not None and cr.toolkit is not None
    (spec,) = cr.cdi
    assert spec.path == "/etc/cdi/nvidia.yaml" and spec.parsed is True
    assert spec.missing_host_paths == ["/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.133.20"]
    assert cr.toolkit.config == hp.parse_toolkit_config((DATA / "config-default.toml").read_text())
    assert "nvidia-ctk" in cr.toolkit.unreadable.get("version", "")  # not installed here
    assert [(f.severity.value, f.evidence["command"]) for f in found] == [
        ("fail", "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml")
    ]
    assert found[0].evidence["spec_driver"] == ["570.133.20"]


def test_probe_of_a_fake_root_with_a_current_spec_is_clean(tmp_path: Path) -> None:
    facts, found = _cdi_findings(_root(tmp_path, "580.95.05", "580.95.05"))
    assert found == []
    assert facts.container_runtime and facts.container_runtime.cdi
    assert facts.container_runtime.cdi[0].missing_count == 0


def test_unreadable_and_unparsable_specs_are_reported(tmp_path: Path) -> None:
    root = _root(tmp_path, "580.95.05", "580.95.05")
    (root / "var/run/cdi/nvidia.json").write_text((DATA / "broken.json").read_text())
    bad = root / "etc/cdi/nvidia-mig.yaml"
    bad.write_bytes(b"")
    bad.chmod(0)
    specs = hp.probe_cdi_specs(hp.Host(str(root)))
    by_path = {s["path"]: s for s in specs}
    assert by_path["/var/run/cdi/nvidia.json"]["parsed"]["error"] == "unparsable"
    expected_mig = "unparsable" if os.geteuid() == 0 else "no_permission"  # root reads mode 000
    assert by_path["/etc/cdi/nvidia-mig.yaml"]["parsed"]["error"] == expected_mig
    assert by_path["/etc/cdi/nvidia.yaml"]["parsed"] is True


def test_config_reads_the_same_without_tomllib(monkeypatch: pytest.MonkeyPatch) -> None:
    """Python < 3.11 (no tomllib) on a host: the line reader gives the same settings."""
    text = (DATA / "config-cdi-mode.toml").read_text()
    with_tomllib = hp.parse_toolkit_config(text)
    monkeypatch.setitem(sys.modules, "tomllib", None)  # import tomllib -> ImportError
    assert hp.parse_toolkit_config(text) == with_tomllib
    assert "line 3" in hp.parse_toolkit_config(
        (DATA / "config-multiline.toml").read_text())["detail"]


def test_yaml_the_line_reader_cannot_read_is_unparsable_not_clean() -> None:
    flow = "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ncontainerEdits:\n  mounts: [{hostPath: " \
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.86.15}]\n"
    got = hp.parse_cdi_spec(flow, "nvidia.yaml")
    assert got["error"] == "unparsable" and "line 4" in got["detail"]
