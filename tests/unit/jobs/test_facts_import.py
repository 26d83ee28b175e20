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


def _capture(dram: int, when: str) -> str:
    """The H100 capture, its GPUs' lifetime DRAM corrected count `dram`, taken at `when`."""
    import re

    xml = H100_XML.read_text()
    xml = re.sub(r"<timestamp>[^<]*</timestamp>", f"<timestamp>{when}</timestamp>", xml)
    return re.sub(r"(<aggregate>\s*<sram_correctable>0</sram_correctable>(?:.|\n)*?"
                  r"<dram_correctable>)0<", rf"\g<1>{dram}<", xml)


def test_a_capture_is_stored_at_its_own_time_not_the_import_time(fleet_cli,
                                                                  tmp_path: Path) -> None:
    """Issue 31, defect 9: a month-old bundle imported after four weekly probes became this
    week's sample, its lower lifetime count a 'reset' and every GPU a quarantine proposal."""
    import datetime as dt

    from fleet.domain.matrix.models import Thresholds
    from fleet.domain.trends import analyze
    from fleet.facts import facts_from_text
    from fleet.history import iter_gpu_series
    from fleet.jobs.record import record_snapshot

    db = str(tmp_path / "h.db")
    now = dt.datetime.now(dt.UTC)
    with open_history(db) as hist:
        for k, dram in enumerate((50_000, 50_100, 50_200, 50_300)):
            record_snapshot(hist, "gpu-h1", facts_from_text(_capture(dram, "x"), "probe"), [],
                            taken_at=now - dt.timedelta(weeks=4 - k, hours=1))
    old = now - dt.timedelta(weeks=5)
    bundle = tmp_path / "bundle.xml"
    bundle.write_text(_capture(49_900, old.strftime("%a %b %d %H:%M:%S %Y")))
    r = fleet_cli("--db", db, "facts", "import", "--host", "gpu-h1", str(bundle), "--force")
    assert r.returncode in (ExitCode.OK, ExitCode.PROBLEMS), r.stderr
    with open_history(db) as hist:
        times = sorted({s.taken_at for s in gpu_samples(hist, host="gpu-h1")})
        assert times[0] == old.replace(microsecond=0)
        later = now + dt.timedelta(seconds=1)
        rep = analyze(iter_gpu_series(hist, since=later - dt.timedelta(weeks=6), until=later),
                      now=later.timestamp(), thresholds=Thresholds())
    assert not any(f.quarantine for g in rep.gpus for f in g.flags)
    assert max(g.ecc_corrected_weekly[-1] for g in rep.gpus) <= 100


def test_taken_at_overrides_and_a_capture_without_a_time_is_refused(fleet_cli,
                                                                    tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    cap = tmp_path / "gpu-07.xml"
    cap.write_text(_capture(0, "not a time"))
    r = fleet_cli("--db", str(db), "facts", "import", str(cap), "--host", "gpu-07", "--force")
    assert r.returncode == ExitCode.BAD_INPUT and "--taken-at" in r.stderr
    assert not db.exists() or not list_hosts(open_history(str(db)))
    future = tmp_path / "gpu-08.xml"
    future.write_text(_capture(0, "Fri Aug 21 08:54:01 2099"))
    r = fleet_cli("--db", str(db), "facts", "import", str(future), "--host", "gpu-08",
                  "--force")
    assert r.returncode == ExitCode.BAD_INPUT and "after now" in r.stderr
    r = fleet_cli("--db", str(db), "facts", "import", str(cap), "--host", "gpu-07", "--force",
                  "--taken-at", "2026-11-30T08:00:00+01:00", "--json")
    assert r.returncode in (ExitCode.OK, ExitCode.PROBLEMS), r.stderr
    with open_history(str(db)) as h:
        (sample, *_) = gpu_samples(h, host="gpu-07")
        assert sample.taken_at.isoformat() == "2026-11-30T07:00:00+00:00"
