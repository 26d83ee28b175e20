"""`fleet facts import`: captures become history snapshots, all or nothing."""

from __future__ import annotations

import json
from pathlib import Path

from fleet.errors import ExitCode
from fleet.history import gpu_samples, list_events, list_hosts, open_history

DATA = Path(__file__).resolve().parents[2] / "data" / "realdata"
PENDING = DATA / "nvidia-smi-q-text" / "gpud__a10__535.129.03__remapped-rows-pending.txt"
H100_XML = next((DATA / "nvidia-smi-xml").glob("*.xml"))


def test_import_records_snapshot_counters_and_findings(fleet_cli, tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    r = fleet_cli("--db", str(db), "facts", "import", str(PENDING), "--host", "gpu-07",
                  "--pool", "a10", "--json")
    doc = json.loads(r.stdout)
    worst = doc["imported"][0]["worst"]
    assert r.returncode == (ExitCode.PROBLEMS if worst == "fail" else ExitCode.OK), r.stderr
    assert doc["imported"][0]["host"] == "gpu-07"
    assert any(f["check"] == "remap.pending" for f in doc["imported"][0]["findings"])
    with open_history(str(db)) as h:
        (host,) = list_hosts(h)
        assert (host.name, host.pool) == ("gpu-07", "a10")
        (sample,) = gpu_samples(h, host="gpu-07")
        assert sample.remapped_pending is True and sample.remapped_uncorrected == 4
        assert [e.kind for e in list_events(h)] == ["facts.import"]


def test_a_bad_file_records_nothing(fleet_cli, tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    bad = tmp_path / "junk.txt"
    bad.write_text("this is not a capture\n")
    r = fleet_cli("--db", str(db), "facts", "import", str(H100_XML), str(bad))
    assert r.returncode == ExitCode.BAD_INPUT
    assert "junk.txt" in r.stderr and "Traceback" not in r.stderr
    assert not db.exists() or not list_hosts(open_history(str(db)))
