"""`firmware.all_equal` across a pool (issue 23): every GPU of one model in a pool on one VBIOS.
The pure check names the odd host(s) out against the pool's majority; the weekly audit carries
the finding in its node-state section."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fleet.domain.checks.node_pool import PoolHost, pool_vbios_findings
from fleet.domain.facts import HostFacts
from fleet.domain.matrix.profiles import Firmware, NodeProfile
from fleet.jobs.hygiene import run_hygiene
from fleet.reports import render_json, render_markdown
from tests.unit.hygiene.fakes import NOW, FakeBackend, FakeScheduler
from tests.unit.hygiene.test_hygiene_job import seeded

EQUAL = NodeProfile(firmware=Firmware(all_equal=True))
H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"
GOOD, OLD = "96.00.99.00.01", "96.00.74.00.0B"


def host(*vbios: str | None, name: str = H100, pool: str = "p",
         profile: NodeProfile | None = EQUAL) -> PoolHost:
    gpus: list[dict[str, Any]] = [{"index": i, "name": name, "vbios_version": v}
                                  for i, v in enumerate(vbios)]
    return PoolHost(pool, HostFacts.model_validate({"source": "nvml", "gpus": gpus}), profile)


def test_the_odd_host_out_is_named_against_the_pool_majority() -> None:
    hosts = {"a": host(GOOD, GOOD), "b": host(GOOD, GOOD), "c": host(GOOD, OLD),
             "d": host(GOOD, GOOD)}
    found = pool_vbios_findings(hosts)
    assert list(found) == ["c"]
    (f,) = found["c"]
    assert f.check == "node.firmware" and f.severity == "warn"
    assert f.evidence["odd_hosts"] == ["c"] and f.evidence["wanted"] == GOOD
    assert f.evidence["found"] == sorted([GOOD, OLD])
    assert "odd host(s) out: c" in f.message and "nvfwupd" in f.message


def test_equal_pools_other_models_and_pools_without_all_equal_find_nothing() -> None:
    hosts = {"a": host(GOOD), "b": host(GOOD),
             "c": host("92.00.45.00.03", name=A100),  # another model: a group of its own
             "d": host(OLD, pool="q"),  # another pool
             "e": host(OLD, profile=NodeProfile()), "f": host(OLD, profile=None)}
    assert pool_vbios_findings(hosts) == {}


def test_a_tie_has_no_majority_and_names_every_host() -> None:
    found = pool_vbios_findings({"a": host(GOOD), "b": host(OLD)})
    assert sorted(found) == ["a", "b"]
    assert found["a"][0].evidence["wanted"] == "one VBIOS per pool"
    assert "no majority" in found["b"][0].message


def test_an_unreadable_vbios_counts_for_no_version() -> None:
    # the per-host node.firmware check reports it unreadable; the pool is not split by it
    assert pool_vbios_findings({"a": host(GOOD), "b": host(GOOD), "c": host(None)}) == {}


def test_the_weekly_audit_names_the_odd_host_out(tmp_path: Path) -> None:
    matrix, hosts, by, history = seeded(tmp_path, offenders=False, weeks=1)
    pools = dict(matrix.pools)
    pools["h100"] = pools["h100"].model_copy(update={"profile": "train"})
    matrix = matrix.model_copy(update={"profiles": {"train": EQUAL}, "pools": pools})
    members = [h for h in hosts if h.pool == "h100"]
    for h in members:
        h.counters = [{"vbios_version": GOOD} for _ in range(h.gpus)]
    odd = members[1].name
    by[odd].counters = [{"vbios_version": OLD} for _ in range(by[odd].gpus)]
    r = run_hygiene(FakeBackend(hosts), FakeScheduler(), history, matrix, now=NOW,
                    benchmark=False, actor="ops")
    history.close()
    report = json.loads(render_json(r.as_dict()))
    ns = {h["host"]: h for h in report["node_state"]["hosts"]}
    bad = [h for h, v in ns.items() if not v["conformant"]]
    assert bad == [odd]
    assert ns[odd]["findings"][0]["check"] == "node.firmware"
    assert f"odd host(s) out: {odd}" in ns[odd]["findings"][0]["message"]
    md = render_markdown(report)
    assert f"| {odd} | node.firmware | - | {GOOD} |" in md and OLD in md
