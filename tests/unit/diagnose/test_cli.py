"""`fleet diagnose BUNDLE_DIR`: exit codes (docs/exit-codes.md) and the one JSON document."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fleet.cli.app import run

BUNDLES = Path(__file__).parents[2] / "data" / "diagnose" / "bundles"


def fleet(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        run(list(argv))
        raise SystemExit(0)
    out, err = capsys.readouterr()
    code = info.value.code
    return (code if isinstance(code, int) else 0), out, err


@pytest.mark.parametrize(("bundle", "code", "verdict"), [
    ("healthy", 0, "healthy"), ("power-capped", 1, "throttled"), ("far-numa", 1, "numa"),
    ("host-only", 3, "could_not_judge"),
])
def test_exit_code_and_json(capsys: pytest.CaptureFixture[str], bundle: str, code: int,
                            verdict: str) -> None:
    rc, out, _ = fleet(capsys, "diagnose", str(BUNDLES / bundle), "--json")
    doc = json.loads(out)
    assert rc == code
    assert doc["schema"] == 1 and doc["verdict"] == verdict and doc["mode"] == "bundle"
    assert [q["class"] for q in doc["questions"]][:3] == ["queueing", "gpu_idle", "throttled"]


def test_human_output_names_the_finding_and_what_to_run(
        capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = fleet(capsys, "diagnose", str(BUNDLES / "pcie-downtrain"))
    assert rc == 1 and "Gen3 x8" not in err  # the findings are the result: stdout
    assert "verdict pcie" in out and "Gen3 x8" in out and "lspci -vv -s 0000:00:09.0" in out


def test_missing_folder_is_bad_input(capsys: pytest.CaptureFixture[str],
                                     tmp_path: Path) -> None:
    rc, out, _ = fleet(capsys, "diagnose", str(tmp_path / "nope"), "--json")
    assert rc == 2 and json.loads(out)["error"]["where"]["field"] == "BUNDLE_DIR"


def test_folder_without_bundle_files_is_bad_input(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    rc, _, err = fleet(capsys, "diagnose", str(tmp_path))
    assert rc == 2 and "none of the bundle's files" in err


def test_corrupt_capture_names_file_and_line(capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path) -> None:
    b = tmp_path / "b"
    shutil.copytree(BUNDLES / "healthy", b)
    (b / "meminfo").write_text("MemTotal: 100 kB\nMemAvailable: ??? kB\n")
    rc, out, _ = fleet(capsys, "diagnose", str(b), "--json")
    err = json.loads(out)["error"]
    assert rc == 2
    assert err["where"] == {"file": f"{b}/meminfo", "line": 2, "field": "MemAvailable"}


def test_non_utf8_kernel_log_is_read(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    b = tmp_path / "b"
    shutil.copytree(BUNDLES / "healthy", b)
    (b / "kernel.log").write_bytes(b"[ 1.0] firmware \xff\xfe string\n")
    rc, out, _ = fleet(capsys, "diagnose", str(b), "--json")
    assert rc == 0 and json.loads(out)["verdict"] == "healthy"


def test_live_host_not_in_inventory_is_bad_input(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    inv = tmp_path / "inv.py"
    inv.write_text("hosts = [('gpu-1', {'ssh_hostname': '127.0.0.1', 'ssh_port': 1})]\n")
    rc, out, _ = fleet(capsys, "diagnose", "gpu-9", "-i", str(inv), "--json")
    assert rc == 2 and json.loads(out)["error"]["where"]["field"] == "HOST"


def test_live_unreachable_host_could_not_complete(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path) -> None:
    inv = tmp_path / "inv.py"
    inv.write_text("hosts = [('gpu-1', {'ssh_hostname': '127.0.0.1', 'ssh_port': 1})]\n")
    rc, out, _ = fleet(capsys, "diagnose", "gpu-1", "-i", str(inv), "--seconds", "1", "--json")
    assert rc == 3 and "gpu-1" in json.loads(out)["error"]["message"]
    rc, out, _ = fleet(capsys, "bundle", "collect", "gpu-1", "-i", str(inv), "-o",
                       str(tmp_path / "b"), "--json")
    assert rc == 3 and not (tmp_path / "b").exists()
