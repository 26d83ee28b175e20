"""`fleet apply` puts the node state right (issue 23): the settable differences from the pool's
profile become nvidia-smi commands run through the backend's NodeCommands, an ECC change goes
through the one pre-reboot gate, a second run changes nothing, the dry run lists the commands,
firmware is never touched. The SSH side: tests/integration/lab/test_node_state_lab.py."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from fleet.domain.facts import HostFacts
from fleet.domain.matrix.models import Matrix, Release
from fleet.domain.matrix.profiles import NodeProfile
from fleet.domain.node_commands import UnsafeCommand, check_argv, shell_line
from fleet.domain.node_plan import BOOT_SCRIPT, BOOT_UNIT
from fleet.domain.ports import HostRef, HostResult
from fleet.domain.reboot_gate import RebootPass
from fleet.history import list_events, open_history
from fleet.jobs.apply import pin_hosts, previous_known_good
from tests.unit.jobs.test_apply_job import NOW, MemoryBackend, on
from tests.unit.jobs.test_apply_job import matrix as matrix  # noqa: F401 (fixture)

PROFILE = {"gpu": {"persistence_mode": True, "compute_mode": "default", "ecc": True,
                   "power_limit_w": "default"},
           "firmware": {"vbios": {"H100": ["96.00.99.00.01"]}}}
COMPUTE = {"DEFAULT": "default", "EXCLUSIVE_PROCESS": "exclusive_process"}


def gpu(i: int, **over: Any) -> dict[str, Any]:
    return {"index": i, "name": "NVIDIA H100 80GB HBM3", "persistence_mode": True,
            "compute_mode": "default", "power_limit_w": 700.0, "power_limit_default_w": 700.0,
            "power_limit_min_w": 200.0, "power_limit_max_w": 700.0, "ecc_mode_current": True,
            "ecc_mode_pending": True, "vbios_version": "96.00.99.00.01", **over}


class NodeBackend(MemoryBackend):
    """MemoryBackend whose hosts have GPUs that nvidia-smi commands change, with a real GPU's
    rules for what a reboot does (ECC pending applied, power limit back to default)."""

    def __init__(self, refs: list[HostRef], installed: dict[str, dict[str, str]]) -> None:
        super().__init__(refs, installed)
        self.gpus = {r.name: [gpu(0), gpu(1)] for r in refs}
        self.ran: list[tuple[str, tuple[str, ...]]] = []
        self.boot: dict[str, dict[str, str]] = {}  # the boot unit's files on each host

    def probe(self, hosts: Sequence[str], **kw: Any) -> dict[str, HostResult[HostFacts]]:
        out = super().probe(hosts, **kw)
        for h, res in out.items():
            assert res.value is not None
            data = res.value.model_dump(mode="json", by_alias=True, exclude_none=True)
            res.value = HostFacts.model_validate({**data, "gpus": self.gpus[h],
                                                  "node_tools": self.tools(h)})
        return out

    def tools(self, host: str) -> dict[str, Any]:
        """The probe's `node_tools` as the host's boot unit files make it."""
        files = self.boot.get(host, {})

        def sha(path: str) -> str | None:
            return hashlib.sha256(files[path].encode()).hexdigest() if path in files else None

        return {"boot_unit_sha256": sha(BOOT_UNIT), "boot_script_sha256": sha(BOOT_SCRIPT),
                "boot_enabled": BOOT_UNIT in files, "mig_parted": None,
                "mig_manager_unit": None}

    def run_commands(self, commands: Mapping[str, Sequence[tuple[str, ...]]], *,
                     files: Mapping[str, Mapping[str, str]] | None = None,
                     remove_boot: Collection[str] = ()
                     ) -> dict[str, HostResult[list[str]]]:
        wrote = set()
        for host, want in (files or {}).items():
            if self.boot.get(host) != dict(want):
                self.boot[host] = dict(want)
                wrote.add(host)
        for host in remove_boot:
            if self.boot.pop(host, None) is not None:
                wrote.add(host)
        for host, argvs in commands.items():
            for argv in argvs:
                check_argv(argv)
                self.ran.append((host, tuple(argv)))
                assert argv[:2] == ("nvidia-smi", "-i"), argv
                g, flag, value = self.gpus[host][int(argv[2])], argv[3], argv[4]
                if flag == "-pm":
                    g["persistence_mode"] = value == "1"
                elif flag == "-c":
                    g["compute_mode"] = COMPUTE[value]
                elif flag == "-pl":
                    g["power_limit_w"] = float(value)
                elif flag == "-e":
                    g["ecc_mode_pending"] = value == "1"
        return {h: HostResult(h, ["All done."], changed=bool(commands.get(h)) or h in wrote)
                for h in {*commands, *(files or {}), *remove_boot}}

    def reboot(self, hosts: Sequence[str], *, gate: RebootPass) -> dict[str, HostResult[None]]:
        out = super().reboot(hosts, gate=gate)
        for h in hosts:
            for g in self.gpus[h]:
                g["ecc_mode_current"] = g["ecc_mode_pending"]
                g["power_limit_w"] = g["power_limit_default_w"]
        return out


def with_profile(matrix: Matrix, pool: str) -> Matrix:
    pools = dict(matrix.pools)
    pools[pool] = pools[pool].model_copy(update={"profile": "p"})
    return matrix.model_copy(update={"profiles": {"p": NodeProfile.model_validate(PROFILE)},
                                     "pools": pools})


def rig(matrix: Matrix, tmp: Path) -> tuple[NodeBackend, Matrix, Release]:
    """Two hosts pinned on their pool's golden release (holds and pin files in place), GPUs
    as the profile wants: a test then puts one setting wrong."""
    pool = next(p for p, s in matrix.pools.items() if not s.canary)
    golden = matrix.golden_for(pool)
    refs = [HostRef("h0", pool=pool), HostRef("h1", pool=pool)]
    backend, m = NodeBackend(refs, {r.name: on(golden) for r in refs}), with_profile(matrix, pool)
    with open_history(str(tmp / "setup.db")) as h:
        done = pin_hosts(backend, h, m, {r.name: golden for r in refs}, now=lambda: NOW)
    assert [r.error for r in done] == [None, None]
    backend.rebooted, backend.ran = [], []
    return backend, m, golden


def test_settable_differences_are_applied_and_a_second_run_changes_nothing(
        matrix: Matrix, tmp_path: Path) -> None:
    backend, m, golden = rig(matrix, tmp_path)
    backend.gpus["h0"][0].update(power_limit_w=300.0, persistence_mode=False)
    backend.gpus["h0"][1].update(compute_mode="exclusive_process")
    targets = dict.fromkeys(["h0", "h1"], golden)
    with open_history(str(tmp_path / "h.db")) as h:
        dry = pin_hosts(backend, None, m, targets, now=lambda: NOW, dry=True)
        assert [r.outcome for r in dry] == ["would_change", "unchanged"]
        assert backend.ran == [] and list_events(h) == []
        lines = dry[0].node.lines() if dry[0].node else []
        assert "node persistence_mode GPU 0: 0 -> 1: nvidia-smi -i 0 -pm 1" in lines
        assert any("nvidia-smi -i 0 -pl 700" in line for line in lines)
        assert dry[0].as_dict()["node_state"]["reboot"] is False

        first = pin_hosts(backend, h, m, targets, now=lambda: NOW)
        assert [r.outcome for r in first] == ["changed", "unchanged"], [r.error for r in first]
        assert backend.ran == [("h0", ("nvidia-smi", "-i", "0", "-pm", "1")),
                               ("h0", ("nvidia-smi", "-i", "1", "-c", "DEFAULT")),
                               ("h0", ("nvidia-smi", "-i", "0", "-pl", "700"))]
        assert backend.rebooted == [] and first[0].changes == []  # no package, no reboot
        assert not [f for f in first[0].findings if f.check.startswith("node.")
                    and f.severity != "ok"]

        second = pin_hosts(backend, h, m, targets, now=lambda: NOW)
        assert [r.outcome for r in second] == ["unchanged", "unchanged"]
        assert len(backend.ran) == 3 and second[0].node is not None
        assert second[0].node.plan.steps == []


def test_ecc_change_goes_through_the_reboot_gate(matrix: Matrix, tmp_path: Path) -> None:
    backend, m, golden = rig(matrix, tmp_path)
    backend.gpus["h1"][1].update(ecc_mode_current=False, ecc_mode_pending=False)
    with open_history(str(tmp_path / "h.db")) as h:
        (res,) = pin_hosts(backend, h, m, {"h1": golden}, now=lambda: NOW)
    assert res.outcome == "changed", res.error
    assert backend.ran == [("h1", ("nvidia-smi", "-i", "1", "-e", "1"))]
    assert backend.rebooted == ["h1"] and res.rebooted
    assert backend.gpus["h1"][1]["ecc_mode_current"] is True


def test_ecc_change_with_a_driver_change_costs_one_reboot(matrix: Matrix,
                                                          tmp_path: Path) -> None:
    """ECC mode waits in the GPU for the next reboot, whatever reboots it: set before the pin,
    the driver's reboot applies it, and no second reboot follows."""
    backend, m, golden = rig(matrix, tmp_path)
    other = next(r for r in m.allowed_releases() if r.name != golden.name)
    backend.gpus["h1"][1].update(ecc_mode_current=False, ecc_mode_pending=False)
    with open_history(str(tmp_path / "h.db")) as h:
        (res,) = pin_hosts(backend, h, m, {"h1": other}, now=lambda: NOW)
    assert res.outcome == "changed", res.error
    assert res.reboot_required and res.rebooted
    assert backend.rebooted == ["h1"]  # the driver's reboot, once
    assert backend.ran == [("h1", ("nvidia-smi", "-i", "1", "-e", "1"))]
    assert backend.gpus["h1"][1]["ecc_mode_current"] is True
    assert res.node is not None and res.node.plan.steps == [] and not res.node.plan.reboot


def test_ecc_change_refused_by_the_gate_is_not_rebooted(matrix: Matrix,
                                                        tmp_path: Path) -> None:
    backend, m, golden = rig(matrix, tmp_path)
    backend.gpus["h1"][0].update(ecc_mode_current=False, ecc_mode_pending=False)
    backend.no_module.add("h1")  # the next-boot kernel could not load the driver
    with open_history(str(tmp_path / "h.db")) as h:
        (res,) = pin_hosts(backend, h, m, {"h1": golden}, now=lambda: NOW)
    assert res.outcome == "failed" and backend.rebooted == []
    assert "reboot" in (res.error or "")


def test_firmware_is_never_changed_only_named(matrix: Matrix, tmp_path: Path) -> None:
    backend, m, golden = rig(matrix, tmp_path)
    backend.gpus["h0"][1]["vbios_version"] = "96.00.74.00.0B"
    with open_history(str(tmp_path / "h.db")) as h:
        res = pin_hosts(backend, h, m, {"h0": golden}, now=lambda: NOW)[0]
    assert res.outcome == "unchanged" and backend.ran == []
    assert res.node is not None and "nvfwupd" in " ".join(res.node.plan.notes)


def test_a_backend_without_commands_fails_the_host_it_cannot_fix(matrix: Matrix,
                                                                  tmp_path: Path) -> None:
    backend, m, golden = rig(matrix, tmp_path)
    backend.gpus["h0"][0]["persistence_mode"] = False
    plain = MemoryBackend.__new__(MemoryBackend)
    plain.__dict__.update(backend.__dict__)
    plain.probe = backend.probe  # type: ignore[method-assign]
    with open_history(str(tmp_path / "h.db")) as h:
        (res,) = pin_hosts(plain, h, m, {"h0": golden}, now=lambda: NOW)
    assert res.outcome == "failed" and "runs no commands" in (res.error or "")


def test_the_boot_unit_is_written_once_where_it_is_missing(matrix: Matrix,
                                                           tmp_path: Path) -> None:
    backend, m, golden = rig(matrix, tmp_path)
    assert set(backend.boot) == {"h0", "h1"}  # the first apply (rig) wrote it
    script = backend.boot["h0"][BOOT_SCRIPT].splitlines()
    # persistence for both GPUs; ECC, the default compute mode and power limit survive or
    # come back by themselves
    assert script[3:] == ["nvidia-smi -pm 1 || rc=1", "exit $rc"]
    del backend.boot["h1"]  # removed by hand: the node state itself is right
    backend.boot["h0"][BOOT_SCRIPT] += "nvidia-smi -pl 300\n"  # edited by hand
    with open_history(str(tmp_path / "h.db")) as h:
        dry = pin_hosts(backend, None, m, {"h0": golden, "h1": golden}, now=lambda: NOW,
                        dry=True)
        assert [r.outcome for r in dry] == ["would_change", "would_change"]
        assert "h1" not in backend.boot and backend.ran == []
        assert [r.node.boot_state if r.node else None for r in dry] == ["stale", "missing"]
        assert dry[1].node is not None and dry[1].node.plan.steps == []
        assert any(line.startswith("node boot unit: missing -> written")
                   for line in dry[1].node.lines())
        assert dry[0].as_dict()["node_state"]["boot_state"] == "stale"
        fixed = pin_hosts(backend, h, m, {"h0": golden}, now=lambda: NOW)
        assert fixed[0].outcome == "changed" and "-pl 300" not in backend.boot["h0"][BOOT_SCRIPT]
        first = pin_hosts(backend, h, m, {"h1": golden}, now=lambda: NOW)
        assert first[0].outcome == "changed" and BOOT_UNIT in backend.boot["h1"]
        assert first[0].node is not None and first[0].node.boot_written
        again = pin_hosts(backend, h, m, {"h1": golden}, now=lambda: NOW)
    assert again[0].outcome == "unchanged" and backend.ran == []


def test_a_node_state_change_is_no_release_move_for_rollback(matrix: Matrix,
                                                              tmp_path: Path) -> None:
    backend, m, golden = rig(matrix, tmp_path)
    other = next(r for r in m.allowed_releases() if r.name != golden.name)
    with open_history(str(tmp_path / "h.db")) as h:
        moved = pin_hosts(backend, h, m, {"h0": other}, now=lambda: NOW)
        assert moved[0].outcome == "changed", moved[0].error
        backend.gpus["h0"][0]["persistence_mode"] = False
        fixed = pin_hosts(backend, h, m, {"h0": other}, now=lambda: NOW)
        assert fixed[0].outcome == "changed" and fixed[0].from_release == other.name
        prev, source = previous_known_good(h, m, "h0", backend.refs[0].pool)
    assert (prev.name if prev else None, source) == (golden.name, "history")


@pytest.mark.parametrize("argv", [("sh", "-c", "reboot"), ("nvidia-smi", "-i", "0; reboot"),
                                  ("nvidia-smi", "$(id)"), ("nvidia-smi", "a b"),
                                  ("nvidia-smi", ""), ()])
def test_unsafe_commands_are_refused(argv: tuple[str, ...]) -> None:
    with pytest.raises(UnsafeCommand):
        check_argv(argv)


def test_safe_commands_are_quoted_plainly() -> None:
    assert shell_line(("nvidia-smi", "mig", "-i", "0", "-cgi", "3g.40gb,3g.40gb", "-C")) == \
        "nvidia-smi mig -i 0 -cgi 3g.40gb,3g.40gb -C"


def test_a_boot_unit_the_profile_no_longer_needs_is_removed_once(matrix: Matrix,
                                                                 tmp_path: Path) -> None:
    """The profile stops declaring anything a reboot forgets (persistence mode dropped): the
    unit `fleet apply` installed for it would go on reapplying it at every boot. The dry run
    lists the removal, the apply removes it, a second apply changes nothing."""
    backend, m, golden = rig(matrix, tmp_path)
    assert set(backend.boot) == {"h0", "h1"}
    m = m.model_copy(update={"profiles": {"p": NodeProfile.model_validate(
        {"gpu": {"ecc": True}})}})
    targets = dict.fromkeys(["h0", "h1"], golden)
    with open_history(str(tmp_path / "h.db")) as h:
        dry = pin_hosts(backend, None, m, targets, now=lambda: NOW, dry=True)
        assert [r.outcome for r in dry] == ["would_change", "would_change"]
        assert dry[0].node is not None and dry[0].node.boot_state == "obsolete"
        assert any(line.startswith("node boot unit: the profile declares nothing a reboot "
                                   f"forgets -> removed: {BOOT_UNIT}")
                   for line in dry[0].node.lines())
        assert set(backend.boot) == {"h0", "h1"}  # a dry run removes nothing
        done = pin_hosts(backend, h, m, targets, now=lambda: NOW)
        assert [r.outcome for r in done] == ["changed", "changed"], [r.error for r in done]
        assert backend.boot == {} and backend.ran == [] and backend.rebooted == []
        assert done[0].as_dict()["node_state"]["boot_removed"] is True
        again = pin_hosts(backend, h, m, targets, now=lambda: NOW)
    assert [r.outcome for r in again] == ["unchanged", "unchanged"]
    assert again[0].node is not None and again[0].node.boot_state == "current"
    assert not again[0].node.boot_removed


def test_boot_written_is_said_when_steps_ran_too(matrix: Matrix, tmp_path: Path) -> None:
    """A step and a missing boot unit on one host: both are done, and the record says the unit
    was written (it used to say so only when no step ran)."""
    backend, m, golden = rig(matrix, tmp_path)
    del backend.boot["h0"]
    backend.gpus["h0"][0]["persistence_mode"] = False
    with open_history(str(tmp_path / "h.db")) as h:
        (res,) = pin_hosts(backend, h, m, {"h0": golden}, now=lambda: NOW)
        assert res.outcome == "changed", res.error
        assert res.node is not None and res.node.applied and res.node.boot_written
        assert BOOT_UNIT in backend.boot["h0"]
        backend.gpus["h0"][0]["persistence_mode"] = False  # a step again, the unit in place
        (res,) = pin_hosts(backend, h, m, {"h0": golden}, now=lambda: NOW)
    assert res.node is not None and res.node.applied and not res.node.boot_written
