"""The probe's `node_tools` fact (issue 23): fleet's boot unit as it is on the host, and
NVIDIA's MIG tools (nvidia-mig-parted, nvidia-mig-manager.service and the config it applies at
boot). Fixture folders in tests/data/node-tools: a tree read as the host's `/`, and what the
probe must answer; then the fact as the controller's model reads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleet.domain import node_plan
from fleet.domain.node_facts import NodeTools
from fleet.probe import hostprobe

DATA = Path(__file__).resolve().parents[2] / "data" / "node-tools"
CASES = sorted(p.name for p in DATA.iterdir() if p.is_dir())


@pytest.mark.parametrize("case", CASES)
def test_node_tools_from_a_fixture_tree(case: str) -> None:
    got = hostprobe.probe_node_tools(hostprobe.Host(str(DATA / case / "root")))
    assert got == json.loads((DATA / case / "expected.json").read_text())
    NodeTools.model_validate(got)  # the controller's model reads it


def test_the_probe_reads_the_paths_fleet_writes() -> None:
    paths = dict(hostprobe.NODE_BOOT_FILES)
    assert paths == {"boot_unit_sha256": node_plan.BOOT_UNIT,
                     "boot_script_sha256": node_plan.BOOT_SCRIPT,
                     "mig_parted_file_sha256": node_plan.MIG_PARTED_FILE}
    assert hostprobe.NODE_BOOT_WANTS == node_plan.BOOT_WANTS


def test_selected_config_a_later_drop_in_wins_and_quoting_is_read() -> None:
    parse = hostprobe.parse_selected_config
    assert parse([]) is None
    assert parse(['[Service]\nEnvironment="MIG_PARTED_SELECTED_CONFIG=all-disabled"\n',
                  "[Service]\nEnvironment=FOO=1 MIG_PARTED_SELECTED_CONFIG=all-3g.40gb\n"]
                 ) == "all-3g.40gb"
    assert parse(['Environment="A=1" "MIG_PARTED_SELECTED_CONFIG=custom"']) == "custom"
    assert parse(["Environment=MIG_PARTED_CONFIG_FILE=/x.yaml"]) is None


def test_an_unreadable_drop_in_folder_is_unreadable_not_none(tmp_path: Path) -> None:
    unit = tmp_path / "usr/lib/systemd/system/nvidia-mig-manager.service"
    unit.parent.mkdir(parents=True)
    unit.write_text("[Unit]\n")
    (tmp_path / "etc/systemd/system").mkdir(parents=True)
    (tmp_path / "etc/systemd/system/nvidia-mig-manager.service.d").write_text("not a folder")
    got = hostprobe.probe_node_tools(hostprobe.Host(str(tmp_path)))
    tools = NodeTools.model_validate(got)
    assert tools.mig_manager_config is None and "mig_manager_config" in tools.unreadable
