"""The hygiene report's node-state section (issue 23 item 3): JSON key, Markdown, HTML and the
Prometheus gauges (conformant per host, a count per check and kind)."""

from __future__ import annotations

import json
from pathlib import Path

from fleet.domain.matrix.profiles import GpuSettings, NodeProfile
from fleet.jobs.hygiene import run_hygiene
from fleet.reports import render_html, render_json, render_markdown, render_prometheus
from tests.unit.hygiene.fakes import NOW, FakeBackend, FakeScheduler
from tests.unit.hygiene.test_hygiene_job import seeded
from tests.unit.hygiene.test_reports import parse_exposition


def _report(tmp_path: Path, profile: NodeProfile) -> dict[str, object]:
    matrix, hosts, by, history = seeded(tmp_path, offenders=False, weeks=1)
    pools = dict(matrix.pools)
    pools["h100"] = pools["h100"].model_copy(update={"profile": "train"})
    matrix = matrix.model_copy(update={"profiles": {"train": profile}, "pools": pools})
    by["h100-01"].reachable = False
    by["h100-02"].counters[3]["persistence_mode"] = False
    r = run_hygiene(FakeBackend(hosts), FakeScheduler(), history, matrix, now=NOW,
                    benchmark=False, actor="ops")
    history.close()
    return json.loads(render_json(r.as_dict()))


def test_node_state_section_everywhere(tmp_path: Path) -> None:
    report = _report(tmp_path, NodeProfile(gpu=GpuSettings(persistence_mode=True, count=8)))
    ns = report["node_state"]
    by = {h["host"]: h for h in ns["hosts"]}
    assert by["h100-03"]["conformant"] is True
    assert (by["h100-02"]["conformant"], by["h100-02"]["differ"]) == (False, 1)
    assert by["h100-02"]["findings"][0]["fix"].startswith("nvidia-smi -i 0000:13:00.0 -pm 1")
    assert (by["h100-01"]["conformant"], by["h100-01"]["unreadable"]) == (False, 1)  # no facts
    assert "a100-01" not in by  # its pool has no profile and nothing was found
    assert ns["fields"] == {"node.facts": {"differ": 0, "unreadable": 1},
                            "node.persistence_mode": {"differ": 1, "unreadable": 0}}
    assert ns["hosts_judged"] == 30 and ns["hosts_conformant"] == 28

    md = render_markdown(report)
    assert "## Node state (profiles)" in md and "28 of 30 host(s)" in md
    assert "| h100-02 | node.persistence_mode | 0000:13:00.0 |" in md
    assert "<h2>Node state (profiles)</h2>" in render_html(report)

    fam = parse_exposition(render_prometheus(report))
    conformant = dict(fam["fleet_hygiene_node_conformant"])
    assert conformant['{host="h100-02",pool="h100",profile="train"}'] == 0
    assert conformant['{host="h100-03",pool="h100",profile="train"}'] == 1
    assert len(conformant) == 30  # judged hosts only
    counts = dict(fam["fleet_hygiene_node_field_findings"])
    assert counts['{check="node.persistence_mode",kind="differ"}'] == 1


def test_unreadable_profile_value_is_not_conformant(tmp_path: Path) -> None:
    report = _report(tmp_path, NodeProfile(gpu=GpuSettings(compute_mode="default")))
    ns = report["node_state"]
    assert ns["hosts_conformant"] == 0  # the fakes carry no compute mode: unknown, not healthy
    assert ns["fields"]["node.compute_mode"]["unreadable"] == 29 * 8
