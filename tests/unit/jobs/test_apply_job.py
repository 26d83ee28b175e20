"""`pin_hosts` decisions on an in-memory backend: refusals, dry runs, reboots, verification,
rollback targets from the history. The SSH side is tested on the lab (tests/integration/lab)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from fleet.domain.facts import HostFacts
from fleet.domain.matrix.loader import load_matrix
from fleet.domain.matrix.models import Matrix, Release
from fleet.domain.pinning import PinPlan, plan_pin
from fleet.domain.ports import HostRef, HostResult, Samples
from fleet.domain.reboot_gate import RebootPass, require_pass
from fleet.history import list_events, open_history
from fleet.jobs.apply import pin_hosts, previous_known_good
from fleet.sim.facts import KERNELS, boot_facts

ROOT = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


class MemoryBackend:
    """Hosts as package dictionaries; apply runs the real planner. Just enough for the job."""

    def __init__(self, refs: list[HostRef], installed: dict[str, dict[str, str]]) -> None:
        self.refs, self.installed = refs, installed
        self.held: dict[str, set[str]] = {r.name: set() for r in refs}
        self.files: dict[str, dict[str, str | None]] = {r.name: {} for r in refs}
        self.loaded: dict[str, str | None] = {}  # kernel module version per host
        self.down: set[str] = set()
        self.fail_apply: set[str] = set()
        self.rebooted: list[str] = []
        self.no_module: set[str] = set()  # the next-boot kernel has no nvidia module
        self.operator: set[str] = set()  # the GPU Operator's driver container: refused

    def hosts(self) -> list[HostRef]:
        return self.refs

    def _plan(self, name: str, release: Release) -> PinPlan:
        return plan_pin("debian", release.packages("debian"), self.installed[name],
                        self.held[name], self.files[name])

    def plan(self, hosts: Sequence[str], release: Release,
             **_: Any) -> dict[str, HostResult[PinPlan]]:
        return {h: HostResult.unreachable(h, "no route") if h in self.down
                else HostResult.refusal(h, "the GPU Operator's container") if h in self.operator
                else HostResult(h, self._plan(h, release)) for h in hosts}

    def apply(self, hosts: Sequence[str], release: Release,
              **_: Any) -> dict[str, HostResult[PinPlan]]:
        out = self.plan(hosts, release)
        for h in hosts:
            if h in self.down or h in self.operator:
                continue
            if h in self.fail_apply:
                out[h] = HostResult.failed(h, "E: broken package")
                continue
            plan = out[h].value
            assert plan is not None
            for c in plan.changes:
                if c.after is None:
                    self.installed[h].pop(c.package, None)
                else:
                    self.installed[h][c.package] = f"{c.after}-1"
            self.held[h] = {p.name for p in release.packages("debian")}
            for step in plan.steps:
                if step.path is not None:
                    self.files[h][step.path] = step.content
            out[h].changed = plan.changed
        return out

    def reboot(self, hosts: Sequence[str], *, gate: RebootPass) -> dict[str, HostResult[None]]:
        require_pass(gate, hosts)
        self.rebooted += hosts
        return {h: HostResult(h, None, changed=True) for h in hosts}

    def probe(self, hosts: Sequence[str], *, since: Mapping[str, str | None] | None = None,
              ) -> dict[str, HostResult[HostFacts]]:
        out = {}
        for h in hosts:
            driver = next((v.rsplit("-", 1)[0] for p, v in self.installed[h].items()
                           if p.startswith("nvidia-driver")), None)
            facts = HostFacts.model_validate({
                "source": "nvml",
                "versions": {"driver_library": driver, "driver_kernel_module": driver,
                             "packages": {"manager": "dpkg", "items": [
                                 {"name": p, "version": v, "held": p in self.held[h]}
                                 for p, v in self.installed[h].items()]}},
                "boot": boot_facts("debian", driver, None, new_kernel=h in self.no_module),
            })
            out[h] = HostResult(h, facts)
        return out

    def benchmark(self, hosts: Sequence[str], suite: str,
                  params: Mapping[str, Any] | None = None) -> dict[str, HostResult[Samples]]:
        raise NotImplementedError

    def close(self) -> None:
        pass


@pytest.fixture
def matrix() -> Matrix:
    return load_matrix(ROOT / "matrices" / "example.yaml").matrix


def on(release: Release) -> dict[str, str]:
    return {p.name: f"{p.version}-1" for p in release.packages("debian")}


def setup(matrix: Matrix, n: int = 3) -> tuple[MemoryBackend, Release, Release]:
    pool = next(p for p, s in matrix.pools.items() if not s.canary)
    golden = matrix.golden_for(pool)
    other = next(r for r in matrix.allowed_releases() if r.name != golden.name)
    refs = [HostRef(f"h{i}", pool=pool) for i in range(n)]
    return MemoryBackend(refs, {r.name: on(golden) for r in refs}), golden, other


def test_dry_run_reports_and_touches_nothing(matrix: Matrix, tmp_path: Path) -> None:
    backend, golden, other = setup(matrix)
    with open_history(str(tmp_path / "h.db")) as h:
        results = pin_hosts(backend, h, matrix, {r.name: other for r in backend.refs},
                            now=lambda: NOW, dry=True)
        assert list_events(h) == []
    assert {r.outcome for r in results} == {"would_change"}
    assert all(r.from_release == golden.name for r in results)
    assert backend.installed["h0"] == on(golden)


def test_apply_moves_reboots_verifies_and_second_run_is_noop(matrix: Matrix,
                                                             tmp_path: Path) -> None:
    backend, golden, other = setup(matrix)
    targets = {r.name: other for r in backend.refs}
    with open_history(str(tmp_path / "h.db")) as h:
        first = pin_hosts(backend, h, matrix, targets, now=lambda: NOW)
        assert [r.outcome for r in first] == ["changed"] * 3, [r.error for r in first]
        assert sorted(backend.rebooted) == ["h0", "h1", "h2"]
        second = pin_hosts(backend, h, matrix, targets, now=lambda: NOW)
        assert [r.outcome for r in second] == ["unchanged"] * 3
        kinds = [e.kind for e in list_events(h)]
        assert kinds.count("apply.start") == 3 and kinds.count("apply.end") == 3
        prev, source = previous_known_good(h, matrix, "h0", backend.refs[0].pool)
        assert (prev.name if prev else None, source) == (golden.name, "history")


def test_a_host_whose_next_kernel_has_no_module_is_refused_not_rebooted(
        matrix: Matrix, tmp_path: Path) -> None:
    """The pre-reboot gate: h1's default boot entry is a newer kernel without an nvidia module
    of the target version; apply pins it but does not reboot it, fails it with a finding that
    names the kernel and the fix, and the other hosts go through."""
    backend, golden, other = setup(matrix)
    backend.no_module.add("h1")
    targets = {r.name: other for r in backend.refs}
    with open_history(str(tmp_path / "h.db")) as h:
        res = {r.host: r for r in pin_hosts(backend, h, matrix, targets, now=lambda: NOW)}
    assert sorted(backend.rebooted) == ["h0", "h2"]
    assert res["h0"].outcome == res["h2"].outcome == "changed"
    bad = res["h1"]
    assert bad.outcome == "failed" and not bad.rebooted
    kernel = KERNELS["debian"][1]
    assert f"kernel {kernel} has no nvidia {other.driver.version} module" in (bad.error or "")
    assert f"dkms autoinstall -k {kernel}" in (bad.error or "")
    assert [f.check for f in bad.findings] == ["node.next_boot"]


def test_a_host_whose_driver_the_gpu_operator_manages_is_refused(matrix: Matrix,
                                                               tmp_path: Path) -> None:
    """The backend's refusal (fleet.remote.backend.driver_refusals) reads as refused: nothing
    pinned or rebooted there, recorded, and the other hosts go through."""
    backend, golden, other = setup(matrix)
    backend.operator.add("h1")
    with open_history(str(tmp_path / "h.db")) as h:
        res = {r.host: r for r in pin_hosts(backend, h, matrix,
                                            {r.name: other for r in backend.refs},
                                            now=lambda: NOW)}
        ends = [e for e in list_events(h) if e.kind == "apply.end" and e.subject == "h1"]
    assert res["h1"].outcome == "refused" and "GPU Operator" in (res["h1"].error or "")
    assert backend.installed["h1"] == on(golden) and "h1" not in backend.rebooted
    assert res["h0"].outcome == "changed" and len(ends) == 1


def test_unreachable_and_failed_hosts_do_not_stop_the_rest(matrix: Matrix,
                                                           tmp_path: Path) -> None:
    backend, golden, other = setup(matrix)
    backend.down.add("h1")
    backend.fail_apply.add("h2")
    with open_history(str(tmp_path / "h.db")) as h:
        results = {r.host: r for r in pin_hosts(backend, h, matrix,
                                                 {r.name: other for r in backend.refs},
                                                 now=lambda: NOW)}
    assert results["h0"].outcome == "changed"
    assert results["h1"].outcome == "unreachable"
    assert results["h2"].outcome == "failed"
    assert (results["h2"].error or "").startswith("E: broken package; restoring")
    assert backend.installed["h2"] == on(golden)  # still on its previous release


def test_blocked_release_is_refused(matrix: Matrix, tmp_path: Path) -> None:
    from fleet.domain.matrix.models import BlockedVersion

    backend, golden, other = setup(matrix)
    block = BlockedVersion(version=other.driver.version, reason="Xid 79 under load")
    blocked = matrix.model_copy(update={"policy": matrix.policy.model_copy(
        update={"blocked": [*matrix.policy.blocked, block]})})
    with open_history(str(tmp_path / "h.db")) as h:
        results = pin_hosts(backend, h, blocked, {"h0": other, "h1": golden}, now=lambda: NOW)
    assert results[0].outcome == "refused" and "Xid 79 under load" in (results[0].error or "")
    assert results[1].outcome == "changed"  # pinned and held; the refusal is per host
    assert backend.installed["h0"] == on(golden)


def test_gpu_architecture_is_refused(matrix: Matrix, tmp_path: Path) -> None:
    backend, golden, _ = setup(matrix)
    r580 = next(r for r in matrix.releases if r.branch == "580")
    newer = r580.model_copy(update={"name": "r999", "driver": r580.driver.model_copy(
        update={"version": "999.1.2"})})
    backend.refs[1] = HostRef("h1", pool=backend.refs[1].pool, gpu_model="V100")
    with open_history(str(tmp_path / "h.db")) as h:
        results = pin_hosts(backend, h, matrix, {"h1": newer}, now=lambda: NOW)
    assert results[0].outcome == "refused"
    assert "last branch supporting V100" in (results[0].error or "")


def test_pools_under_an_active_rollout_are_refused_unless_forced(matrix: Matrix,
                                                                 tmp_path: Path) -> None:
    from fleet.history.rollouts import create_rollout

    backend, golden, other = setup(matrix)
    pool = backend.refs[0].pool
    with open_history(str(tmp_path / "h.db")) as h:
        rid = create_rollout(h, matrix_path="m.yaml", release=other.name, pools=[pool],
                             waves=[], started_by="tester", owner="tester@box", pid=1,
                             at=NOW, wall=NOW)
        refused = pin_hosts(backend, h, matrix, {"h0": other}, now=lambda: NOW)
        assert refused[0].outcome == "refused" and f"rollout {rid}" in (refused[0].error or "")
        assert backend.installed["h0"] == on(golden)
        forced = pin_hosts(backend, h, matrix, {"h0": other}, now=lambda: NOW, force=True)
        assert forced[0].outcome == "changed"
        assert [e.kind for e in list_events(h, kind="apply.force")] == ["apply.force"]


def test_the_schedulers_word_on_the_driver_refuses_before_anything_is_planned(
        matrix: Matrix) -> None:
    """A scheduler that knows the GPU Operator's driver pods (Kubernetes: `driver_owner`)
    refuses its hosts before the plan reads them; unknown is refused too."""
    from fleet.domain.driver_owner import DriverOwner

    class Cluster:
        name = "kubernetes"
        owners = {"h0": DriverOwner("gpu-operator", "pod gpu-operator/nvidia-driver-x"),
                  "h1": DriverOwner("unknown", "node h1: connection refused"), "h2": None}

        def driver_owner(self, host: str) -> DriverOwner | None:
            return self.owners[host]

    backend, golden, other = setup(matrix)
    planned: list[str] = []
    plan = backend.plan
    backend.plan = lambda hosts, rel, **kw: (planned.extend(hosts), plan(hosts, rel))[1]  # type: ignore[method-assign]
    res = {r.host: r for r in pin_hosts(backend, None, matrix,
                                        {r.name: other for r in backend.refs},
                                        now=lambda: NOW, dry=True,
                                        scheduler=Cluster())}  # type: ignore[arg-type]
    assert planned == ["h2"]
    assert res["h0"].outcome == res["h1"].outcome == "refused"
    assert "spec.driver.version" in (res["h0"].error or "")
    assert "cannot tell" in (res["h1"].error or "")
    assert res["h2"].outcome == "would_change"
