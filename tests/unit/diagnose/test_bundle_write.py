"""`fleet bundle collect -o DIR` writes a bundle into a new or empty folder only, and follows no
symlink there (issue 32, finding 10): an older capture left in DIR would be read as this
host's, and a planted symlink would turn a capture into an overwrite of another file."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.errors import BadInput
from fleet.jobs.diagnose import read_bundle, write_bundle


def test_a_new_folder_gets_exactly_the_collected_files(tmp_path: Path) -> None:
    out = tmp_path / "a" / "bundle"
    written = write_bundle({"meminfo": "MemTotal: 1 kB\n", "ps.txt": "A\n"}, out)
    assert sorted(p.name for p in written) == ["meminfo", "ps.txt"]
    assert read_bundle(out) == {"meminfo": "MemTotal: 1 kB\n", "ps.txt": "A\n"}


def test_an_empty_folder_is_used(tmp_path: Path) -> None:
    written = write_bundle({"meminfo": "MemTotal: 1 kB\n"}, tmp_path)
    assert [p.name for p in written] == ["meminfo"]


def test_a_second_collect_into_the_same_folder_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    write_bundle({"meminfo": "MemTotal: 1 kB\n", "ps.txt": "host A's processes\n"}, out)
    with pytest.raises(BadInput) as err:
        write_bundle({"meminfo": "MemTotal: 2 kB\n"}, out)  # host B, without ps.txt
    assert err.value.problems[0].field == "--output"
    assert "not empty" in err.value.problems[0].message
    # host A's capture is still whole: nothing of B was mixed in
    assert read_bundle(out)["meminfo"] == "MemTotal: 1 kB\n"


def test_a_symlinked_output_folder_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(BadInput, match="symlink"):
        write_bundle({"meminfo": "x\n"}, link)
    assert not any(real.iterdir())


def test_a_file_as_output_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("keep\n")
    with pytest.raises(BadInput, match="not a folder"):
        write_bundle({"meminfo": "x\n"}, f)
    assert f.read_text() == "keep\n"


def test_the_cli_refuses_a_non_empty_folder_before_connecting(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from tests.unit.diagnose.test_cli import fleet

    (tmp_path / "ps.txt").write_text("old\n")
    # an inventory naming a host that does not exist: the folder is refused first
    rc, _out, err = fleet(capsys, "bundle", "collect", "gpu-01", "-i", "@ssh/192.0.2.1",
                          "-o", str(tmp_path))
    assert rc == 2
    assert "--output" in err and "not empty" in err
