"""`fleet facts import` checks the name a capture is recorded under (issue 32, finding 7): the
inventory's host-name grammar for the name inside the capture (or the file's stem), and a
capture naming another host than `--host` refused unless `--force`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleet.cli.facts_cmd import record_name
from fleet.domain.names import same_host
from fleet.errors import ExitCode, Problem
from fleet.history import list_hosts, open_history


def capture(folder: Path, file: str, hostname: str | None) -> Path:
    doc = {"schema": 1, "source": "nvml", "versions": {"driver_library": "580.95.05"},
           "gpu_count": 1, "gpus": [{"index": 0, "ecc_aggregate_uncorrected": 0}],
           "collected_at": "2026-11-30T08:00:00Z"}  # as every probe document says
    if hostname is not None:
        doc["identity"] = {"hostname": hostname}
    path = folder / file
    path.write_text(json.dumps(doc))
    return path


def hosts(db: Path) -> list[str]:
    if not db.exists():
        return []
    with open_history(str(db), create=False) as h:
        return [x.name for x in list_hosts(h)]


def test_a_capture_naming_another_host_than_host_is_refused(fleet_cli, tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    f = capture(tmp_path, "bundle-from-gpu-99.json", "gpu-01")
    r = fleet_cli("--db", str(db), "facts", "import", str(f), "--host", "gpu-99", "--json")
    assert r.returncode == ExitCode.BAD_INPUT, r.stdout + r.stderr
    assert "'gpu-01', not 'gpu-99'" in r.stderr and "--force" in r.stderr
    assert hosts(db) == []


def test_force_records_it_under_host(fleet_cli, tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    f = capture(tmp_path, "x.json", "gpu-01")
    r = fleet_cli("--db", str(db), "facts", "import", str(f), "--host", "gpu-99", "--force",
                  "--json")
    assert r.returncode == ExitCode.OK, r.stderr
    assert hosts(db) == ["gpu-99"]


def test_a_name_outside_the_grammar_inside_the_capture_is_refused(fleet_cli,
                                                                  tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    f = capture(tmp_path, "odd.json", "-x;$(id)")
    r = fleet_cli("--db", str(db), "facts", "import", str(f), "--json")
    assert r.returncode == ExitCode.BAD_INPUT
    [problem] = json.loads(r.stdout)["error"]["problems"]
    assert problem["field"] == "identity.hostname" and problem["file"].endswith("odd.json")
    assert hosts(db) == []


def test_one_bad_name_records_nothing(fleet_cli, tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    good = capture(tmp_path, "a.json", "gpu-01")
    bad = capture(tmp_path, "b.json", "gpu 02")
    r = fleet_cli("--db", str(db), "facts", "import", str(good), str(bad))
    assert r.returncode == ExitCode.BAD_INPUT
    assert hosts(db) == []


@pytest.mark.parametrize(("claimed", "host", "file", "want"), [
    ("gpu-01", None, "x.json", "gpu-01"),
    (None, None, "gpu-07.json", "gpu-07"),
    ("gpu-01.dc1.example.com", "gpu-01", "x.json", "gpu-01"),  # the FQDN of the same host
    ("gpu-01", "gpu-01.dc1.example.com", "x.json", "gpu-01.dc1.example.com"),
    (None, "gpu-03", "x.json", "gpu-03"),
])
def test_names_accepted(claimed: str | None, host: str | None, file: str, want: str) -> None:
    assert record_name(Path(file), claimed, host, force=False) == want


@pytest.mark.parametrize(("claimed", "host", "file", "field"), [
    ("gpu-01", "gpu-99", "x.json", "--host"),
    ("gpu-01.dc1", "gpu-01.dc2", "x.json", "--host"),
    ("a;b", None, "x.json", "identity.hostname"),
    (None, None, "-rf.json", None),  # the file's stem as the name: still the grammar
    (None, "$(id)", "x.json", "--host"),
    ("gpu-01", "gpu\n01", "x.json", "--host"),
])
def test_names_refused(claimed: str | None, host: str | None, file: str,
                       field: str | None) -> None:
    problem = record_name(Path(file), claimed, host, force=False)
    assert isinstance(problem, Problem) and problem.field == field


def test_same_host() -> None:
    assert same_host("GPU-01", "gpu-01") and same_host("gpu-01.", "gpu-01")
    assert not same_host("gpu-01", "gpu-011")
