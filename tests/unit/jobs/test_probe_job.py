"""`probe_inventory` over pyinfra's @fake connector: facts judged and recorded, unreachable kept."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from fleet.history import latest_snapshots, list_events, open_history
from fleet.jobs.probe import probe_inventory
from fleet.remote.probe_fact import PROBE_SOURCE, parse_probe_output, probe_command

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def local_probe_lines() -> list[str]:
    out = subprocess.run([sys.executable, str(PROBE_SOURCE), "--no-frameworks"],
                         capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def write_inventory(tmp_path: Path, lines: list[str]) -> Path:
    inv = tmp_path / "inv.py"
    inv.write_text(
        "_fast = {'fake_delay': 0, 'fake_delay_jitter': 0, 'fake_responses': "
        f"{{'hostprobe.py': {json.dumps(lines)}}}}}\n"
        "h100 = [('@fake/gpu-01', _fast), ('@fake/gpu-02', _fast)]\n"
        "broken = [('127.0.0.1', {'ssh_port': 1, 'ssh_connect_retries': 0})]\n"
    )
    return inv


def test_probe_records_reachable_and_unreachable(tmp_path: Path) -> None:
    inv = write_inventory(tmp_path, local_probe_lines())
    with open_history(str(tmp_path / "h.db")) as h:
        results = probe_inventory(inv, None, h, now=lambda: NOW, frameworks=False,
                                  connect_timeout=2)
        by_host = {r.host: r for r in results}
        assert by_host["@fake/gpu-01"].reachable and by_host["@fake/gpu-01"].facts is not None
        assert not by_host["127.0.0.1"].reachable and by_host["127.0.0.1"].error
        snaps = {host.name: snap for host, snap in latest_snapshots(h)}
        assert snaps.keys() == {"@fake/gpu-01", "@fake/gpu-02", "127.0.0.1"}
        assert snaps["127.0.0.1"].reachable is False
        assert snaps["@fake/gpu-01"].source == "none"  # no NVML here: said, not hidden
        assert [e.kind for e in list_events(h)] == ["probe"]


def test_limit_selects_group(tmp_path: Path) -> None:
    inv = write_inventory(tmp_path, local_probe_lines())
    with open_history(str(tmp_path / "h.db")) as h:
        results = probe_inventory(inv, ["h100"], h, now=lambda: NOW, frameworks=False)
    assert sorted(r.host for r in results) == ["@fake/gpu-01", "@fake/gpu-02"]


def test_probe_command_runs_the_shipped_probe_and_refuses_odd_cursors() -> None:
    out = subprocess.run(probe_command(None, frameworks=False), shell=True,
                         capture_output=True, text=True, check=True)
    doc = parse_probe_output(out.stdout.splitlines())
    assert "gpus" in doc and "source" in doc
    import pytest

    with pytest.raises(ValueError):
        probe_command("x'; reboot; '")


def test_the_probe_table_never_shows_an_unprobed_host_as_ok(tmp_path: Path) -> None:
    """A host that could not be probed has no findings: its "worst" is unknown, never "ok"."""
    import os

    inv = write_inventory(tmp_path, local_probe_lines())
    r = subprocess.run([sys.executable, "-m", "fleet", "probe", "-i", str(inv), "-o", "tsv"],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "FLEET_DB": str(tmp_path / "h.db")})
    assert r.returncode == 3, r.stderr
    rows = {line.split("\t")[0]: line.split("\t") for line in r.stdout.splitlines()}
    header = rows.pop("host")
    worst = {host: row[header.index("worst")] for host, row in rows.items()}
    assert worst["127.0.0.1"] == "unknown", r.stdout
    assert worst["@fake/gpu-01"] != "unknown"
