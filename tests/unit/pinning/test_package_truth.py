"""NVIDIA's package names and version strings (fleet/data/nvidia/packages.yaml), the matrix's
per-release overrides, and the epochs in apt pins and dnf specs (issue 14.3)."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

import pytest
import yaml

from fleet.domain.matrix import packages as P
from fleet.domain.matrix.loader import parse_matrix
from fleet.domain.matrix.models import Release
from fleet.domain.pinning import apt_preferences, dnf_guard_command, plan_pin
from fleet.errors import BadInput, Problem


def errors(text: str) -> list[Problem]:
    with pytest.raises(BadInput) as exc:
        parse_matrix(text, "m.yaml")
    return exc.value.problems


@dataclass(frozen=True)
class W:
    name: str
    version: str
    component: str


def release(**extra: object) -> Release:
    doc: dict[str, object] = {
        "name": "r580", "driver": {"version": "580.95.05", "flavor": "open"}, "cuda": "13.0.2",
        "companions": {"fabric_manager": "580.95.05", "dcgm": "4.4.1",
                       "container_toolkit": "1.18.0", "cudnn": "9.13.0.50",
                       "tensorrt": "10.13.3.9"}}
    doc.update(extra)
    return Release.model_validate(doc)


def names(rel: Release, family: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for p in rel.packages(family):  # type: ignore[arg-type]
        out.setdefault(p.component, []).append(p.name)
    return out


# ------------------------------------------------------------------------------ the data
def test_every_row_names_a_known_source_and_unverified_rows_say_why() -> None:
    doc = yaml.safe_load(resources.files("fleet.data.nvidia").joinpath("packages.yaml")
                         .read_text())
    for key, spec in doc["sources"].items():
        assert spec["edition"] and spec["cited_as"], key
        assert spec["url"] is None or spec["url"].startswith("https://"), key
    for row in doc["names"] + doc["versions"]:
        assert row["source"] in doc["sources"], row
        assert not row.get("unverified") or row.get("note"), row


def test_a_row_without_a_source_is_a_damaged_table() -> None:
    doc = yaml.safe_load(resources.files("fleet.data.nvidia").joinpath("packages.yaml")
                         .read_text())
    doc["versions"][0]["source"] = "no-such-page"
    with pytest.raises(RuntimeError, match=r"versions\[0\]"):
        P.parse(doc)


# --------------------------------------------------------------------------- default names
def test_default_names_on_apt_hosts() -> None:
    assert names(release(), "debian") == {
        "driver": ["nvidia-driver-580-open"],
        "cuda": ["cuda-toolkit-13-0"],
        "fabric_manager": ["nvidia-fabricmanager-580"],
        "dcgm": ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13"],
        "container_toolkit": ["nvidia-container-toolkit", "nvidia-container-toolkit-base",
                              "libnvidia-container-tools", "libnvidia-container1"],
        "cudnn": ["cudnn9-cuda-13", "libcudnn9-cuda-13"],
        "tensorrt": ["tensorrt"],
    }


def test_default_names_on_el_hosts() -> None:
    got = names(release(), "rhel")
    assert got["driver"] == ["nvidia-driver"]  # branch and flavor: the module stream
    assert got["fabric_manager"] == ["nvidia-fabricmanager"]  # renamed from R580 on
    r570 = release(driver={"version": "570.133.20", "flavor": "proprietary"}, cuda="12.8.1",
                   companions={"fabric_manager": "570.133.20"})
    assert names(r570, "rhel")["fabric_manager"] == ["nvidia-fabric-manager"]
    assert names(r570, "debian")["driver"] == ["nvidia-driver-570"]  # proprietary flavor


@pytest.mark.parametrize("dcgm,want", [
    ("3.3.6", ["datacenter-gpu-manager"]),
    ("4.0.0", ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13"]),
    ("4.4.1", ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13"]),
])
def test_dcgm_3_and_4_have_different_names(dcgm: str, want: list[str]) -> None:
    rel = release(companions={"dcgm": dcgm})
    assert names(rel, "debian")["dcgm"] == want == names(rel, "rhel")["dcgm"]


def test_dcgm_4_follows_the_cuda_major() -> None:
    rel = release(cuda="12.8.1", companions={"dcgm": "4.1.1", "cudnn": "9.8.0.87"})
    got = names(rel, "debian")
    assert got["dcgm"][1] == "datacenter-gpu-manager-4-cuda12"
    assert got["cudnn"] == ["cudnn9-cuda-12", "libcudnn9-cuda-12"]


# ------------------------------------------------------------------------------ overrides
def test_companion_names_are_overridden_per_release_and_os_family() -> None:
    rel = release(package_names={"dcgm": {"debian": ["datacenter-gpu-manager-4-core"]},
                                 "cudnn": {"rhel": ["libcudnn9-cuda-13"]},
                                 "driver": {"rhel": ["nvidia-driver", "nvidia-driver-cuda"]}})
    deb, el = names(rel, "debian"), names(rel, "rhel")
    assert deb["dcgm"] == ["datacenter-gpu-manager-4-core"]
    assert el["dcgm"] == ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13"]
    assert el["cudnn"] == ["libcudnn9-cuda-13"] and deb["cudnn"][0] == "cudnn9-cuda-13"
    assert el["driver"] == ["nvidia-driver", "nvidia-driver-cuda"]
    versions = {p.name: p.version for p in rel.packages("rhel")}
    assert versions["nvidia-driver-cuda"] == "580.95.05"


def test_override_of_an_unmanaged_component_is_bad_input_with_file_and_line() -> None:
    text = """schema_version: 1
releases:
  - name: r580
    driver: {version: "580.95.05", flavor: open}
    cuda: "13.0.2"
    package_names:
      tensorrt: {debian: [tensorrt]}
policy: {golden: {default: r580}}
"""
    errs = errors(text)
    assert any("package_names.tensorrt" in e.message and e.line == 3 for e in errs), errs


def test_override_with_a_bad_package_name_is_rejected() -> None:
    text = """schema_version: 1
releases:
  - name: r580
    driver: {version: "580.95.05", flavor: open}
    cuda: "13.0.2"
    companions: {dcgm: "4.4.1"}
    package_names:
      dcgm: {debian: ["dcgm; rm -rf /"]}
policy: {golden: {default: r580}}
"""
    errs = errors(text)
    assert [(e.file, e.line) for e in errs] == [("m.yaml", 8)], errs


# ------------------------------------------------------------------- versions as written
@pytest.mark.parametrize("name,upstream,pin,deb", [
    ("datacenter-gpu-manager", "3.3.6", "1:3.3.6", "1:3.3.6"),  # epoch, no revision
    ("datacenter-gpu-manager-4-core", "4.4.1", "1:4.4.1-*", "1:4.4.1-1"),
    ("datacenter-gpu-manager-4-cuda13", "4.4.1", "1:4.4.1-*", "1:4.4.1-1"),
    ("nvidia-driver-580-open", "580.95.05", "580.95.05-*", "580.95.05-1"),
    ("cuda-toolkit-13-0", "13.0.2", "13.0.2-*", "13.0.2-1"),
    ("tensorrt", "10.13.3.9", "10.13.3.9-*", "10.13.3.9-1+cuda13.0"),
    ("my-own-package", "1.2.3", "1.2.3-*", "1.2.3-1"),  # no row: no epoch
])
def test_apt_versions_carry_nvidias_epoch(name: str, upstream: str, pin: str, deb: str) -> None:
    assert P.apt_pin_version(name, upstream) == pin
    assert P.deb_version(name, upstream, {"cuda_major": "13", "cuda_minor": "0"}) == deb


@pytest.mark.parametrize("name,upstream,spec", [
    ("nvidia-driver", "580.95.05", "nvidia-driver-3:580.95.05"),
    ("datacenter-gpu-manager", "3.3.6", "datacenter-gpu-manager-1:3.3.6"),
    ("datacenter-gpu-manager-4-core", "4.4.1", "datacenter-gpu-manager-4-core-1:4.4.1"),
    ("cuda-toolkit-13-0", "13.0.2", "cuda-toolkit-13-0-13.0.2"),
])
def test_dnf_specs_carry_nvidias_epoch(name: str, upstream: str, spec: str) -> None:
    assert P.dnf_spec(name, upstream) == spec


def test_apt_pin_of_dcgm_3_names_the_epoch() -> None:
    """`Pin: version 3.3.6-*` matches no `1:3.3.6`: apt would install the newest DCGM."""
    prefs = apt_preferences([W("datacenter-gpu-manager", "3.3.6", "dcgm"),
                             W("datacenter-gpu-manager-4-core", "4.4.1", "dcgm")])
    assert "Package: datacenter-gpu-manager\nPin: version 1:3.3.6\n" in prefs
    assert "Package: datacenter-gpu-manager-4-core\nPin: version 1:4.4.1-*\n" in prefs
    assert "3.3.6-*" not in prefs


def test_dnf_plan_installs_and_locks_with_epochs() -> None:
    wanted = [W("nvidia-driver", "580.95.05", "driver"),
              W("datacenter-gpu-manager-4-core", "4.4.1", "dcgm")]
    cmds = [s.command for s in plan_pin("rhel", wanted, {}, [], {}).steps]
    assert cmds == [
        "dnf -y install nvidia-driver-3:580.95.05 datacenter-gpu-manager-4-core-1:4.4.1",
        "dnf versionlock add datacenter-gpu-manager-4-core-1:4.4.1 nvidia-driver-3:580.95.05",
        dnf_guard_command(wanted)]


def test_a_host_on_the_release_with_epochs_changes_nothing() -> None:
    wanted = [W("datacenter-gpu-manager", "3.3.6", "dcgm")]
    files = {"/etc/apt/preferences.d/fleet-nvidia.pref": apt_preferences(wanted)}
    from fleet.domain.pinning import UNATTENDED_PATH, unattended_blacklist

    files[UNATTENDED_PATH] = unattended_blacklist(wanted)
    plan = plan_pin("debian", wanted, {"datacenter-gpu-manager": "1:3.3.6"},
                    ["datacenter-gpu-manager"], files)
    assert not plan.changed
    rpm = plan_pin("rhel", wanted, {"datacenter-gpu-manager": "1:3.3.6-1.el9"},
                   ["datacenter-gpu-manager"], {})
    assert not rpm.changed


# ---------------------------------------------------------------- other releases' packages
def test_other_releases_packages_by_nvidias_naming() -> None:
    wanted = [(p.name, p.component) for p in release().packages("debian")]
    installed = ["cuda-toolkit-12-8", "cudnn9-cuda-12", "libcudnn9-cuda-12",
                 "datacenter-gpu-manager", "datacenter-gpu-manager-4-cuda12",
                 "nvidia-fabricmanager-570", "cuda-toolkit-13-0", "tensorrt", "unrelated-pkg"]
    assert P.extraneous(installed, wanted, "debian") == {
        "cuda-toolkit-12-8": "cuda", "cudnn9-cuda-12": "cudnn", "libcudnn9-cuda-12": "cudnn",
        "datacenter-gpu-manager": "dcgm", "datacenter-gpu-manager-4-cuda12": "dcgm",
        "nvidia-fabricmanager-570": "fabric_manager"}


def test_unmanaged_components_and_hand_picked_lists_are_left_alone() -> None:
    # no DCGM in the release: fleet does not touch the host's DCGM
    assert P.extraneous(["datacenter-gpu-manager"], [("cuda-toolkit-13-0", "cuda")],
                        "debian") == {}
    # an override naming only the core package: the installed -4-cuda13 is of the same DCGM
    # generation and no wanted name is a variant of it, so fleet does not guess: kept
    wanted = [("datacenter-gpu-manager-4-core", "dcgm")]
    assert P.extraneous(["datacenter-gpu-manager-4-cuda13"], wanted, "debian") == {}


def test_rollback_from_dcgm_4_to_3_purges_dcgm_4() -> None:
    wanted = [W("datacenter-gpu-manager", "3.3.6", "dcgm")]
    installed = {"datacenter-gpu-manager-4-core": "1:4.4.1-1",
                 "datacenter-gpu-manager-4-cuda13": "1:4.4.1-1"}
    plan = plan_pin("debian", wanted, installed, list(installed), {})
    assert {c.package: c.kind for c in plan.changes} == {
        "datacenter-gpu-manager": "install", "datacenter-gpu-manager-4-core": "remove",
        "datacenter-gpu-manager-4-cuda13": "remove"}
    cmds = [s.command for s in plan.steps if s.command]
    assert cmds[0] == "apt-mark unhold datacenter-gpu-manager-4-core " \
        "datacenter-gpu-manager-4-cuda13"
    assert " --purge " in cmds[-2] and cmds[-2].endswith(
        "confold datacenter-gpu-manager datacenter-gpu-manager-4-core- "
        "datacenter-gpu-manager-4-cuda13-")


def test_name_patterns_are_compiled_once_not_per_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks ask `extraneous`/`component_of` for every package of every host: the rules'
    name patterns are built once, not per call (82,030 builds in a 1,000-host rollout before,
    issue 28). The answers stay the same."""
    import re

    t = P.load()
    for r in t.names:  # built once (now, or earlier in this process)
        r.patterns()
    compiled: list[str] = []
    real = re.compile

    def counting(pattern: str, flags: int = 0) -> re.Pattern[str]:
        compiled.append(pattern)
        return real(pattern, flags)

    monkeypatch.setattr(re, "compile", counting)
    for _ in range(200):
        assert P.component_of("cuda-toolkit-12-8", "debian") == "cuda"
        assert P.component_of("libfoo", "debian") is None
        assert all(r.patterns() == r.patterns() for r in t.names)
    assert compiled == []
