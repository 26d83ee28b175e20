"""A file that is not UTF-8 is reported at the line and column of its first bad byte, never as a
byte offset or an internal error, whichever loader reads it (issue 28)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleet.domain.utf8 import decode_utf8, where_not_utf8
from fleet.errors import BadInput, Problem

LATIN1 = "café".encode("latin-1")  # 0xe9 where UTF-8 expects a continuation byte


def the_problem(call: object, *args: object) -> Problem:
    with pytest.raises(BadInput) as info:
        call(*args)  # type: ignore[operator]
    [problem] = [p for p in info.value.problems if "UTF-8" in p.message]
    return problem


def test_line_and_column_count_characters_not_bytes() -> None:
    data = "ü = 1\nnäme: ö ".encode() + b"\xff rest\n"
    start = data.index(b"\xff")
    assert where_not_utf8(data, start) == (2, 9)  # 'näme: ö ' is 8 characters, 10 bytes
    problem = the_problem(decode_utf8, data, "f.yaml")
    assert (problem.file, problem.line) == ("f.yaml", 2)
    assert "byte 0xff at column 9" in problem.message and "position" not in problem.message
    assert decode_utf8("ünïcode".encode(), "f") == "ünïcode"


def test_first_line_and_offset() -> None:
    assert where_not_utf8(b"\xfe", 0) == (1, 1)
    problem = the_problem(lambda: decode_utf8(b"ab\xc3", "t.jsonl", line_offset=41))
    assert problem.line == 42 and "column 3" in problem.message


def test_matrix(tmp_path: Path) -> None:
    from fleet.domain.matrix.loader import load_matrix

    path = tmp_path / "m.yaml"
    path.write_bytes(b"schema_version: 1\n# " + LATIN1 + b"\nreleases: []\n")
    problem = the_problem(load_matrix, path)
    assert (problem.file, problem.line) == (str(path), 2)
    assert "byte 0xe9 at column 6" in problem.message


def test_mig_layout_beside_the_matrix(tmp_path: Path) -> None:
    from fleet.domain.matrix.loader import load_matrix

    example = Path(__file__).parents[2] / "matrices" / "example.yaml"
    (tmp_path / "m.yaml").write_text(example.read_text() + (
        "profiles:\n  train:\n    mig: {config: c, file: mig.yaml}\n"))
    (tmp_path / "mig.yaml").write_bytes(b"version: v1\n\nmig-configs: {" + LATIN1 + b": []}\n")
    problem = the_problem(load_matrix, tmp_path / "m.yaml")
    assert (problem.file, problem.line) == (str(tmp_path / "mig.yaml"), 3)
    assert "column 18" in problem.message


def test_inventory_and_its_group_data(tmp_path: Path) -> None:
    from fleet.remote.inventory import load_inventory_file

    inv = tmp_path / "prod.py"
    inv.write_bytes(b"h100 = [\n    'gpu-01',  # " + LATIN1 + b"\n]\n")
    problem = the_problem(load_inventory_file, inv)
    assert (problem.file, problem.line) == (str(inv), 2) and "column 21" in problem.message
    inv.write_text("h100 = ['gpu-01']\n")
    (tmp_path / "group_data").mkdir()
    data = tmp_path / "group_data" / "h100.py"
    data.write_bytes(b"unit = 'r1'\nx = '" + LATIN1 + b"'\n")
    problem = the_problem(load_inventory_file, inv)
    assert (problem.file, problem.line) == (str(data), 2) and "column 9" in problem.message


def test_simulation_spec(tmp_path: Path) -> None:
    from fleet.sim.model import SimSpec

    path = tmp_path / "s.yaml"
    path.write_bytes(b"pools:\n  " + LATIN1 + b": {hosts: 1}\n")
    problem = the_problem(SimSpec.load, path)
    assert (problem.file, problem.line) == (str(path), 2) and "column 6" in problem.message


def test_bench_samples(tmp_path: Path) -> None:
    from fleet.cli.bench_cmd import load_samples

    path = tmp_path / "s.json"
    path.write_bytes(b'{"latency_ms": [1, 2],\n "' + LATIN1 + b'": [1]}\n')
    problem = the_problem(load_samples, path)
    assert (problem.file, problem.line) == (str(path), 2) and "column 6" in problem.message


def test_a_replay_trace_is_refused_not_replaced(tmp_path: Path) -> None:
    """The trace was decoded with errors='replace': the replay would have sent U+FFFD."""
    from fleet.cli.bench_cmd import _read_trace

    path = tmp_path / "t.jsonl"
    good = json.dumps({"t": 0, "method": "GET", "path": "/a"}).encode()
    path.write_bytes(good + b"\n" + good.replace(b"/a", b"/" + LATIN1) + b"\n")
    problem = the_problem(_read_trace, path)
    assert (problem.file, problem.line) == (str(path), 2)
    assert "column" in problem.message
