"""Inventory data of the wrong shape or type is bad input (exit 2) naming the file, the line, the
group or host and the field, every problem at once: never an internal error, never a host or a
group silently dropped (issue 28)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleet.errors import BadInput
from fleet.remote.inventory import load_inventory_file


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def problems_of(inv: Path) -> list[tuple[int | None, str | None, str]]:
    with pytest.raises(BadInput) as e:
        load_inventory_file(inv)
    return [(p.line, p.field, p.message) for p in e.value.problems]


@pytest.mark.parametrize(("data", "field", "why"), [
    ("{'unit': ['rack1']}", "unit", "expected a text, got a list"),
    ("{'unit': 3}", "unit", "expected a text, got an int"),
    ("{'gpu_model': {'a': 1}}", "gpu_model", "expected a text, got a dict"),
    ("{'gpu_count': 'eight'}", "gpu_count", "expected a whole number"),
    ("{'gpu_count': True}", "gpu_count", "expected a whole number"),
    ("{'gpu_count': -1}", "gpu_count", "0 or more"),
    ("{'ssh_port': 'abc'}", "ssh_port", "expected a port number"),
    ("{'ssh_port': 70000}", "ssh_port", "expected a port number"),
    ("{'command_timeout_s': 'abc'}", "command_timeout_s", "expected seconds"),
    ("{'command_timeout_s': 0}", "command_timeout_s", "expected seconds"),
    ("{'slurm_conf': ['/etc/slurm.conf']}", "slurm_conf", "expected a text"),
    ("{'scheduler': 1}", "scheduler", "expected a text"),
])
def test_host_data_of_the_wrong_type(tmp_path: Path, data: str, field: str, why: str) -> None:
    inv = write(tmp_path / "prod.py", f"h100 = [\n    'gpu-00',\n    ('gpu-01', {data}),\n]\n")
    [(line, got_field, message)] = problems_of(inv)
    assert (line, got_field) == (3, field)
    assert "host 'gpu-01'" in message and why in message


def test_group_data_of_the_wrong_type(tmp_path: Path) -> None:
    """pyinfra crashed reading the host's data (ValueError: dictionary update sequence)."""
    inv = write(tmp_path / "prod.py", "h100 = ['gpu-01']\n\na100 = (['gpu-02'], 'A100')\n")
    [(line, field, message)] = problems_of(inv)
    assert line == 3 and field is None
    assert "group 'a100'" in message and "(hosts, data)" in message and "a dict" in message


@pytest.mark.parametrize("group", [
    "()", "(['gpu-02'],)", "['gpu-02', None]", "[123]", "[('gpu-02',)]",
    "[('gpu-02', 'H100')]", "(['gpu-02'], {}, {})", "('gpu-02', {})",
])
def test_group_of_the_wrong_shape(tmp_path: Path, group: str) -> None:
    """pyinfra crashed (IndexError, unpacking) or silently ignored the whole group with its
    hosts (`[123]`, a None among the names): each is refused naming the group and its line."""
    inv = write(tmp_path / "prod.py", f"h100 = ['gpu-01']\na100 = {group}\n")
    [(line, field, message)] = problems_of(inv)
    assert line == 2 and field is None and "group 'a100'" in message, message


def test_group_data_file_data_of_the_wrong_type(tmp_path: Path) -> None:
    """A bad value in a group data file is reported once, at that file's line, for the group."""
    inv = write(tmp_path / "prod.py", "h100 = ['gpu-01', 'gpu-02']\n")
    data = write(tmp_path / "group_data" / "h100.py", "gpu_model = 'H100'\nunit = ['r1']\n")
    with pytest.raises(BadInput) as e:
        load_inventory_file(inv)
    [p] = e.value.problems
    assert (p.file, p.line, p.field) == (str(data), 2, "unit")
    assert p.message.startswith("group 'h100': expected a text, got a list")


def test_group_tuple_data_of_the_wrong_type(tmp_path: Path) -> None:
    inv = write(tmp_path / "prod.py", "h100 = ['gpu-01']\na100 = (['gpu-02', 'gpu-03'],"
                " {'gpu_count': '8'})\n")
    assert problems_of(inv) == [
        (2, "gpu_count", "group 'a100': expected a whole number of GPUs, got a str '8'")]


def test_every_problem_at_once(tmp_path: Path) -> None:
    inv = write(tmp_path / "prod.py", (
        "h100 = [('gpu-01', {'unit': ['r1'], 'gpu_count': 'x'})]\n"
        "a100 = (['gpu-02'], None)\n"
        "l40s = [('gpu;03', {})]\n"
    ))
    found = problems_of(inv)
    assert sorted((line or 0, field or "") for line, field, _m in found) == [
        (1, "gpu_count"), (1, "unit"), (2, ""), (3, "")], found


def test_good_data_still_loads(tmp_path: Path) -> None:
    inv = write(tmp_path / "prod.py", (
        "h100 = ([('gpu-01', {'unit': 'r1', 'gpu_count': 8, 'ssh_port': 2222,"
        " 'command_timeout_s': 1.5, 'gpu_model': 'H100'})], {'wave': 1})\n"
        "empty = []\n"
    ))
    host = load_inventory_file(inv).get_host("gpu-01")
    assert (host.data.unit, host.data.gpu_count, host.data.wave) == ("r1", 8, 1)


def test_rollout_plan_exit_2_not_internal_error(tmp_path: Path) -> None:
    """`unit` as a list ended as `internal error: TypeError: unhashable type: 'list'` (exit 3)."""
    inv = write(tmp_path / "prod.py", "h100 = [('gpu-01', {'unit': ['rack1']})]\n")
    matrix = Path(__file__).parents[3] / "matrices" / "example.yaml"
    out = subprocess.run([sys.executable, "-m", "fleet", "--db", str(tmp_path / "f.db"),
                          "rollout", "plan", "-i", str(inv), "-m", str(matrix)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120,
                         env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 2, out.stdout + out.stderr
    assert "prod.py:1: unit: host 'gpu-01'" in out.stderr and "internal" not in out.stderr
