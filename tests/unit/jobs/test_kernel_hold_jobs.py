"""The pool's kernel hold through the jobs: `fleet apply` (dry run and real) and a rollout pass
it to the backend, the simulated fleet holds and releases, and a bad `kernel.hold` is bad input."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from fleet.domain.matrix.loader import load_matrix
from fleet.domain.matrix.models import Matrix
from fleet.domain.matrix.rollout_settings import KernelSettings
from fleet.history import open_history
from fleet.jobs.apply import pin_hosts
from fleet.sim import SimFleet
from tests.conftest import run_fleet

ROOT = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
POOL = "h100"
HELD = {"debian": ["linux-headers-5.15.0-119-generic", "linux-headers-generic",
                   "linux-image-5.15.0-119-generic", "linux-image-generic"],  # not linux-generic
        "rhel": ["kernel", "kernel-core", "kernel-devel", "kernel-modules"]}


@pytest.fixture
def matrix() -> Matrix:
    return load_matrix(ROOT / "matrices" / "example.yaml").matrix


def holding(matrix: Matrix, hold: bool = True) -> Matrix:
    pools = dict(matrix.pools)
    pools[POOL] = pools[POOL].model_copy(update={"kernel": KernelSettings(hold=hold)})
    return matrix.model_copy(update={"pools": pools})


def test_apply_holds_the_kernel_says_so_in_the_dry_run_and_a_pool_without_releases_it(
        matrix: Matrix, tmp_path: Path) -> None:
    fleet = SimFleet.build(matrix, pools={POOL: 2}, seed=3)
    names = [r.name for r in fleet.hosts()]
    on = {n: matrix.release(fleet.state(n)["installed"]) for n in names}  # where they are
    held = holding(matrix)
    with open_history(str(tmp_path / "h.db")) as h:
        assert {r.outcome for r in pin_hosts(fleet, h, matrix, on, now=lambda: NOW)} == {
            "unchanged"}  # on its release and no hold asked: nothing to do
        dry = pin_hosts(fleet, None, held, on, now=lambda: NOW, dry=True)
        for r in dry:
            fam = fleet.state(r.host)["os_family"]
            assert r.outcome == "would_change" and not r.reboot_required
            assert r.change is not None
            tool = "apt-mark" if fam == "debian" else "dnf versionlock"
            assert [str(x) for x in r.change.holds] == [
                f"hold {n} ({tool})" for n in HELD[fam]]
        done = pin_hosts(fleet, h, held, on, now=lambda: NOW)
        assert {(r.outcome, r.rebooted) for r in done} == {("changed", False)}
        for n in names:
            fam = fleet.state(n)["os_family"]
            assert fleet.state(n)["kernel_held"] == HELD[fam]
        again = pin_hosts(fleet, h, held, on, now=lambda: NOW)  # idempotent
        assert {r.outcome for r in again} == {"unchanged"}
        off = pin_hosts(fleet, None, matrix, on, now=lambda: NOW, dry=True)
        assert all(r.change is not None and {x.action for x in r.change.holds} == {"unhold"}
                   for r in off)
        pin_hosts(fleet, h, matrix, on, now=lambda: NOW)
    assert all(fleet.state(n)["kernel_held"] == [] for n in names)


def test_a_rollout_pins_with_the_pools_kernel_hold(matrix: Matrix, tmp_path: Path) -> None:
    """The backend is told which hosts hold the kernel at every pin of a rollout."""
    from tests.unit.rollout.helpers import Rig

    rig = Rig(holding(matrix), tmp_path, pools={POOL: 2})
    seen: list[tuple[set[str], frozenset[str]]] = []
    inner = rig.fleet.apply

    def apply(hosts, release, **kw):  # type: ignore[no-untyped-def]
        seen.append((set(hosts), frozenset(kw.get("kernel_hold", ()))))
        return inner(hosts, release, **kw)

    rig.fleet.apply = apply  # type: ignore[method-assign]
    target = matrix.golden_for(POOL)
    res = rig.start(pools=[POOL])
    assert seen and all(hosts and hosts <= hold for hosts, hold in seen), (res, seen)
    moved = [r.name for r in rig.fleet.hosts()
             if rig.fleet.state(r.name)["installed"] == target.name]
    assert moved and all(rig.fleet.state(n)["kernel_held"] for n in moved)


@pytest.mark.parametrize("value,field", [("1", "hold"), ('"yes"', "hold"),
                                         ("true, pin: true", "pin")])
def test_a_bad_kernel_hold_is_bad_input_naming_the_line(tmp_path: Path, value: str,
                                                         field: str) -> None:
    text = (ROOT / "matrices" / "example.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("\n  h100:\n", f"\n  h100:\n    kernel: {{hold: {value}}}\n", 1))
    line = bad.read_text().splitlines().index(f"    kernel: {{hold: {value}}}") + 1
    r = run_fleet("matrix", "check", str(bad))
    assert r.returncode == 2, r.stdout + r.stderr
    out = r.stdout + r.stderr
    assert f"bad.yaml:{line}" in out and "kernel" in out and field in out, out
