"""The lab's fake nvidia-mig-parted (fleet/lab/nvml/nvidia_mig_parted.py) on the fake NVML, no
lab: it applies the mig-parted file fleet writes (`node_plan.mig_parted_file`) as the real tool
walks it, the probe then reads the layout through NVML, a second apply changes nothing, and what
the real tool refuses (an unknown profile, an unknown field, a missing config) it refuses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fleet.domain.matrix.profiles import NodeProfile
from fleet.domain.node_plan import mig_parted_file
from fleet.lab import faults as F
from fleet.lab import gpustate
from tests.unit.lab.test_node_state import Gpu, _host
from tests.unit.lab.test_node_state import libdir as libdir  # noqa: F401 (fixture)

PARTED = Path(gpustate.__file__).parent / "nvml" / "nvidia_mig_parted.py"
LAYOUT = {"config": "halves", "layout": {"version": "v1", "mig-configs": {"halves": [
    {"devices": [5], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
    {"devices": [0, 1, 2, 3, 4, 6, 7], "mig-enabled": False}]}}}


def parted(g: Gpu, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    cp = subprocess.run([sys.executable, str(PARTED), *args], env=g.env, capture_output=True,
                        text=True, timeout=60, check=False)
    assert (cp.returncode == 0) == ok, cp.stdout + cp.stderr
    return cp


def test_fleets_layout_file_is_applied_once_and_asserted(tmp_path: Path, libdir: Path) -> None:
    g = Gpu(tmp_path / "root", libdir, _host("H100"))
    text = mig_parted_file(NodeProfile.model_validate({"mig": LAYOUT}))
    assert text is not None
    f = tmp_path / "mig.yaml"
    f.write_text(text)
    parted(g, "assert", "-f", str(f), "-c", "halves", ok=False)  # not applied yet
    assert "applied successfully" in parted(g, "apply", "-f", str(f), "-c", "halves").stdout
    nv = g.nvml()
    assert nv[5]["mig_mode_current"] is True and [nv[i]["mig_mode_current"] for i in
                                                  (0, 7)] == [False, False]
    assert [d["profile"] for d in nv[5]["mig_devices"]] == ["3g.40gb", "3g.40gb"]
    parted(g, "assert", "-f", str(f), "-c", "halves")
    before = (g.root / "var/lib/gpusim/state").read_text()
    parted(g, "apply", "-f", str(f), "-c", "halves")
    assert (g.root / "var/lib/gpusim/state").read_text() == before  # nothing to change
    g.reboot()  # instances gone, MIG mode kept: the boot unit's apply puts them back
    parted(g, "apply", "-f", str(f), "-c", "halves")
    assert [d["profile"] for d in g.nvml()[5]["mig_devices"]] == ["3g.40gb", "3g.40gb"]


def test_overlapping_entries_apply_in_order_as_the_real_tool_walks_them(
        tmp_path: Path, libdir: Path) -> None:
    """mig-parted applies every entry to every GPU it matches: an `all` entry after one for GPU
    5 turns GPU 5's MIG mode off again, and the config step then fails."""
    g = Gpu(tmp_path / "root", libdir, _host("H100"))
    f = tmp_path / "mig.yaml"
    f.write_text(json.dumps({"version": "v1", "mig-configs": {"x": [
        {"devices": [5], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        {"devices": "all", "mig-enabled": False}]}}))
    out = parted(g, "apply", "-f", str(f), "-c", "x", ok=False).stderr
    assert "MIG mode disabled" in out and g.nvml()[5]["mig_mode_current"] is False


def test_what_the_real_tool_refuses_is_refused(tmp_path: Path, libdir: Path) -> None:
    g = Gpu(tmp_path / "root", libdir, _host("H100"))
    f = tmp_path / "mig.yaml"
    cases = [
        ({"version": "v2", "mig-configs": {}}, "unknown version: v2"),
        ({"version": "v1", "mig-configs": {"x": [{"devices": "all"}]}},
         "missing required field: mig-enabled"),
        ({"version": "v1", "mig-configs": {"x": [
            {"devices": "all", "mig-enabled": False, "mig-devices": {"1g.10gb": 1}}]}},
         "MIG devices included when 'mig-enabled' is false"),
        ({"version": "v1", "mig-configs": {"x": [
            {"devices": "all", "mig-enabled": False, "layout": 1}]}}, "unexpected field: layout"),
    ]
    for doc, message in cases:
        f.write_text(json.dumps(doc))
        assert message in parted(g, "apply", "-f", str(f), "-c", "x", ok=False).stderr, doc
    f.write_text(json.dumps({"version": "v1", "mig-configs": {"x": [
        {"devices": "all", "mig-enabled": False}]}}))
    assert "selected mig-config not present: y" in parted(
        g, "apply", "-f", str(f), "-c", "y", ok=False).stderr
    assert all(d["mig_mode_current"] is False for d in g.nvml())  # nothing applied
    f.write_text(json.dumps({"version": "v1", "mig-configs": {"x": [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}]}}))
    out = parted(g, "apply", "-f", str(f), "-c", "x", ok=False).stderr
    assert "invalid MIG profile '1g.5gb'" in out  # an A100-40GB profile, not an H100 80GB one
    nv = g.nvml()[0]  # as the real tool: the mode step ran, the config step refused
    assert nv["mig_mode_current"] is True and nv["mig_devices"] == []


def test_the_mig_parted_fault_installs_it_and_lab_reset_removes_it() -> None:
    e = F.effects(F.parse(["mig-parted"])[0], _host("H100"))
    assert e.files == {gpustate.MIG_PARTED_BIN: PARTED.read_text()}
    assert gpustate.MIG_PARTED_BIN in F.FAULT_FILES
