"""Answers that cannot be known are never given as fine (issue 30): a kernel log that is no
kernel log, a support bundle whose `nvidia-smi -q` is cut after its header."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

Fleet = Callable[..., tuple[int, str, str]]  # the fleet_run fixture (conftest.py)

ROOT = Path(__file__).resolve().parents[3]
BUNDLES = ROOT / "tests" / "data" / "diagnose" / "bundles"
XID79 = b"[ 12.5] NVRM: Xid (PCI:0000:9b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"


@pytest.mark.parametrize("text", [b"", b"\n\n", b"hello\nworld\n",
                                  b"2026-01-01 12:00:00 INFO app started\n"])
def test_no_kernel_log_line_is_could_not_judge(fleet_run: Fleet, tmp_path: Path,
                                               text: bytes) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(text)
    code, out, err = fleet_run("logs", "parse", str(log), "--json")
    doc = json.loads(out)
    assert code == 3 and doc["error"]["code"] == 3
    assert "could not judge" in doc["error"]["message"] and doc["error"]["where"]["file"] == \
        str(log)


def test_dev_null_is_could_not_judge(fleet_run: Fleet) -> None:
    code, _, err = fleet_run("logs", "parse", "/dev/null")
    assert code == 3 and "/dev/null: could not judge: it is empty" in err


def test_a_clean_kernel_log_is_zero_events(fleet_run: Fleet, tmp_path: Path) -> None:
    log = tmp_path / "dmesg"
    log.write_text("[    0.000000] Linux version 6.1.0\n[    1.2] pci 0000:00:01.0: bridge\n")
    code, out, _ = fleet_run("logs", "parse", str(log), "--json")
    assert code == 0 and json.loads(out)["events"] == []


def test_stdin_is_read_with_dash(fleet_run: Fleet) -> None:
    code, out, _ = fleet_run("logs", "parse", "-", "--json", stdin=XID79)
    doc = json.loads(out)
    assert code == 1 and doc["file"] == "<stdin>"
    assert [e["xid"] for e in doc["events"]] == [79]
    code, _, err = fleet_run("logs", "parse", "-", stdin=b"")
    assert code == 3 and "<stdin>: could not judge" in err


def _bundle(tmp_path: Path) -> Path:
    b = tmp_path / "b"
    shutil.copytree(BUNDLES / "healthy", b)
    return b


def test_bundle_smi_cut_after_its_header_is_not_healthy(fleet_run: Fleet,
                                                        tmp_path: Path) -> None:
    b = _bundle(tmp_path)
    smi = b / "nvidia-smi-q.txt"
    head = smi.read_text().split("\nGPU ")[0] + "\n"  # the header, Attached GPUs included
    smi.write_text(head)
    code, out, _ = fleet_run("diagnose", str(b), "--json")
    err = json.loads(out)["error"]
    assert code == 2 and err["where"]["file"] == str(smi) and err["where"]["field"] == "GPU"
    assert "header says 1 attached GPU(s) but no GPU section follows" in err["message"]


def test_bundle_smi_xml_without_gpus_is_not_healthy(fleet_run: Fleet, tmp_path: Path) -> None:
    b = _bundle(tmp_path)
    (b / "nvidia-smi-q.xml").write_text(
        "<?xml version='1.0'?>\n<nvidia_smi_log>\n<driver_version>580.95.05</driver_version>\n"
        "<attached_gpus>8</attached_gpus>\n</nvidia_smi_log>\n")
    code, out, _ = fleet_run("diagnose", str(b), "--json")
    assert code == 2 and "8 attached GPU(s)" in json.loads(out)["error"]["message"]


def test_bundle_kernel_log_that_is_no_kernel_log_is_unreadable(fleet_run: Fleet,
                                                               tmp_path: Path) -> None:
    b = _bundle(tmp_path)
    (b / "kernel.log").write_text("-- No entries --\n")
    code, out, _ = fleet_run("diagnose", str(b), "--json")
    doc = json.loads(out)
    assert doc["files"]["kernel.log"].startswith("unreadable")
    nvlink = next(q for q in doc["questions"] if q["class"] == "nvlink")
    assert nvlink["status"] == "could_not_judge" and code == 0


@pytest.mark.parametrize(("name", "text"), [
    ("cut.txt", "==============NVSMI LOG==============\n\nDriver Version : 580.95.05\n"
                "Attached GPUs : 1\n"),
    ("nog.xml", "<?xml version='1.0'?>\n<nvidia_smi_log><attached_gpus>2</attached_gpus>"
                "</nvidia_smi_log>\n"),
])
def test_facts_capture_without_a_gpu_is_bad_input(fleet_run: Fleet, tmp_path: Path, name: str,
                                                  text: str) -> None:
    """The same class in `fleet facts parse`: an nvidia-smi report without one GPU section
    said "no findings", exit 0."""
    f = tmp_path / name
    f.write_text(text)
    code, out, _ = fleet_run("facts", "parse", str(f), "--json")
    err = json.loads(out)["error"]
    assert code == 2 and err["where"]["file"] == str(f) and err["where"]["field"] == "gpus"
    assert "no GPU in the capture" in err["message"]


@pytest.mark.parametrize("name", ["dmon.txt", "pmon.txt", "df.txt", "ps.txt"])
def test_bundle_empty_capture_is_unreadable_not_parsed(fleet_run: Fleet, tmp_path: Path,
                                                      name: str) -> None:
    """The same class in a bundle: an empty dmon/pmon/df/ps capture read as "no rows"
    (parsed, verdict healthy); those commands always print a header."""
    b = _bundle(tmp_path)
    (b / name).write_text("")
    code, out, _ = fleet_run("diagnose", str(b), "--json")
    assert json.loads(out)["files"][name] == "unreadable: empty"
