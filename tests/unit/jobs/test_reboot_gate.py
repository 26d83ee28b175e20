"""The pre-reboot gate: the pure verdict, the pass every backend requires, and that no reboot
reaches a backend or a scheduler except through `fleet.jobs.reboot_gate.gated_reboot`."""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from fleet.domain.boot_facts import BootFacts
from fleet.domain.checks.models import Severity
from fleet.domain.matrix.loader import load_matrix
from fleet.domain.matrix.models import Matrix
from fleet.domain.reboot_gate import (
    BootVerdict,
    RebootNotGated,
    RebootPass,
    judge_next_boot,
    require_pass,
)
from fleet.jobs.reboot_gate import gated_reboot
from fleet.sim import SimFleet
from fleet.sim.facts import KERNELS, boot_facts
from tests.unit.rollout.helpers import Rig

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def matrix() -> Matrix:
    return load_matrix(ROOT / "matrices" / "example.yaml", today=date(2025, 6, 1)).matrix


OLD, NEW = KERNELS["debian"]
DRV = "580.95.05"


def boot(**changes: Any) -> BootFacts:
    doc = boot_facts("debian", DRV, "open")
    doc.update(changes)
    return BootFacts.model_validate(doc)


def signed(signer: str, key: str) -> BootFacts:
    b = boot_facts("debian", DRV, "open", secure_boot=True)
    b["kernels"][0]["module"].update(signer=signer, sig_key=key)
    return BootFacts.model_validate(b)


def test_healthy_next_boot_passes() -> None:
    v = judge_next_boot("h1", boot(), DRV, flavor="open")
    assert v.ok and v.kernel == OLD and v.finding.severity is Severity.OK


def test_newer_default_kernel_without_module_is_refused_with_the_fixes() -> None:
    v = judge_next_boot("h7", BootFacts.model_validate(
        boot_facts("debian", DRV, new_kernel=True)), DRV)
    assert not v.ok and v.kernel == NEW
    msg = v.finding.message
    assert msg.startswith(f"the next reboot of h7 would lose the GPU driver: kernel {NEW} has "
                          f"no nvidia {DRV} module")
    assert f"install linux-headers-{NEW}, then `dkms autoinstall -k {NEW}`" in msg
    assert f"linux-modules-nvidia-580-server-open-{NEW}" in msg
    assert f"keep booting {OLD}" in msg and "apt-mark hold" in msg
    el = judge_next_boot("h8", BootFacts.model_validate(
        boot_facts("rhel", DRV, new_kernel=True)), DRV, os_family="rhel")
    new_el = KERNELS["rhel"][1]
    assert f"kernel-devel-{new_el}" in el.finding.message
    assert f"grubby --set-default /boot/vmlinuz-{KERNELS['rhel'][0]}" in el.finding.message


def test_module_of_another_version_or_flavor_is_refused() -> None:
    v = judge_next_boot("h1", boot(), "590.44.01")
    assert not v.ok and "is 580.95.05" in v.finding.message
    f = judge_next_boot("h1", boot(), DRV, flavor="proprietary")
    assert not f.ok and "the open one" in f.finding.message


@pytest.mark.parametrize("facts,why", [
    (None, "reported no boot facts"),
    (BootFacts.model_validate({"next_kernel": {"error": "unresolved", "detail": "x"}}),
     "could not be resolved (unresolved: x)"),
])
def test_unknown_never_passes(facts: BootFacts | None, why: str) -> None:
    v = judge_next_boot("h1", facts, DRV)
    assert not v.ok and why in v.finding.message


def test_unreadable_module_is_unknown_not_absent() -> None:
    doc = boot_facts("debian", DRV)
    doc["kernels"][0]["module"] = {"error": "modinfo_failed", "detail": "exit 2"}
    v = judge_next_boot("h1", BootFacts.model_validate(doc), DRV)
    assert not v.ok and "could not be read (modinfo_failed: exit 2)" in v.finding.message


def test_secure_boot_unsigned_is_refused_with_mok_signing() -> None:
    v = judge_next_boot("h1", boot(secure_boot=True), DRV)
    assert not v.ok
    assert "Secure Boot is on" in v.finding.message and "is unsigned" in v.finding.message
    assert "mokutil --import" in v.finding.message and "kmodsign" in v.finding.message


def test_secure_boot_enrolled_key_passes_by_serial() -> None:
    b = signed("host Secure Boot Module Signature key", "1F:2E:3D")
    b.enrolled_keys = [b.enrolled_keys[0].__class__(serial="1f2e3d",
                                                   subject_cn="host Secure Boot Module "
                                                              "Signature key")] \
        if b.enrolled_keys else []
    from fleet.domain.boot_facts import EnrolledKey

    b.enrolled_keys = [EnrolledKey(serial="1f2e3d", subject_cn="host Secure Boot Module "
                                                              "Signature key")]
    v = judge_next_boot("h1", b, DRV)
    assert v.ok and "enrolled key" in v.finding.message


def test_secure_boot_regenerated_unenrolled_key_is_refused() -> None:
    """A DKMS key regenerated but not enrolled keeps the old key's name: the name alone (in the
    kernel's keyring, where the old MOK shows) must not pass it."""
    from fleet.domain.boot_facts import EnrolledKey, KernelKey

    name = "host Secure Boot Module Signature key"
    b = signed(name, "AA:BB:CC")
    b.enrolled_keys = [EnrolledKey(serial="112233", subject_cn=name)]
    b.kernel_keys = [KernelKey(name=name, skid="445566")]
    v = judge_next_boot("h1", b, DRV)
    assert not v.ok and "which is not enrolled" in v.finding.message


def test_secure_boot_distribution_key_in_the_kernel_keyring_passes() -> None:
    from fleet.domain.boot_facts import KernelKey

    b = signed("Canonical Ltd. Kernel Module Signing", "0A:0B")
    b.kernel_keys = [KernelKey(name="Canonical Ltd. Kernel Module Signing", skid="99")]
    assert judge_next_boot("h1", b, DRV).ok


def test_secure_boot_unreadable_with_unsigned_module_is_unknown() -> None:
    doc = boot_facts("debian", DRV)
    doc["secure_boot"] = {"error": "os_error", "detail": "efivars"}
    v = judge_next_boot("h1", BootFacts.model_validate(doc), DRV)
    assert not v.ok and "Secure Boot state could not be read" in v.finding.message


def test_a_pass_comes_only_from_passing_verdicts() -> None:
    good = judge_next_boot("h1", boot(), DRV)
    bad = judge_next_boot("h2", boot(secure_boot=True), DRV)
    with pytest.raises(TypeError):
        BootVerdict("h3", True, OLD, DRV, good.finding)
    with pytest.raises(RebootNotGated):
        RebootPass([bad])
    gate = RebootPass([good])
    require_pass(gate, ["h1"])
    with pytest.raises(RebootNotGated):
        require_pass(gate, ["h1", "h2"])
    with pytest.raises(RebootNotGated):
        require_pass(None, ["h1"])


def test_backends_refuse_a_reboot_without_a_pass(matrix: Matrix) -> None:
    fleet = SimFleet.build(matrix, 8, seed=1)
    h = fleet.hosts()[0].name
    with pytest.raises(RebootNotGated):
        fleet.reboot([h], gate=None)  # type: ignore[arg-type]
    with pytest.raises(RebootNotGated):
        fleet.scheduler().reboot_nodes([h], "x", timeout_s=1, gate=None)  # type: ignore[arg-type]


def test_ssh_backend_and_slurm_refuse_a_reboot_without_a_pass_before_any_command(
        tmp_path: Path) -> None:
    """The real backends check the pass before they connect or run anything: no pass, or a
    pass made for another host, reaches neither pyinfra nor `scontrol reboot`."""
    from fleet.remote.backend import SshBackend
    from fleet.schedulers.slurm import SlurmScheduler

    inv = tmp_path / "inv.py"
    inv.write_text("gpu = [('h1', {'ssh_hostname': '192.0.2.1'}), "
                   "('h2', {'ssh_hostname': '192.0.2.2'})]\n")
    other = RebootPass([judge_next_boot("h1", boot(), DRV)])
    ran: list[list[str]] = []
    slurm = SlurmScheduler(lambda argv, t: (ran.append(argv), (0, "", ""))[1])
    for gate in (None, other):
        with pytest.raises(RebootNotGated):
            SshBackend(inv, connect_timeout=1).reboot(["h2"], gate=gate)  # type: ignore[arg-type]
        with pytest.raises(RebootNotGated):
            slurm.reboot_nodes(["h2"], "x", timeout_s=1, gate=gate)  # type: ignore[arg-type]
    assert ran == []


def test_gated_reboot_refuses_the_broken_host_only(matrix: Matrix) -> None:
    fleet = SimFleet.build(matrix, 8, seed=1)
    a, b = (r.name for r in fleet.hosts()[:2])
    fleet.inject(b, kernel_without_module=True)
    before = {h: fleet.probe([h])[h].value.identity.boot_id for h in (a, b)}  # type: ignore
    out = gated_reboot(fleet, {a: None, b: None})
    assert out.results[a].ok and not out.results[b].ok and list(out.refused) == [b]
    assert f"kernel {NEW} has no nvidia" in (out.results[b].error or "")
    after = {h: fleet.probe([h])[h].value.identity.boot_id for h in (a, b)}  # type: ignore
    assert after[b] == before[b] and after[a] != before[a]


def test_a_host_booted_into_a_kernel_without_module_has_no_gpus(matrix: Matrix) -> None:
    """What the gate prevents (simulated faithfully: the reboot is forced with a pass made
    for a healthy verdict): the host comes back on the new kernel without the driver."""
    fleet = SimFleet.build(matrix, 8, seed=1)
    h = fleet.hosts()[0].name
    ok = judge_next_boot(h, boot(), DRV)
    fleet.inject(h, kernel_without_module=True)
    fleet.reboot([h], gate=RebootPass([ok]))
    facts = fleet.probe([h])[h].value
    assert facts is not None and facts.gpus == [] and facts.source == "none"
    assert facts.boot is not None and facts.boot.running_kernel == NEW


def test_rollout_never_reboots_a_host_the_gate_refuses(matrix: Matrix, tmp_path: Path) -> None:
    """The canary's reboot is refused: the step fails with the gate's finding, the policy
    rolls back (packages back, no reboot needed: the old module is still loaded), and the
    host stays drained, quarantined: its next reboot would still lose the driver."""
    rig = Rig(matrix, tmp_path)
    first = next(h.name for h in rig.fleet.hosts() if h.pool == "h100-canary")
    rig.fleet.inject(first, kernel_without_module=True)
    boot_id = rig.fleet.probe_document(first)["identity"]["boot_id"]
    res = rig.start()
    assert res.status == "rolled_back"
    step = next(s for s in rig.steps(res.rollout_id) if s.host == first)
    assert step.state == "failed" and step.detail.get("quarantined")
    refused = f"{first}: failed at reboot: the next reboot of {first} would lose the GPU driver"
    assert any(refused in (e.message or "") for e in rig.events(res.rollout_id))
    # the rollback put the packages back; its health check still finds the next boot broken
    assert step.detail["failed_at"] == "rollback"
    assert f"kernel {NEW} has no nvidia" in step.detail["error"]
    # the rollout's own reason names the host and the kernel, not only the blown budget
    assert f"({first} failed at reboot: the next reboot of {first}" in res.reason
    assert f"kernel {NEW} has no nvidia 595.58.03 module" in res.reason
    assert rig.fleet.probe_document(first)["identity"]["boot_id"] == boot_id  # never rebooted
    assert rig.fleet.scheduler().state(first).state in ("drained", "draining")
    others = [s for s in rig.steps(res.rollout_id) if s.host != first]
    assert all(s.state in ("planned", "rolled_back") for s in others)
    assert rig.problems(res.rollout_id) == []


# ------------------------------------------------------------ no reboot outside the gate
_CALL = re.compile(r"\.(reboot|reboot_nodes)\(|server\.reboot\b|reboot_wait\b")
_SHELL = re.compile(r"""['"][^'"]*(?<![\w/-])(systemctl\s+(reboot|kexec)|shutdown\s+-r|"""
                    r"""reboot\s+(-f|now)|(/usr)?/sbin/reboot|init\s+6|kexec\s+-e)\b""")
"""A reboot typed as a shell command (`backend.exec("systemctl reboot")`) skips the gate too."""
_ALLOWED = {
    "fleet/jobs/reboot_gate.py",  # the one caller: backend.reboot(names, gate=...)
    "fleet/sim/scheduler.py",  # scontrol reboot in the simulation reboots the sim fleet (gated)
    "fleet/remote/backend.py",  # SshBackend.reboot runs reboot_wait.reboot, behind the pass
    "fleet/remote/reboot_op.py",  # the gate as a pyinfra operation, then reboot_wait's steps
    "fleet/remote/reboot_wait.py",  # the reboot operation itself, imported only by the two above
    "fleet/cli/lab_cmd.py",  # `fleet lab reboot`: the lab harness's power button, not a deploy
}


def test_no_reboot_call_site_outside_the_gate() -> None:
    """Every `.reboot(` / `.reboot_nodes(` / `server.reboot(` / `reboot_wait` in the shipped
    code is the gate,
    a backend behind its pass, or a lambda handed to the gate (`reboot=`); no shipped string
    is a shell command that reboots."""
    bad = []
    for path in sorted([*ROOT.glob("fleet/**/*.py"), *ROOT.glob("playbooks/*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("fleet/lab/") or rel in _ALLOWED:
            continue  # the lab's own `fleet lab reboot` is the harness, not a managed host
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            code = line.split("#", 1)[0]
            if _SHELL.search(line):
                bad.append(f"{rel}:{i + 1}: {line.strip()}")
                continue
            if not _CALL.search(code):
                continue
            window = "\n".join(lines[max(0, i - 3):i + 1])
            if "gated_reboot(" in window or "gate=g" in code:
                continue
            bad.append(f"{rel}:{i + 1}: {line.strip()}")
    assert bad == []


# ------------------------------------------------------------ the node.next_boot check
def _facts(**boot_changes: Any) -> Any:
    from fleet.domain.facts import HostFacts

    doc = boot_facts("debian", DRV, "open")
    doc.update(boot_changes)
    return HostFacts.model_validate({
        "identity": {"hostname": "h7", "kernel": OLD},
        "versions": {"driver_kernel_module": DRV, "packages": {"manager": "dpkg", "items": [
            {"name": "nvidia-driver-580-open", "version": f"{DRV}-0ubuntu1", "held": True}]}},
        "boot": doc})


def test_check_fails_before_anyone_reboots() -> None:
    from fleet.domain.checks import run_checks

    broken = _facts(**BootFacts.model_validate(
        boot_facts("debian", DRV, new_kernel=True)).model_dump(exclude={"unreadable"}))
    found = [f for f in run_checks(broken) if f.check == "node.next_boot"]
    assert [f.severity for f in found] == [Severity.FAIL]
    assert found[0].message.startswith(
        f"the next reboot of h7 would lose the GPU driver: kernel {NEW} has no nvidia {DRV}")
    assert not [f for f in run_checks(_facts()) if f.check == "node.next_boot"]


def test_check_pool_secure_boot_policy_and_kernel_constraint() -> None:
    from fleet.domain.checks import run_checks
    from fleet.domain.checks.models import Expectations, ReleaseExpectation

    def msgs(facts: Any, **exp: Any) -> list[str]:
        return [f.message for f in run_checks(facts, Expectations(**exp))
                if f.check == "node.next_boot"]

    assert "secure_boot: required" in msgs(_facts(), secure_boot="required")[0]
    assert msgs(_facts(), secure_boot="forbidden") == []
    on = _facts(secure_boot=True)
    assert "secure_boot: forbidden" in msgs(on, secure_boot="forbidden")[0]
    rel = ReleaseExpectation("r580", DRV, kernel=">=6.0")
    assert f"boots kernel {OLD}, outside the release's kernel constraint" in msgs(
        _facts(), release=rel)[0]


def test_drift_judges_the_next_boot_kernel_against_the_constraint(matrix: Matrix) -> None:
    from fleet.domain.drift import DriftInput, audit_host

    fleet = SimFleet.build(matrix, 8, seed=1)
    ref = fleet.hosts()[0]
    name = fleet.installed_release(ref.name)
    assert name is not None
    rels = [r.model_copy(update={"companions": r.companions.model_copy(
        update={"kernel": "<6.0"})}) if r.name == name else r for r in matrix.releases]
    m = matrix.model_copy(update={"releases": rels})
    fleet.inject(ref.name, kernel_without_module=True)
    facts = fleet.probe([ref.name])[ref.name].value
    d = audit_host(DriftInput(host=ref.name, pool=ref.pool, reachable=True, facts=facts), m)
    assert any(x.component == "next-boot kernel" and x.have == NEW for x in d.differences)
    assert not any(x.component == "kernel" for x in d.differences)  # the running one is fine


def test_pool_secure_boot_policy_is_validated(tmp_path: Path) -> None:
    from fleet.errors import BadInput

    text = (ROOT / "matrices" / "example.yaml").read_text()
    ok = tmp_path / "ok.yaml"
    ok.write_text(text.replace("\n  h100:\n", "\n  h100:\n    secure_boot: required\n", 1))
    m = load_matrix(ok, today=date(2025, 6, 1)).matrix
    assert m.pools["h100"].secure_boot == "required"
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("\n  h100:\n", "\n  h100:\n    secure_boot: sometimes\n", 1))
    with pytest.raises(BadInput) as e:
        load_matrix(bad, today=date(2025, 6, 1))
    assert "secure_boot" in str(e.value) and "bad.yaml" in str(e.value)


def test_a_kill_around_the_gate_resumes_without_rebooting_the_broken_host(
        matrix: Matrix, tmp_path: Path) -> None:
    """Kill the controller at every step boundary around the reboot step (and the rollback
    after it), resume: the host whose next-boot kernel has no module is never rebooted."""
    from fleet.sim import HostFaults
    from tests.unit.rollout.test_crash_resume import POOLS, _run_crashed

    bad = "h100-canary-00001"
    build: dict[str, Any] = {"faults": {bad: HostFaults(kernel_without_module=True)}}
    labels: list[str] = []
    (tmp_path / "clean").mkdir()
    clean = Rig(matrix, tmp_path / "clean", pools=POOLS, **build)
    boot0 = clean.fleet.probe_document(bad)["identity"]["boot_id"]
    status = clean.start(engine=clean.engine(checkpoint=labels.append)).status
    assert clean.fleet.probe_document(bad)["identity"]["boot_id"] == boot0
    around = [k for k, label in enumerate(labels, 1)
              if "reboot" in label or "rollback" in label or "apply:end" in label]
    assert around
    for k in around:
        where = tmp_path / f"k{k}"
        where.mkdir()
        rig, res = _run_crashed(matrix, where, k, **build)
        assert res.status == status, (k, labels[k - 1], res.reason)
        assert rig.fleet.probe_document(bad)["identity"]["boot_id"] == boot0, labels[k - 1]
        assert rig.problems(res.rollout_id) == [], k
