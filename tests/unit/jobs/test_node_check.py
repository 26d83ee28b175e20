"""`fleet node-check`: facts fixtures judged, drains only where nobody else drained, timeouts."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from fleet.domain.checks import Severity
from fleet.domain.matrix.loader import load_matrix
from fleet.domain.ports import AdminState, HostResult
from fleet.jobs import node_check as nc
from fleet.jobs.node_check import (
    LocalProbe,
    NodeInfo,
    check_node,
    drain_reason,
    parse_node_info,
    run_local_probe,
)

ROOT = Path(__file__).resolve().parents[3]
MATRIX = ROOT / "matrices" / "example.yaml"


# ------------------------------------------------------------------------------- fixtures
def gpu(i: int, **over: Any) -> dict[str, Any]:
    g: dict[str, Any] = {
        "index": i, "name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-{i}", "serial": f"S{i}",
        "minor_number": i, "pci_bus_id": f"0000:{0x19 + i:02x}:00.0",
        "pcie_gen_current": 5, "pcie_gen_max": 5, "pcie_width_current": 16,
        "pcie_width_max": 16, "clock_event_reasons": ["gpu_idle"], "temperature_c": 35,
        "ecc_mode_current": True, "ecc_volatile_uncorrected": 0,
        "ecc_aggregate_uncorrected": 0, "remapped_rows_pending": False,
        "remapped_rows_failure": False, "persistence_mode": True, "recovery_action": "none",
        "mig_mode_current": False,
    }
    g.update(over)
    return g


def facts(n_gpus: int = 2, **over: Any) -> dict[str, Any]:
    """A healthy H100 host on the example matrix's r580-cuda13.0 release."""
    doc: dict[str, Any] = {
        "schema": 1, "source": "nvml",
        "identity": {"hostname": "h100-1", "uptime_s": 3600.0, "boot_id": "b"},
        "versions": {
            "driver_library": "580.95.05", "driver_kernel_module": "580.95.05",
            "kernel_module_flavor": "open", "cuda_driver_api": "12.8",
            "packages": {"manager": "dpkg", "items": []},
            "toolkits": [],
        },
        "gpu_count": n_gpus,
        "gpus": [gpu(i) for i in range(n_gpus)],
        "kernel_log": {"source": "journal", "events": []},
        "aer": [],
        "device_nodes": [{"path": p, "mode": "0666", "char_device": True}
                         for p in ("/dev/nvidiactl", "/dev/nvidia-uvm",
                                   *(f"/dev/nvidia{i}" for i in range(n_gpus)))],
        "container_runtime": {"docker_installed": False},
        "frameworks": [],
    }
    doc.update(over)
    return doc


XID79 = {"kind": "xid", "line": 1, "pci": "0000:19:00.0", "xid": 79, "severity": None,
         "text": "NVRM: Xid (PCI:0000:19:00): 79, pid=0, GPU has fallen off the bus."}


def with_xid79() -> dict[str, Any]:
    return facts(kernel_log={"source": "journal", "events": [XID79]})


def no_gpu_stack() -> dict[str, Any]:
    """What the probe reports with no NVML and no nvidia-smi (driver packages gone)."""
    return facts(0, source="none", gpu_count=None, device_nodes=[],
                 source_errors={"nvml": {"error": "library_not_found"},
                                "nvidia_smi": {"error": "command_not_found"}},
                 versions={"driver_library": {"error": "not_available"},
                           "driver_kernel_module": {"error": "not_found"},
                           "cuda_driver_api": {"error": "not_available"},
                           "packages": {"manager": "dpkg", "items": []}, "toolkits": []})


class FakeScheduler:
    def __init__(self, state: AdminState, drain_ok: bool = True) -> None:
        self._state = state
        self.drain_ok = drain_ok
        self.drained: list[tuple[str, str]] = []

    def state(self, host: str) -> AdminState:
        return self._state

    def drain(self, host: str, reason: str) -> HostResult[None]:
        self.drained.append((host, reason))
        if not self.drain_ok:
            return HostResult.failed(host, "scontrol update failed (exit 1): Invalid user")
        return HostResult(host, None, changed=True)


def probe_of(doc: dict[str, Any]) -> Any:
    return lambda _t: LocalProbe(doc, seconds=0.1)


def info(*parts: str, gpus: int | None = 2) -> Any:
    return lambda _n, _t: NodeInfo(tuple(parts), gpus)


AVAILABLE = AdminState("available")


# ------------------------------------------------------------------------------ pure parts
def test_parse_node_info_partitions_and_gpus() -> None:
    text = "h100|gpu:h100:8(S:0-1)\nall*|gpu:h100:8(S:0-1)\n"
    assert parse_node_info(text) == NodeInfo(("h100", "all"), 8)
    assert parse_node_info("debug*|gpu:2,gpu:a100:2\n").gpus == 4
    assert parse_node_info("cpu|(null)\n") == NodeInfo(("cpu",), None)
    assert parse_node_info("x|gpu:h100:4(S:0),nic:1\n").gpus == 4
    assert parse_node_info("") == NodeInfo()


def test_drain_reason_names_the_check_and_stays_short() -> None:
    from fleet.domain.checks import Finding

    one = Finding(check="gpu.fallen_off_bus", severity=Severity.FAIL,
                  message="GPU 0000:19:00.0 fell off the bus (Xid 79)", gpu="0000:19:00.0")
    assert drain_reason([one]) == ("health: gpu.fallen_off_bus: GPU 0000:19:00.0 fell off the "
                                   "bus (Xid 79)")
    long = Finding(check="xid", severity=Severity.FAIL, message="x " * 200)
    text = drain_reason([long, one])
    assert text.startswith("health: xid: x x") and text.endswith("... (+1 more)")
    assert len(text) <= nc.REASON_MAX and "\n" not in text


def test_marker_is_the_slurm_adapters() -> None:
    from fleet.schedulers.slurm import HEALTH, MARKER

    assert (nc.MARKER, nc.HEALTH) == (MARKER, HEALTH)


def test_a_health_drain_is_not_a_rollout_drain() -> None:
    """A node node-check drained is the health checker's, like NHC's: rollouts and apply skip
    it and never resume it; its own reruns leave it as it is."""
    from fleet.schedulers.slurm import SlurmNode

    health = SlurmNode("n1", "IDLE+DRAIN", "fleet: health: gpu.fallen_off_bus: GPU 0 lost")
    rollout = SlurmNode("n1", "IDLE+DRAIN", "fleet: rollout 3 wave 1")
    assert not health.admin_state("fleet:").by_fleet
    assert rollout.admin_state("fleet:").by_fleet


# ----------------------------------------------------------------------------- the check
def test_healthy_node_passes_and_touches_nothing() -> None:
    sched = FakeScheduler(AVAILABLE)
    r = check_node("h100-1", scheduler=sched, drain=True, probe=probe_of(facts()),
                   node_info=info("h100", "all"))
    assert r.exit_code == 0 and not r.failing and r.drain.action == "none"
    assert sched.drained == []


def test_xid79_drains_with_a_fleet_reason() -> None:
    sched = FakeScheduler(AVAILABLE)
    r = check_node("h100-1", scheduler=sched, drain=True, probe=probe_of(with_xid79()),
                   node_info=info("h100"))
    assert r.exit_code == 1
    assert {f.check for f in r.failing} >= {"gpu.fallen_off_bus"}
    assert r.drain.action == "drained"
    [(host, reason)] = sched.drained
    assert host == "h100-1" and not reason.startswith("fleet:")  # the adapter adds the marker
    assert r.drain.reason == f"fleet: {reason}"
    assert any(reason.startswith(f"health: {c}: ") for c in ("gpu.fallen_off_bus", "xid"))


@pytest.mark.parametrize("state", ["drained", "draining", "down"])
def test_someone_elses_drain_is_left_with_its_reason(state: str) -> None:
    sched = FakeScheduler(AdminState(state, "ops: RMA 1", by_fleet=False))  # type: ignore[arg-type]
    r = check_node("h100-1", scheduler=sched, drain=True, probe=probe_of(with_xid79()))
    assert r.exit_code == 1 and sched.drained == []
    assert r.drain.action == "left" and r.drain.reason == "ops: RMA 1"


def test_fleets_own_drain_is_kept_not_rewritten() -> None:
    sched = FakeScheduler(AdminState("drained", "fleet: xid: old", by_fleet=True))
    r = check_node("h100-1", scheduler=sched, drain=True, probe=probe_of(with_xid79()))
    assert r.drain.action == "kept" and sched.drained == []


def test_unreadable_state_drains_nothing() -> None:
    sched = FakeScheduler(AdminState("unknown", "slurm_load_node error: Unable to contact"))
    r = check_node("h100-1", scheduler=sched, drain=True, probe=probe_of(with_xid79()))
    assert r.exit_code == 1 and r.drain.action == "failed" and sched.drained == []


def test_failed_drain_is_reported() -> None:
    sched = FakeScheduler(AVAILABLE, drain_ok=False)
    r = check_node("h100-1", scheduler=sched, drain=True, probe=probe_of(with_xid79()))
    assert r.drain.action == "failed" and "Invalid user" in r.drain.detail


def test_no_drain_reports_only() -> None:
    sched = FakeScheduler(AVAILABLE)
    r = check_node("h100-1", scheduler=sched, drain=False, probe=probe_of(with_xid79()))
    assert r.exit_code == 1 and r.drain.action == "off" and sched.drained == []


def test_missing_gpu_stack_is_a_finding_not_a_crash() -> None:
    sched = FakeScheduler(AVAILABLE)
    r = check_node("h100-1", scheduler=sched, drain=True, probe=probe_of(no_gpu_stack()),
                   node_info=info("h100", gpus=8))  # slurm.conf says 8 GPUs
    assert r.error is None and r.exit_code == 1
    assert "probe.source" in {f.check for f in r.failing}
    assert r.drain.action == "drained"


def test_missing_gpu_stack_on_a_cpu_node_passes() -> None:
    r = check_node("cpu-1", probe=probe_of(no_gpu_stack()), node_info=info("cpu", gpus=None))
    assert r.exit_code == 0


def test_fewer_gpus_than_slurm_conf_fails() -> None:
    r = check_node("h100-1", probe=probe_of(facts(2)), node_info=info("h100", gpus=8))
    assert "gpu.inventory" in {f.check for f in r.failing}


def test_probe_timeout_is_a_failing_finding_and_drains() -> None:
    sched = FakeScheduler(AVAILABLE)
    r = check_node("h100-1", scheduler=sched, drain=True, timeout_s=10,
                   probe=lambda t: LocalProbe(timed_out=True, seconds=t))
    assert [f.check for f in r.failing] == ["probe.timeout"]
    assert r.drain.action == "drained"


def test_probe_crash_drains_nothing_and_exits_3() -> None:
    sched = FakeScheduler(AVAILABLE)
    r = check_node("h100-1", scheduler=sched, drain=True,
                   probe=lambda t: LocalProbe(error="the probe exited 1: SyntaxError"))
    assert r.exit_code == 3 and r.drain.action == "none" and sched.drained == []
    bad = check_node("h100-1", scheduler=sched, drain=True,
                     probe=probe_of({"gpus": "not a list"}))
    assert bad.exit_code == 3 and "invalid" in (bad.error or "") and sched.drained == []


def test_budget_is_split_between_probe_and_drain() -> None:
    budgets: list[float] = []

    def probe(t: float) -> LocalProbe:
        budgets.append(t)
        return LocalProbe(facts())

    clock = iter([0.0, 1.0, 1.0, 1.5, 2.0, 2.0])
    check_node("h100-1", timeout_s=20, probe=probe, node_info=info("h100"),
               monotonic=lambda: next(clock))
    assert budgets == [20 - 1.0 - nc.RESERVE_S]


# -------------------------------------------------------------------- against the matrix
def matrix() -> Any:
    return load_matrix(MATRIX, today=date(2026, 1, 1)).matrix


def conformant(n_gpus: int = 2) -> dict[str, Any]:
    """A host exactly on the example matrix's golden release of pool h100."""
    rel = matrix().golden_for("h100")
    doc = facts(n_gpus)
    doc["versions"]["packages"]["items"] = [
        {"name": p.name, "version": p.version, "held": True} for p in rel.packages("debian")]
    doc["versions"]["toolkits"] = [{"path": "/usr/local/cuda-12.8", "version": "13.0.2"}]
    return doc


def test_conformant_node_passes_against_its_pool() -> None:
    r = check_node("h100-1", matrix=matrix(), probe=probe_of(conformant(8)),
                   node_info=info("h100", "all", gpus=8))
    assert r.exit_code == 0, [f.message for f in r.failing]


def test_pool_from_the_partitions_gives_the_golden_release() -> None:
    m = matrix()
    r = check_node("h100-1", matrix=m, probe=probe_of(facts()), node_info=info("all", "h100"))
    assert r.pool == "h100" and r.release == m.golden_for("h100").name
    assert "golden of pool h100" in r.expect_note


def test_explicit_release_and_unknown_pool() -> None:
    m = matrix()
    other = next(rel for rel in m.releases if rel.driver.version != "580.95.05")
    r = check_node("h100-1", matrix=m, release=other, probe=probe_of(facts()),
                   node_info=info("h100"))
    assert r.release == other.name
    assert "release.conformance" in {f.check for f in r.failing}
    r = check_node("x-1", matrix=m, probe=probe_of(facts()), node_info=info("nowhere"))
    assert r.pool is None and r.release is None and "no pool known" in r.expect_note


# ------------------------------------------------------------------------ the local probe
def script(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "probe.py"
    p.write_text(textwrap.dedent(body))
    return p


def test_local_probe_runs_the_real_probe() -> None:
    got = run_local_probe(30)
    assert got.error is None and got.doc is not None and "source" in got.doc


def test_local_probe_timeout_kills_the_group(tmp_path: Path) -> None:
    marker = tmp_path / "child-alive"
    src = script(tmp_path, f"""
        import subprocess, time
        subprocess.Popen(["sh", "-c", "sleep 2 && touch {marker}"])
        time.sleep(30)
    """)
    got = run_local_probe(0.5, source=src)
    assert got.timed_out and got.seconds < 5
    import time

    time.sleep(2.5)
    assert not marker.exists()  # the probe's child died with it


def test_local_probe_crash_and_garbage(tmp_path: Path) -> None:
    got = run_local_probe(10, source=script(tmp_path, "raise SystemExit('boom')\n"))
    assert got.doc is None and "exited 1: boom" in (got.error or "")
    got = run_local_probe(10, source=script(tmp_path, "print('[1, 2]')\n"))
    assert got.doc is None and got.error


# --------------------------------------------------------------------------------- the CLI
def fake_slurm(tmp_path: Path, state: str = "IDLE", reason: str | None = None) -> Path:
    """`sinfo` and `scontrol` stand-ins that log their argv (enough for node-check's calls)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "argv.log"
    reason_line = f"   Reason={reason} [root@2026-01-01T00:00:00]\n" if reason else ""
    show = (f"NodeName=h100-1 Arch=x86_64 CoresPerSocket=1\n   State={state} ThreadsPerCore=1\n"
            f"   Partitions=h100,all\n{reason_line}")
    for name, body in {
        "sinfo": "print('h100|gpu:h100:8(S:0)')\nprint('all*|gpu:h100:8(S:0)')",
        "scontrol": "import os, time\ntime.sleep(float(os.environ.get('FAKE_SLOW', 0)))\n"
                    f"if sys.argv[1:2] == ['show']:\n    sys.stdout.write({show!r})",
        "squeue": "pass",
    }.items():
        p = bin_dir / name
        p.write_text(f"#!{sys.executable}\nimport json, sys\n"
                     f"open({str(log)!r}, 'a').write(json.dumps(sys.argv) + '\\n')\n{body}\n")
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def invoke(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """The real entry point in-process (so the probe can be replaced): exit code, stdout."""
    from fleet.cli.app import run

    with pytest.raises(SystemExit) as exc:
        run(["node-check", *args])
    return int(exc.value.code or 0), capsys.readouterr().out


def logged(tmp_path: Path) -> list[list[str]]:
    log = tmp_path / "argv.log"
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv("FLEET_MATRIX", raising=False)
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    return monkeypatch


REAL_CHECK = nc.check_node


def use_probe(mp: pytest.MonkeyPatch, doc: dict[str, Any]) -> None:
    real = REAL_CHECK
    mp.setattr(nc, "check_node", lambda *a, **k: real(*a, **k, probe=probe_of(doc)))


def test_cli_under_slurmd_drains_through_scontrol(tmp_path: Path, cli_env: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    bin_dir = fake_slurm(tmp_path)
    cli_env.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    cli_env.setenv("SLURMD_NODENAME", "h100-1")
    use_probe(cli_env, with_xid79())
    code, out = invoke(["--json"], capsys)
    assert code == 1, out
    doc = json.loads(out)
    assert doc["node"] == "h100-1" and doc["drain"]["action"] == "drained"
    updates = [a for a in logged(tmp_path) if a[1:2] == ["update"]]
    assert len(updates) == 1
    assert updates[0][2:4] == ["nodename=h100-1", "state=drain"]
    assert updates[0][4].startswith("reason=fleet: health: gpu.fallen_off_bus: ")
    assert ["sinfo", "-h", "-N", "-n", "h100-1", "-o", "%P|%G"] in [
        [Path(a[0]).name, *a[1:]] for a in logged(tmp_path)]


def test_cli_leaves_an_admin_drain(tmp_path: Path, cli_env: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    bin_dir = fake_slurm(tmp_path, "IDLE+DRAIN", "ops: RMA 1")
    cli_env.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    use_probe(cli_env, with_xid79())
    code, out = invoke(["--json", "--drain", "--node", "h100-1"], capsys)
    assert code == 1
    drain = json.loads(out)["drain"]
    assert drain["action"] == "left" and drain["reason"] == "ops: RMA 1"
    assert not [a for a in logged(tmp_path) if a[1:2] == ["update"]]


def test_cli_healthy_no_drain_and_bad_input(tmp_path: Path, cli_env: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    bin_dir = fake_slurm(tmp_path)
    cli_env.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    cli_env.setenv("SLURMD_NODENAME", "h100-1")
    use_probe(cli_env, with_xid79())
    code, _ = invoke(["--no-drain"], capsys)
    assert code == 1
    assert not [a for a in logged(tmp_path) if a[1:2] == ["update"]]
    use_probe(cli_env, conformant(8))
    code, _ = invoke(["-m", str(MATRIX)], capsys)
    assert code == 0
    assert invoke(["--release", "r1"], capsys)[0] == 2
    assert invoke(["--node", "a;b"], capsys)[0] == 2
    assert invoke(["-m", str(MATRIX), "--release", "nope"], capsys)[0] == 2
    assert invoke(["-m", str(MATRIX), "--pool", "nope"], capsys)[0] == 2


def test_within_cuts_timeouts_to_the_deadline() -> None:
    seen: list[float | None] = []

    def run(argv: list[str], t: float | None) -> tuple[int, str, str]:
        seen.append(t)
        return 0, "", ""

    now = [100.0]
    bounded = nc.within(run, 105.0, lambda: now[0])
    bounded(["scontrol"], 2.0)
    now[0] = 104.0
    bounded(["scontrol"], 2.0)
    now[0] = 104.9
    assert bounded(["scontrol"], 2.0)[0] == 124
    assert seen == [2.0, 1.0]


def test_cli_ends_within_its_budget_when_scontrol_hangs(
        tmp_path: Path, cli_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import time

    bin_dir = fake_slurm(tmp_path)
    cli_env.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    cli_env.setenv("SLURMD_NODENAME", "h100-1")
    cli_env.setenv("FAKE_SLOW", "30")
    use_probe(cli_env, with_xid79())
    start = time.monotonic()
    code, out = invoke(["--json", "--timeout", "4"], capsys)
    assert time.monotonic() - start < 20  # the hung scontrol would take 30 s; slack for load
    assert code == 1 and json.loads(out)["drain"]["action"] == "failed"
