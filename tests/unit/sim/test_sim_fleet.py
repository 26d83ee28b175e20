"""The simulated fleet through the Backend API: state, determinism, scale, every fault."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from fleet.domain.checks import Severity, expectations_for, run_checks
from fleet.domain.facts import HostFacts
from fleet.domain.matrix.models import Matrix
from fleet.domain.ports import Backend, HostResult
from fleet.jobs.reboot_gate import gated_reboot
from fleet.sim import HostFaults, Latency, SimClock, SimFleet, SimSpec


def _checks(matrix: Matrix, fleet: SimFleet, host: str) -> dict[str, Severity]:
    ref = next(r for r in fleet.hosts() if r.name == host)
    facts = fleet.probe([host])[host].value
    assert facts is not None
    exp = expectations_for(matrix, ref.pool or "", gpu_count=ref.gpu_count)
    out: dict[str, Severity] = {}
    for f in run_checks(facts, exp, matrix.policy.thresholds):
        out.setdefault(f.check, f.severity)
    return out


def _fails(checks: dict[str, Severity]) -> set[str]:
    return {c for c, s in checks.items() if s is Severity.FAIL}


def _upgrade(fleet: SimFleet, matrix: Matrix, host: str, release: str) -> None:
    rel = matrix.release(release)
    assert fleet.apply([host], rel)[host].ok
    assert gated_reboot(fleet, {host: rel}).results[host].ok


def test_is_a_backend(matrix: Matrix) -> None:
    fleet: Backend = SimFleet.build(matrix, 20, seed=1)
    assert len(fleet.hosts()) == 20


def test_pools_follow_the_matrix_canary_first(matrix: Matrix) -> None:
    fleet = SimFleet.build(matrix, 400, seed=3)
    pools = fleet.pools()
    assert list(pools) == ["h100-canary", "h100", "a100", "l40s"]
    assert sum(map(len, pools.values())) == 400
    assert [r.name for r in fleet.hosts()][0] == "h100-canary-00001"
    for pool, refs in pools.items():
        model = matrix.pools[pool].gpu_model
        assert {(r.gpu_model, r.gpu_count, r.pool) for r in refs} == {
            (model, 4 if model == "L40S" else 8, pool)}


def test_mix_of_models_when_the_matrix_names_none(matrix: Matrix) -> None:
    bare = matrix.model_copy(update={"pools": {}})
    fleet = SimFleet.build(bare, 9, pools={"p1": 3, "p2": 3, "p3": 3})
    assert {(r.pool, r.gpu_model, r.gpu_count) for r in fleet.hosts()} == {
        ("p1", "H100", 8), ("p2", "A100", 8), ("p3", "L40S", 4)}


def test_healthy_host_passes_every_check(matrix: Matrix) -> None:
    fleet = SimFleet.build(matrix, 40, seed=2)
    for host in ("h100-canary-00001", "h100-00001", "a100-00001", "l40s-00001"):
        checks = _checks(matrix, fleet, host)
        assert not checks, (host, checks)


def test_starts_on_previous_release_and_upgrades(matrix: Matrix) -> None:
    fleet = SimFleet.build(matrix, 40, seed=2)
    h = "h100-00001"
    assert fleet.installed_release(h) == "r570-cuda12.8"  # policy.previous of h100
    target = matrix.release("r580-cuda13.0")
    plan = fleet.plan([h], target)[h].value
    assert plan is not None and plan.changed and plan.reboot_required
    res = fleet.apply([h], target)[h]
    assert res.ok and res.changed and res.seconds == Latency().apply
    assert fleet.installed_release(h) == "r580-cuda13.0"
    assert fleet.loaded_release(h) == "r570-cuda12.8"
    # three ways to read the driver: packages new, /proc old, NVML refuses (version mismatch)
    facts = fleet.probe([h])[h].value
    assert facts is not None
    assert facts.versions.driver_kernel_module == "570.133.20"
    assert facts.versions.driver_library is None
    assert "driver_library_mismatch" in facts.versions.unreadable["driver_library"] or \
        "mismatch" in json.dumps(facts.source_errors)
    assert facts.versions.packages is not None
    assert facts.versions.packages.get("nvidia-driver-580-open") is not None
    assert "driver.agreement" in _fails(_checks(matrix, fleet, h))
    bench = fleet.benchmark([h], "synthetic")[h]
    assert not bench.ok and "mismatch" in (bench.error or "")
    assert gated_reboot(fleet, {h: target}).results[h].ok
    facts = fleet.probe([h])[h].value
    assert facts is not None
    assert facts.versions.driver_library == facts.versions.driver_kernel_module == "580.95.05"
    assert facts.identity is not None and facts.identity.uptime_s == 0
    assert not _checks(matrix, fleet, h)
    # idempotent: a second apply changes nothing
    again = fleet.apply([h], target)[h]
    assert again.ok and not again.changed and again.value is not None
    assert not again.value.changed


def test_rollback_to_previous_release(matrix: Matrix) -> None:
    fleet = SimFleet.build(matrix, 40, seed=2)
    h = "a100-00002"
    _upgrade(fleet, matrix, h, "r580-cuda13.0")
    _upgrade(fleet, matrix, h, "r570-cuda12.8")
    assert fleet.installed_release(h) == fleet.loaded_release(h) == "r570-cuda12.8"
    assert not _checks(matrix, fleet, h)


def test_same_seed_same_everything(matrix: Matrix) -> None:
    def run(seed: int) -> Any:
        fleet = SimFleet.build(matrix, 300, seed=seed, rates={
            "apply_fail": 0.05, "xid_after_upgrade": 0.05, "slow": 0.05, "ecc_rising": 0.05,
            "unreachable": 0.02, "reboot_hangs": 0.02, "drained": 0.02})
        names = [r.name for r in fleet.hosts()][::7]
        rel = matrix.release("r580-cuda13.0")
        applied = {h: (r.ok, r.changed) for h, r in fleet.apply(names, rel).items()}
        rebooted = {h: r.ok for h, r in gated_reboot(fleet, dict.fromkeys(names, rel))
                    .results.items()}
        probes = {h: r.value.to_json_dict() if r.value else r.error
                  for h, r in fleet.probe(names).items()}
        bench = {h: r.value for h, r in fleet.benchmark(names, "replay").items()}
        faults = {h: fleet.faults(h) for h in names}
        return applied, rebooted, probes, bench, faults, fleet.scheduler()._nodes.keys()

    a, b = run(11), run(11)
    assert json.dumps(a[:4], sort_keys=True, default=str) == json.dumps(
        b[:4], sort_keys=True, default=str)
    assert a[4] == b[4] and list(a[5]) == list(b[5])
    assert json.dumps(run(12)[3], default=str) != json.dumps(a[3], default=str)


def test_results_do_not_depend_on_call_order(matrix: Matrix) -> None:
    f1 = SimFleet.build(matrix, 50, seed=5)
    f2 = SimFleet.build(matrix, 50, seed=5)
    hosts = ["h100-00001", "h100-00002", "a100-00003"]
    r1 = f1.benchmark(hosts, "synthetic")
    r2 = {h: f2.benchmark([h], "synthetic")[h] for h in reversed(hosts)}
    assert {h: r.value for h, r in r1.items()} == {h: r.value for h, r in r2.items()}


def test_scale_10000_hosts_probe_100_fast(matrix: Matrix) -> None:
    t0 = time.perf_counter()
    fleet = SimFleet.build(matrix, 10_000, seed=7)
    names = [r.name for r in fleet.hosts()][::100]
    results = fleet.probe(names)
    elapsed = time.perf_counter() - t0
    assert len(fleet) == 10_000 and len(results) == 100
    assert all(r.ok and r.value is not None and len(r.value.gpus) in (4, 8)
               for r in results.values())
    # a guard against a build or probe that grows with the fleet squared (~0.5 s idle; the
    # speed goal itself is measured by benchmarks/rollout_scale.py), with room for a loaded CI
    assert elapsed < 20.0, f"build 10,000 + probe 100 took {elapsed:.2f} s"


def test_benchmark_samples_and_perf_model(matrix: Matrix) -> None:
    fleet = SimFleet.build(matrix, 40, seed=2, release_perf={"r580-cuda13.0": 0.75})
    h1, h2 = "h100-00001", "h100-00002"
    _upgrade(fleet, matrix, h2, "r580-cuda13.0")
    syn = fleet.benchmark([h1, h2], "synthetic", {"samples": 60})
    rep = fleet.benchmark([h1, h2], "replay")
    assert set(syn[h1].value or {}) == {"tflops", "latency_ms", "errors"}
    assert set(rep[h1].value or {}) == {"latency_ms", "throughput_rps", "errors"}
    assert len((syn[h1].value or {})["tflops"]) == 60
    assert len((rep[h1].value or {})["latency_ms"]) == 50

    def mean(r: HostResult[Any], k: str) -> float:
        xs = r.value[k]
        return sum(xs) / len(xs)

    ratio = mean(syn[h2], "tflops") / mean(syn[h1], "tflops")
    assert 0.72 < ratio < 0.78  # the slow release: factor 0.75, 2% noise
    assert mean(rep[h2], "latency_ms") > 1.25 * mean(rep[h1], "latency_ms")
    assert fleet.benchmark([h1], "nccl")[h1].error == \
        "unknown benchmark suite 'nccl' (known: synthetic, replay)"


# ------------------------------------------------------------------------------------ faults
def test_fault_apply_failure_keeps_the_old_release(matrix: Matrix) -> None:
    fleet = SimFleet.build(matrix, 40, seed=2, faults={"h100-00003": HostFaults(apply_fail=True)})
    h = "h100-00003"
    r = fleet.apply([h], matrix.release("r580-cuda13.0"))[h]
    assert not r.ok and r.reachable and "dpkg returned an error" in (r.error or "")
    assert r.value is not None and r.value.changed  # the plan it tried
    assert fleet.installed_release(h) == "r570-cuda12.8"
    assert not _checks(matrix, fleet, h)


def test_fault_unreachable(matrix: Matrix) -> None:
    fleet = SimFleet.build(matrix, 40, seed=2)
    fleet.inject("a100-00001", unreachable=True)
    rel = matrix.release("r580-cuda13.0")
    for call in (lambda h: fleet.probe(h), lambda h: fleet.plan(h, rel),
                 lambda h: fleet.apply(h, rel),
                 lambda h: gated_reboot(fleet, dict.fromkeys(h, rel)).results,
                 lambda h: fleet.benchmark(h, "synthetic")):
        r = call(["a100-00001"])["a100-00001"]
        assert not r.ok and not r.reachable and "Connection timed out" in (r.error or "")
    assert fleet.unreachable_hosts() == ["a100-00001"]
    assert fleet.scheduler().state("a100-00001").state == "down"


@pytest.mark.parametrize("xid", [79, 48])
def test_fault_xid_after_upgrade(matrix: Matrix, xid: int) -> None:
    fleet = SimFleet.build(matrix, 40, seed=2)
    h = "h100-00004"
    fleet.inject(h, xid_after_upgrade=(xid,))
    assert not _checks(matrix, fleet, h)  # nothing before the upgrade
    _upgrade(fleet, matrix, h, "r580-cuda13.0")
    facts = fleet.probe([h])[h].value
    assert facts is not None
    assert [e.xid for e in facts.events() if e.kind == "xid"] == [xid]
    fails = _fails(_checks(matrix, fleet, h))
    if xid == 79:
        assert "gpu.fallen_off_bus" in fails
        assert any("handle" in g.unreadable for g in facts.gpus)
        bench = fleet.benchmark([h], "synthetic")[h]
        assert not bench.ok and "fallen off the bus" in (bench.error or "")
    else:
        assert fails & {"xid.memory", "ecc.uncorrectable", "xid"}, fails
        rep = fleet.benchmark([h], "replay")[h]
        assert rep.ok and sum((rep.value or {})["errors"]) > 0
    # the kernel-log cursor: a second probe since the first sees nothing new
    cursor = facts.kernel_log.cursor if facts.kernel_log else None
    again = fleet.probe([h], since={h: cursor})[h].value
    assert again is not None and again.events() == []
    # rolling back heals it
    _upgrade(fleet, matrix, h, "r570-cuda12.8")
    assert not _checks(matrix, fleet, h)


def test_fault_slow_release_on_one_host(matrix: Matrix) -> None:
    fleet = SimFleet.build(matrix, 40, seed=2, faults={"a100-00005": HostFaults(slow_factor=0.75)})
    h = "a100-00005"
    assert fleet.perf_factor(h) == 1.0
    _upgrade(fleet, matrix, h, "r580-cuda13.0")
    assert fleet.perf_factor(h) == 0.75
    before = fleet.benchmark(["a100-00006"], "synthetic")["a100-00006"].value or {}
    after = fleet.benchmark([h], "synthetic")[h].value or {}
    assert sum(after["tflops"]) / sum(before["tflops"]) == pytest.approx(0.75, abs=0.03)


def test_fault_rising_corrected_ecc(matrix: Matrix) -> None:
    fleet = SimFleet.build(matrix, 40, seed=2)
    h = "l40s-00002"
    fleet.inject(h, ecc_rising=4000)
    counts = []
    for _ in range(4):
        facts = fleet.probe([h])[h].value
        assert facts is not None
        counts.append(max(g.ecc_volatile_corrected or 0 for g in facts.gpus))
    assert counts == [4000, 8000, 12000, 16000]
    checks = _checks(matrix, fleet, h)  # 5th probe: 20,000 > 10,000 volatile: warn
    assert checks.get("ecc.corrected") is Severity.WARN


def test_fault_reboot_never_returns(matrix: Matrix) -> None:
    fleet = SimFleet.build(matrix, 40, seed=2)
    h = "h100-00006"
    fleet.inject(h, reboot_hangs=True)
    assert fleet.apply([h], matrix.release("r580-cuda13.0"))[h].ok
    r = gated_reboot(fleet, {h: matrix.release("r580-cuda13.0")}).results[h]
    assert not r.ok and not r.reachable and "did not come back" in (r.error or "")
    assert not fleet.probe([h])[h].reachable
    fleet.heal(h)
    assert fleet.probe([h])[h].ok


def test_faults_by_rate_are_seeded(matrix: Matrix) -> None:
    rates = {"apply_fail": 0.1, "unreachable": 0.1}
    a = SimFleet.build(matrix, 1000, seed=4, rates=rates)
    b = SimFleet.build(matrix, 1000, seed=4, rates=rates)
    fa = {h.name: a.faults(h.name) for h in a.hosts() if not a.faults(h.name).healthy}
    fb = {h.name: b.faults(h.name) for h in b.hosts() if not b.faults(h.name).healthy}
    assert fa == fb and 150 < len(fa) < 250


def test_probe_document_is_what_hostfacts_validates(matrix: Matrix) -> None:
    fleet = SimFleet.build(matrix, 10, seed=2)
    doc = fleet.probe_document("h100-00001")
    facts = HostFacts.model_validate(json.loads(json.dumps(doc)))
    assert facts.source == "nvml" and len(facts.gpus) == 8
    assert facts.versions.packages is not None
    assert all(p.held for p in facts.versions.packages.items)
    assert facts.gpus[0].name == "NVIDIA H100 80GB HBM3"


def test_clock_is_logical(matrix: Matrix) -> None:
    clock = SimClock()
    fleet = SimFleet.build(matrix, 10, seed=2, clock=clock)
    h = "h100-00001"
    _upgrade(fleet, matrix, h, "r580-cuda13.0")
    clock.advance(3600)
    facts = fleet.probe([h])[h].value
    assert facts is not None and facts.identity is not None
    assert facts.identity.uptime_s == 3600.0
    assert facts.collected_at == clock()


def test_spec(matrix: Matrix, tmp_path: Any) -> None:
    spec = tmp_path / "fleet.yaml"
    spec.write_text("""
seed: 9
pools:
  h100-canary: {hosts: 2}
  h100: {hosts: 8, unit_size: 4, release: r570-cuda12.8}
  lab: {hosts: 2, gpu_model: L40S}
faults:
  h100-00002: {apply_fail: true}
  h100-00003: {xid_after_upgrade: [79]}
drained:
  h100-00008: "ops: PSU swap"
release_perf: {r595-cuda13.2: 0.75}
""")
    fleet = SimFleet.from_spec(SimSpec.load(spec), matrix)
    refs = fleet.hosts()
    assert [r.pool for r in refs] == ["h100-canary"] * 2 + ["h100"] * 8 + ["lab"] * 2
    assert {r.unit for r in refs if r.pool == "h100"} == {"h100-u0001", "h100-u0002"}
    assert fleet.faults("h100-00002").apply_fail
    assert fleet.faults("h100-00003").xid_after_upgrade == (79,)
    assert fleet.release_perf == {"r595-cuda13.2": 0.75}
    st = fleet.scheduler().state("h100-00008")
    assert (st.state, st.reason, st.by_fleet) == ("drained", "ops: PSU swap", False)
    assert fleet.installed_release("lab-00001") == matrix.golden_name("lab")


def test_spec_errors_are_bad_input(matrix: Matrix) -> None:
    from fleet.errors import BadInput

    with pytest.raises(BadInput) as e:
        SimSpec.parse({"pools": {"h100": {"hosts": -1}}, "typo": 1})
    fields = {p.field for p in e.value.problems}
    assert fields == {"pools.h100.hosts", "typo"}
    with pytest.raises(BadInput):
        SimFleet.build(matrix, 4, start="r999")
