"""The weekly serving section (fleet/jobs/hygiene_serving.py) on a Prometheus that answers like
the real one (series per label set, one point at the query's time): week over week, the pool's
other release, load time and cache hit rate, density, could not measure; and the HTML report
opening with what to do, a chart only where something moved."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from datetime import date
from pathlib import Path

import pytest

from fleet.domain.drift import HostDrift
from fleet.domain.matrix.live_settings import LiveGateSettings
from fleet.domain.matrix.loader import load_matrix
from fleet.domain.matrix.models import Matrix
from fleet.domain.ports import HostRef
from fleet.domain.prom_result import QueryResult, Series, failed
from fleet.domain.serving_units import Units
from fleet.jobs.hygiene_serving import UNSET, serving_section
from fleet.reports.html import render_html

ROOT = Path(__file__).resolve().parents[3]
NOW = dt.datetime(2026, 3, 2, 6, 0, tzinfo=dt.UTC)
WEEK = dt.timedelta(weeks=1)
HOSTS = [HostRef(f"h100-0{i}", pool="h100", gpu_model="H100", gpu_count=8) for i in (1, 2)]
_HOSTS = re.compile(r'host=~"\((.*?)\)\(:\[0-9\]\+\)\?"')
_MODEL = re.compile(r'(?:model|model_name)="([^"]*)"')
_Q = re.compile(r"histogram_quantile\(([0-9.]+)|quantile=~\"([0-9.\\]+)")


def _matrix(family: str = "vllm") -> Matrix:
    m = load_matrix(ROOT / "matrices" / "example.yaml", today=date(2025, 6, 1)).matrix
    pool = m.pools["h100"]
    gates = pool.rollout.gates.model_copy(
        update={"live": LiveGateSettings(family=family, host_label="host")})
    ro = pool.rollout.model_copy(update={"gates": gates})
    return m.model_copy(update={"pools": {**m.pools, "h100": pool.model_copy(
        update={"rollout": ro})}})


class WeeklyProm:
    """p99 of `model` on `host` in week `k` (0: this week) is `ms(host, model, k)`; other
    quantiles scale from it; each host serves 1000 requests per GPU a week."""

    def __init__(self, ms: Callable[[str, str, int], float | None], models=("llama", "mistral"),
                 triton: bool = False) -> None:
        self.ms, self.models, self.triton = ms, models, triton
        self.asked: list[str] = []

    def range(self, query, start, end, step_s):  # noqa: ANN001, ANN201 - not used here
        raise AssertionError("the weekly section asks instant queries only")

    def instant(self, query: str, at: dt.datetime | None = None) -> QueryResult:
        assert at is not None
        self.asked.append(query)
        k = round((NOW - at) / WEEK)
        found = _HOSTS.search(query)
        assert found, query
        hosts = found.group(1).replace("\\", "").split("|")  # the regex escapes: h100\-01
        model = (_MODEL.search(query) or [None, None])[1]
        t = at.timestamp()
        if query.startswith("count by"):
            label = query[len("count by ("):query.index(")")]
            return QueryResult(query, tuple(Series({label: m}, ((t, 1.0),))
                                            for m in self.models))
        if "nv_model_load" in query:
            return QueryResult(query, tuple(Series({"host": h}, ((t, 4.5),)) for h in hosts))
        if "nv_cache_num_hits" in query or "nv_cache_num_misses" in query:
            if model != "llama":
                return QueryResult(query, ())
            return QueryResult(query, (Series({}, ((t, 700.0 if "hits" in query else 300.0),)),))
        if query.startswith("sum by (host) (increase("):
            return QueryResult(query, tuple(Series({"host": h}, ((t, 8000.0),)) for h in hosts))
        m = _Q.search(query)
        assert m, query
        q = float((m.group(1) or m.group(2)).replace("\\", "").rstrip("0*") or 0)
        scale = {0.5: 0.6, 0.95: 0.9, 0.99: 1.0}[q] / (1000.0 if not self.triton else 0.001)
        per = {h: self.ms(h, model or "", k) for h in hosts}
        if "by (le, host)" in query or "avg by (host)" in query:
            return QueryResult(query, tuple(Series({"host": h}, ((t, v * scale),))
                                            for h, v in per.items() if v is not None))
        known = [v for v in per.values() if v is not None]
        if not known:
            return QueryResult(query, ())
        return QueryResult(query, (Series({}, ((t, sum(known) / len(known) * scale),)),))


def _drift(releases: dict[str, str]) -> list[HostDrift]:
    return [HostDrift(h, "h100", True, True, r, "r580-cuda13.0") for h, r in releases.items()]


SAME = {"h100-01": "r580-cuda13.0", "h100-02": "r580-cuda13.0"}


def test_a_p99_that_rose_week_over_week_is_a_regression_naming_the_rollout() -> None:
    prom = WeeklyProm(lambda h, m, k: 300.0 * (1.5 if m == "llama" and k == 0 else 1.0))
    rollouts = [{"id": 7, "release": "r595-cuda13.2", "scope": "h100",
                 "started_at": (NOW - dt.timedelta(days=2)).isoformat()},
                {"id": 6, "release": "r595-cuda13.2", "scope": "a100",
                 "started_at": (NOW - dt.timedelta(days=3)).isoformat()}]
    sv = serving_section(prom, _matrix(), HOSTS, _drift(SAME), now=NOW, rollouts=rollouts)
    assert sv["status"] == "measured"
    (pool,) = sv["pools"]
    models = {m["model"]: m for m in pool["models"]}
    llama, mistral = models["llama"], models["mistral"]
    assert llama["latency_ms"]["this_week"] == {"p50": 270.0, "p95": 405.0, "p99": 450.0}
    assert llama["latency_ms"]["last_week"]["p99"] == 300.0
    assert llama["latency_ms"]["change"]["p99"] == 0.5
    assert llama["weekly_p99_ms"] == [300.0, 300.0, 300.0, 450.0] and llama["moved"]
    assert "rollout 7 to r595-cuda13.2" in llama["regression"]
    assert "rollout 6" not in llama["regression"]  # another pool's
    assert mistral["regression"] is None and not mistral["moved"]
    assert sv["problems"] == [f"serving regression: {llama['regression']}"]
    assert llama["load"] == "not exported by vllm" and llama["cache_hit_rate"] is None
    assert [d["requests_per_gpu"] for d in llama["density"]] == [1000.0, 1000.0]
    assert [d["per"] for d in llama["density"]] == ["8 GPUs (inventory)"] * 2
    assert [d["p99_ms"] for d in llama["density"]] == [450.0, 450.0]


def test_density_counts_mig_instances_and_never_guesses_a_gpu_count() -> None:
    prom = WeeklyProm(lambda h, m, k: 300.0)
    units: dict[str, Units | str] = {"h100-01": Units(14, "mig", "facts"),
                                     "h100-02": "GPU 3 runs MIG and its MIG instances could "
                                                "not be read"}
    sv = serving_section(prom, _matrix(), HOSTS, _drift(SAME), now=NOW, units=units)
    llama = {m["model"]: m for m in sv["pools"][0]["models"]}["llama"]
    mig, unknown = llama["density"]
    assert mig["requests_per_gpu"] == round(8000 / 14, 1) and mig["per"] == \
        "14 MIG instances (facts)"
    assert unknown["requests_per_gpu"] is None and "could not be read" in unknown["per"]
    page = render_html({**weekly_report(), "serving": sv})
    assert "@ 571.4 /MIG" in page and "@ ? (GPU count unknown)" in page


def test_the_pools_other_release_is_compared() -> None:
    two = {"h100-01": "r580-cuda13.0", "h100-02": "r595-cuda13.2"}
    prom = WeeklyProm(lambda h, m, k: 400.0 if h == "h100-02" else 300.0)
    sv = serving_section(prom, _matrix(), HOSTS, _drift(two), now=NOW)
    llama = sv["pools"][0]["models"][0]
    assert {r: v["latency_ms"]["p99"] for r, v in llama["by_release"].items()} == {
        "r580-cuda13.0": 300.0, "r595-cuda13.2": 400.0}
    assert "hosts on r595-cuda13.2: p99 400.0 ms vs 300.0 ms on r580-cuda13.0 (+33%)" in \
        llama["regression"] and "no rollout of the pool started this week" in llama["regression"]


def test_triton_load_time_and_cache_hit_rate_where_exported() -> None:
    prom = WeeklyProm(lambda h, m, k: 20.0, triton=True)
    sv = serving_section(prom, _matrix("triton"), HOSTS, _drift(SAME), now=NOW)
    models = {m["model"]: m for m in sv["pools"][0]["models"]}
    assert models["llama"]["load_s"] == {"max": 4.5, "hosts": 2}
    assert models["llama"]["cache_hit_rate"] == 0.7
    assert models["mistral"]["cache_hit_rate"] is None  # no cache series for it
    assert models["mistral"]["cache"].startswith("could not measure")
    assert models["llama"]["latency_ms"]["this_week"]["p99"] == 20.0


def test_no_traffic_last_week_is_unknown_never_zero() -> None:
    prom = WeeklyProm(lambda h, m, k: 300.0 if k == 0 else None)
    sv = serving_section(prom, _matrix(), HOSTS, _drift(SAME), now=NOW)
    llama = sv["pools"][0]["models"][0]
    assert llama["latency_ms"]["last_week"]["p99"] is None
    assert llama["latency_ms"]["change"]["p99"] is None and llama["regression"] is None
    assert llama["weekly_p99_ms"] == [None, None, None, 300.0] and not llama["moved"]


def test_an_unreachable_prometheus_could_not_measure_and_is_a_problem() -> None:
    class Down(WeeklyProm):
        def instant(self, query: str, at: dt.datetime | None = None) -> QueryResult:
            return failed(query, "Prometheus at http://prom:9090 unreachable: ConnectError")

    sv = serving_section(Down(lambda *a: 1.0), _matrix(), HOSTS, _drift(SAME), now=NOW)
    assert sv["status"] == "could_not_measure"
    assert "unreachable" in sv["reason"] and sv["pools"][0]["status"] == "could_not_measure"
    assert sv["problems"] and "unreachable" in sv["problems"][0]


def test_no_prometheus_configured_says_so() -> None:
    sv = serving_section(None, _matrix(), HOSTS, _drift(SAME), now=NOW)
    assert (sv["status"], sv["reason"], sv["problems"]) == ("could_not_measure", UNSET, [])


@pytest.fixture
def report() -> dict:
    return weekly_report()


def weekly_report() -> dict:
    """A weekly report with a drifted host, a serving regression and flat trends (also drawn
    in headless Chromium: tests/integration/hygiene/test_report_in_chromium.py)."""
    prom = WeeklyProm(lambda h, m, k: 300.0 * (1.5 if m == "llama" and k == 0 else 1.0))
    sv = serving_section(prom, _matrix(), HOSTS, _drift(SAME), now=NOW)
    drift = [{"host": "h100-02", "pool": "h100", "reachable": True, "conformant": False,
              "release": None, "golden": "r580-cuda13.0", "in_flight": None,
              "differences": [{"text": "driver 570.1 is not allowed"}]}]
    return {"generated_at": NOW.isoformat(), "problems": ["x"],
            "summary": {"exit_code": 1, "problems": 2, "gpus_analyzed": 0, "gpus_flagged": 0,
                        "quarantine_proposed": 0, "quarantine_applied": 0,
                        "drift": {"hosts": 2, "conformant": 1, "non_conformant": 1,
                                  "unreachable": 0}},
            "trends": {"window_weeks": 4, "flagged": [], "pools": {
                "h100": {"ecc_corrected": [0, 0, 0, 0], "aer_corrected": [0, 0, 0, 0],
                         "xid": [0, 0, 0, 0]}}},
            "quarantine": {"alerts": [], "proposals": [], "breakers": [], "applied": []},
            "drift": drift, "node_state": {}, "benchmarks": [], "serving": sv}


def test_the_html_opens_with_what_to_do_and_charts_only_what_moved(report, monkeypatch) -> None:
    import fleet.reports.html as H

    monkeypatch.setattr(H, "node_state_rows", lambda r: {"summary": "", "hosts": [],
                                                          "findings": [], "fields": []})
    page = render_html(report)
    act = page.index('<section id="act">')
    assert act < page.index("<svg") and act < page.index("<h2>Trends")
    todo = page[act:page.index("</section>")]
    assert "fleet apply -r r580-cuda13.0 -l h100-02" in todo
    assert "fleet rollback -l h100 --reason &#x27;serving regression&#x27; --dry" in todo
    # the flat ECC/AER/Xid trend is named, not drawn; the moved p99 is drawn
    assert "corrected ECC / week" not in page and "Flat (no corrected ECC" in page
    assert page.count("<svg") == 1 and "h100: p99 latency per week (ms)" in page
