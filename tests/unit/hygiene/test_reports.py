"""Report golden files (regenerate with FLEET_REGEN_GOLDEN=1) and a Prometheus format check."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from fleet.history import open_history
from fleet.jobs.hygiene import run_hygiene
from fleet.reports import (
    render_html,
    render_json,
    render_markdown,
    render_prometheus,
    write_reports,
)
from tests.unit.hygiene.fakes import NOW, FakeBackend, FakeScheduler
from tests.unit.hygiene.test_hygiene_job import seeded

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "reports"
REGEN = os.environ.get("FLEET_REGEN_GOLDEN") == "1"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("rep")
    matrix, hosts, by, history = seeded(tmp)
    by["h100-01"].reachable = False
    by["a100-02"].held = False
    r = run_hygiene(FakeBackend(hosts), FakeScheduler(), history, matrix, now=NOW,
                    apply_quarantine=True, benchmark=False, actor="ops")
    history.close()
    return json.loads(render_json(r.as_dict()))


@pytest.mark.parametrize("name,render", [
    ("hygiene.md", render_markdown), ("hygiene.html", render_html),
    ("hygiene.json", render_json), ("hygiene.prom", render_prometheus)])
def test_golden(report, name, render) -> None:
    text = render(report)
    path = GOLDEN / name
    if REGEN:
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing {path}: run with FLEET_REGEN_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8"), \
        f"{name} differs from the golden file (FLEET_REGEN_GOLDEN=1 to accept)"


def test_html_is_self_contained(report) -> None:
    html = render_html(report)
    assert "<svg" in html and "<script" not in html
    assert not re.search(r'(src|href)="(https?:)?//', html)


_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
_SAMPLE = re.compile(rf"^({_NAME})(\{{{_LABEL}(?:,{_LABEL})*\}})? (-?[0-9.e+-]+|NaN|[+-]Inf)$")


def parse_exposition(text: str) -> dict[str, list[tuple[str, float]]]:
    """A strict little parser of the text exposition format (0.0.4)."""
    assert text.endswith("\n")
    families: dict[str, list[tuple[str, float]]] = {}
    typed: set[str] = set()
    current = None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            current = line.split()[2]
            assert current not in families, f"family {current} twice"
            families[current] = []
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            assert name == current and kind == "gauge"
            typed.add(name)
        else:
            m = _SAMPLE.match(line)
            assert m, f"bad sample line: {line!r}"
            assert m.group(1) == current and current in typed
            families[current].append((m.group(2) or "", float(m.group(3))))
    return families


def test_prometheus_parses(report) -> None:
    fam = parse_exposition(render_prometheus(report))
    conformant = dict(fam["fleet_hygiene_host_conformant"])
    assert conformant['{host="h100-01",pool="h100"}'] == 0
    assert conformant['{host="h100-02",pool="h100"}'] == 1
    assert len(fam["fleet_hygiene_gpu_flag"]) >= 5
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        return
    assert len(list(text_string_to_metric_families(render_prometheus(report)))) == len(fam)


def test_prometheus_breaker_series_on_a_clean_run(report) -> None:
    """A clean run proposes nothing, so no pool has a breaker entry: the series are still there
    for every pool, at 0 (issue 30: the clean run's file lacked them, and an alert on
    `fleet_hygiene_breaker_tripped == 1` cannot tell a clean week from a broken exporter)."""
    clean = {**report, "quarantine": {**report["quarantine"], "breakers": [], "open": []}}
    fam = parse_exposition(render_prometheus(clean))
    pools = sorted({d["pool"] for d in report["drift"]})
    for name in ("fleet_hygiene_breaker_tripped", "fleet_hygiene_breaker_utilization"):
        assert dict(fam[name]) == {f'{{pool="{p}"}}': 0 for p in pools}, name


def test_label_escaping() -> None:
    from fleet.reports.prometheus import _labels

    assert _labels({"host": 'a"b\\c\nd'}) == '{host="a\\"b\\\\c\\nd"}'


def test_write_reports_atomic(tmp_path: Path, report) -> None:
    paths = write_reports(report, tmp_path / "out")
    assert set(paths) == {"md", "html", "json", "prom"}
    assert not list((tmp_path / "out").glob(".*.tmp"))
    assert (tmp_path / "out" / "latest.json").read_text() == paths["json"].read_text()
    assert oct(paths["prom"].stat().st_mode & 0o777) == "0o644"


def test_cli_quarantine_list_and_release(tmp_path: Path, fleet_cli) -> None:
    from fleet.history import list_events, open_quarantine

    db = tmp_path / "q.db"
    with open_history(str(db)) as h:
        open_quarantine(h, "gpu-07", reason="uncorrectable ECC", opened_by="ops", at=NOW,
                        data={"drained_by_fleet": True, "scheduler": "none"})
    out = fleet_cli("--db", str(db), "quarantine", "list", "--json")
    assert out.returncode == 0, out.stderr
    assert [q["host"] for q in json.loads(out.stdout)["quarantines"]] == ["gpu-07"]
    bad = fleet_cli("--db", str(db), "quarantine", "release", "gpu-99", "--reason", "x")
    assert bad.returncode == 2
    ok = fleet_cli("--db", str(db), "quarantine", "release", "gpu-07", "--reason", "GPU swapped",
                   "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["released"] is True
    again = fleet_cli("--db", str(db), "quarantine", "list", "--json")
    assert json.loads(again.stdout)["quarantines"] == []
    with open_history(str(db)) as h:
        assert [e.kind for e in list_events(h, kind="quarantine.close")] == ["quarantine.close"]


def test_cli_hygiene_sim(tmp_path: Path, fleet_cli) -> None:
    out = fleet_cli("--db", str(tmp_path / "s.db"), "hygiene", "run", "--matrix",
                    "matrices/example.yaml", "--sim", "12", "--report-dir", str(tmp_path / "r"),
                    "--json", "--no-benchmark")
    assert out.returncode in (0, 1), out.stderr
    data = json.loads(out.stdout)
    assert data["summary"]["drift"]["hosts"] == 12
    assert (out.returncode == 1) == bool(data["problems"])
    assert (tmp_path / "r" / "fleet_hygiene.prom").exists()
    parse_exposition((tmp_path / "r" / "fleet_hygiene.prom").read_text())


def test_cli_hygiene_needs_inventory(tmp_path: Path, fleet_cli) -> None:
    out = fleet_cli("--db", str(tmp_path / "s.db"), "hygiene", "run", "--matrix",
                    "matrices/example.yaml")
    assert out.returncode == 2 and "--inventory" in out.stderr
