"""Inventory files in pyinfra's format, loaded without importing pyinfra_cli."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fleet.errors import BadInput
from fleet.remote.inventory import load_inventory_file


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_groups_host_data_and_group_data(tmp_path: Path) -> None:
    inv = write(tmp_path / "prod.py", (
        "import os\n"
        "_helper = ['ignored']\n"
        "canary = [('gpu-01', {'gpu_model': 'H100'})]\n"
        "wave1 = (['gpu-02', 'gpu-03'], {'wave': 1})\n"
    ))
    write(tmp_path / "group_data" / "all.py", "ssh_user = 'ops'\n")
    write(tmp_path / "group_data" / "canary.py", "from os import path\nbake = 5\n")
    inventory = load_inventory_file(inv)
    names = sorted(h.name for h in inventory)
    assert names == ["gpu-01", "gpu-02", "gpu-03"]
    g1, g2 = inventory.get_host("gpu-01"), inventory.get_host("gpu-02")
    assert g1.data.gpu_model == "H100" and g1.data.bake == 5 and g1.data.ssh_user == "ops"
    assert g2.data.wave == 1 and g2.data.get("bake") is None
    assert "path" not in g1.data.dict()  # imported names are not data
    assert {"canary", "prod"} <= set(g1.groups)


def test_does_not_monkey_patch(tmp_path: Path) -> None:
    load_inventory_file(write(tmp_path / "i.py", "hosts = ['a']\n"))
    assert "pyinfra_cli" not in sys.modules


def test_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(BadInput) as e:
        load_inventory_file(write(tmp_path / "bad.py", "hosts = [\n"))
    assert e.value.problems[0].file.endswith("bad.py") and e.value.problems[0].line == 1
    with pytest.raises(BadInput, match="no hosts"):
        load_inventory_file(write(tmp_path / "empty.py", "x = 1\n"))
    with pytest.raises(BadInput, match="no such inventory"):
        load_inventory_file(tmp_path / "missing.py")
