"""The rollout's health gate judges the pool's node profile (issue 23): a host that moved to
the new release but whose GPUs differ from the profile in a way that fails (NVLink links down)
fails its wave, as any other failing health check does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleet.domain.matrix.models import Matrix
from fleet.domain.matrix.profiles import NodeProfile
from fleet.domain.node_facts import NvLinkLink
from fleet.domain.ports import HostResult
from tests.unit.rollout.helpers import RebootLog, Rig, Wrap


def with_profile(matrix: Matrix, pool: str, profile: dict[str, Any]) -> Matrix:
    pools = dict(matrix.pools)
    pools[pool] = pools[pool].model_copy(update={"profile": "p"})
    return matrix.model_copy(update={"profiles": {"p": NodeProfile.model_validate(profile)},
                                     "pools": pools})


def test_nvlink_down_after_the_move_fails_the_health_gate(matrix: Matrix,
                                                          tmp_path: Path) -> None:
    m = with_profile(matrix, "h100-canary", {"links": {"nvlink_active": 2}})
    rig = Rig(m, tmp_path, pools={"h100-canary": 3})
    first = next(h.name for h in rig.fleet.hosts() if h.pool == "h100-canary")
    start = rig.fleet.installed_release(first)
    links = [NvLinkLink(link=0, active=True), NvLinkLink(link=1, active=True)]
    down = [NvLinkLink(link=0, active=True), NvLinkLink(link=1, active=False)]

    def probe(hosts: Any, **kw: Any) -> Any:
        out = rig.fleet.probe(hosts, **kw)
        for name, got in out.items():
            if got.value is None:
                continue
            moved = rig.fleet.installed_release(name) != start
            bad = name == first and moved  # one GPU of the first canary loses a link
            gpus = [g.model_copy(update={"nvlink_links": down if bad and g.index == 0
                                         else links}) for g in got.value.gpus]
            got.value = got.value.model_copy(update={"gpus": gpus})
        return out

    backend = Wrap(rig.fleet)
    backend.probe = probe
    rig.backend = backend
    res = rig.start()
    assert res.status == "rolled_back", res.reason
    assert "health gate" in res.reason
    steps = {s.host: s for s in rig.steps(res.rollout_id)}
    assert steps[first].detail["failed_at"] == "verify"
    assert "NVLink links up 1, wanted 2" in str(steps[first].detail.get("error"))
    assert rig.fleet.installed_release(first) == start


def test_the_verify_step_puts_a_settable_difference_right(matrix: Matrix,
                                                          tmp_path: Path) -> None:
    m = with_profile(matrix, "h100-canary", {"gpu": {"persistence_mode": True}})
    rig = Rig(m, tmp_path, pools={"h100-canary": 3})
    first = next(h.name for h in rig.fleet.hosts() if h.pool == "h100-canary")
    off = {first}  # its GPU 0 has persistence mode off until nvidia-smi -pm 1 runs there
    ran: list[tuple[str, tuple[str, ...]]] = []

    def probe(hosts: Any, **kw: Any) -> Any:
        out = rig.fleet.probe(hosts, **kw)
        for name, got in out.items():
            if got.value is not None and name in off:
                gpus = [g.model_copy(update={"persistence_mode": g.index != 0})
                        for g in got.value.gpus]
                got.value = got.value.model_copy(update={"gpus": gpus})
        return out

    def run_commands(commands: Any, **kw: Any) -> Any:
        for host, argvs in commands.items():
            ran.extend((host, tuple(a)) for a in argvs)
            if ("nvidia-smi", "-i", "0", "-pm", "1") in [tuple(a) for a in argvs]:
                off.discard(host)
        return {h: HostResult(h, ["All done."], changed=True) for h in commands}

    backend = Wrap(rig.fleet)
    backend.probe, backend.run_commands = probe, run_commands
    rig.backend = backend
    res = rig.start()
    assert res.status == "completed", res.reason
    assert ran == [(first, ("nvidia-smi", "-i", "0", "-pm", "1"))]
    steps = {s.host: s for s in rig.steps(res.rollout_id)}
    assert steps[first].detail["node_state"]["applied"] is True
    assert all("node_state" not in s.detail for h, s in steps.items() if h != first)


def test_an_ecc_change_rides_on_the_driver_reboot_of_the_rollout(matrix: Matrix,
                                                                     tmp_path: Path) -> None:
    m = with_profile(matrix, "h100-canary", {"gpu": {"ecc": True}})
    rig = Rig(m, tmp_path, pools={"h100-canary": 3})
    log = RebootLog(rig.fleet)
    first = next(h.name for h in rig.fleet.hosts() if h.pool == "h100-canary")
    state = {"current": False, "pending": False}  # GPU 0 of the first canary: ECC off

    def probe(hosts: Any, **kw: Any) -> Any:
        out = rig.fleet.probe(hosts, **kw)
        got = out.get(first)
        if got is not None and got.value is not None:
            gpus = [g.model_copy(update={"ecc_mode_current": state["current"],
                                         "ecc_mode_pending": state["pending"]})
                    if g.index == 0 else g for g in got.value.gpus]
            got.value = got.value.model_copy(update={"gpus": gpus})
        return out

    def run_commands(commands: Any, **kw: Any) -> Any:
        if ("nvidia-smi", "-i", "0", "-e", "1") in [tuple(a) for a in commands.get(first, [])]:
            state["pending"] = True
        return {h: HostResult(h, ["All done."], changed=True) for h in commands}

    reboot = rig.fleet.reboot  # RebootLog's: counts, checks the host is drained

    def rebooting(hosts: Any, *, gate: Any) -> Any:
        if first in hosts:
            state["current"] = state["pending"]  # the pending ECC mode takes effect
        return reboot(hosts, gate=gate)

    backend = Wrap(rig.fleet)
    backend.probe, backend.run_commands, backend.reboot = probe, run_commands, rebooting
    rig.backend = backend
    res = rig.start()
    assert res.status == "completed", res.reason
    # ECC set before the pin, applied by the driver's reboot: one reboot, not two
    assert log.boots(first) == 1 and log.busy == [] and log.undrained == []
    assert state == {"current": True, "pending": True}
    steps = {s.host: s for s in rig.steps(res.rollout_id)}
    assert "node_state" not in steps[first].detail  # nothing left to do after the reboot
    assert rig.problems(res.rollout_id) == []
