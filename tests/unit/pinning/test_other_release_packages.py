"""Another release's packages on a host (issue 14.4): the probe's dpkg `rc` entries, the
`packages.other_release` check and the drift audit, each with the command that removes them."""

from __future__ import annotations

from fleet.domain.checks import run_checks
from fleet.domain.checks.expect import expectations_for
from fleet.domain.checks.packages import CHECK_ID, leftovers
from fleet.domain.drift import DriftInput, audit_host
from fleet.domain.facts import HostFacts, Packages
from fleet.domain.matrix.models import Thresholds
from fleet.probe.hostprobe import parse_dpkg, parse_dpkg_residual, parse_rpm, parse_rpm_stale_locks
from tests.unit.hygiene.fakes import FakeHost, example_matrix

M = example_matrix()
R570 = M.release("r570-cuda12.8")

DPKG = "\n".join([
    "nvidia-driver-570-open\t570.133.20-1\thold ok installed",
    "cuda-toolkit-13-0\t13.0.2-1\thold ok installed",
    "nvidia-driver-580-open\t580.95.05-1\tdeinstall ok config-files",
    "cudnn9-cuda-13\t9.13.0.50-1\thold ok not-installed",
    "nvidia-utils-580\t580.95.05-1\tdeinstall ok not-installed",  # gone for good: not listed
    "bash\t5.2.15-2\tinstall ok config-files",  # not NVIDIA's
])


def test_probe_reports_removed_configuration_and_dangling_holds() -> None:
    assert [p["name"] for p in parse_dpkg(DPKG)] == ["nvidia-driver-570-open",
                                                      "cuda-toolkit-13-0"]
    assert parse_dpkg_residual(DPKG) == [
        {"name": "nvidia-driver-580-open", "version": "580.95.05-1", "held": False},
        {"name": "cudnn9-cuda-13", "version": "9.13.0.50-1", "held": True}]


def host_on_r570(extra: dict[str, str], residual: list[dict] | None = None) -> HostFacts:
    h = FakeHost("gpu-01", "h100", R570)
    facts = h.facts().model_dump()
    items = facts["versions"]["packages"]["items"]
    items += [{"name": n, "version": v, "held": True} for n, v in extra.items()]
    facts["versions"]["packages"]["residual"] = residual or []
    return HostFacts.model_validate(facts)


LEFT = {"cuda-toolkit-13-0": "13.0.2-1", "cudnn9-cuda-13": "9.13.0.50-1",
        "datacenter-gpu-manager-4-cuda13": "1:4.4.1-1"}
RC = [{"name": "nvidia-driver-580-open", "version": "580.95.05-1", "held": False}]


def test_check_warns_for_each_package_of_another_release_with_the_fix() -> None:
    facts = host_on_r570(LEFT, RC)
    exp = expectations_for(M, "h100")  # golden r580; r570 allowed: the host is on r570
    found = [f for f in run_checks(facts, exp, Thresholds()) if f.check == CHECK_ID]
    by = {f.evidence["package"]: f for f in found}
    assert set(by) == {*LEFT, "nvidia-driver-580-open"}
    assert all(f.severity == "warn" and f.evidence["release"] == "r570-cuda12.8" for f in found)
    assert by["cuda-toolkit-13-0"].evidence["fix"] == (
        "apt-mark unhold cuda-toolkit-13-0 && apt-get purge -y cuda-toolkit-13-0")
    rc = by["nvidia-driver-580-open"]
    assert rc.evidence["residual"] and "configuration left (rc)" in rc.message
    assert rc.evidence["fix"] == "apt-get purge -y nvidia-driver-580-open"
    # apply purges installed packages of other releases; an rc entry it does not see
    assert "fleet apply -r r570-cuda12.8" in by["cuda-toolkit-13-0"].message
    assert "fleet apply" not in rc.message


def test_a_clean_host_gets_no_finding() -> None:
    facts = host_on_r570({})
    exp = expectations_for(M, "h100")
    assert [f for f in run_checks(facts, exp, Thresholds()) if f.check == CHECK_ID] == []


def test_el_fix_releases_the_versionlock_then_removes() -> None:
    pk = Packages(manager="rpm", items=[
        {"name": "nvidia-driver", "version": "3:570.133.20-1.el9", "held": True},
        {"name": "cuda-toolkit-13-0", "version": "13.0.2-1.el9", "held": True}])
    (lo,) = leftovers(pk, ["nvidia-driver", "cuda-toolkit-12-8"], "rhel")
    assert lo.fix("rhel") == "dnf versionlock delete cuda-toolkit-13-0 && " \
        "dnf -y remove cuda-toolkit-13-0"


def test_drift_audit_flags_another_release_s_packages_and_rc() -> None:
    d = audit_host(DriftInput("gpu-01", "h100", True, host_on_r570(LEFT, RC)), M)
    assert not d.conformant and d.release == "r570-cuda12.8"
    texts = {str(x) for x in d.differences}
    assert ("cuda of another release: have cuda-toolkit-13-0 13.0.2-1 (held), want not on the "
            "host (apt-mark unhold cuda-toolkit-13-0 && apt-get purge -y cuda-toolkit-13-0)"
            ) in texts
    assert ("driver of another release: have nvidia-driver-580-open removed, configuration "
            "left (rc), want not on the host (apt-get purge -y nvidia-driver-580-open)") in texts
    clean = audit_host(DriftInput("gpu-01", "h100", True, host_on_r570({})), M)
    assert not any("another release" in str(x) for x in clean.differences)


def test_el_versionlock_left_for_a_package_no_longer_installed() -> None:
    rpm = "nvidia-driver\t3:570.133.20-1.el9\ncuda-toolkit-12-8\t0:12.8.1-1.el9\n"
    locks = ("nvidia-driver-3:570.133.20-1.el9.*\ncuda-toolkit-12-8-0:12.8.1-1.el9.*\n"
             "cuda-toolkit-13-2-0:13.2.1-1.el9.*\ndatacenter-gpu-manager-4-core-4.4.1-1.*\n"
             "!cuda-toolkit-13-0-0:13.0.2-1.el9.*\n# comment\n")
    items = parse_rpm(rpm, locks)
    stale = parse_rpm_stale_locks(items, locks)
    assert stale == [
        {"name": "cuda-toolkit-13-2", "version": "0:13.2.1-1.el9", "held": True},
        {"name": "datacenter-gpu-manager-4-core", "version": "4.4.1-1", "held": True}]
    pk = Packages(manager="rpm", items=items, residual=stale)
    (lo,) = leftovers(pk, ["nvidia-driver", "cuda-toolkit-12-8"], "rhel")
    assert lo.name == "cuda-toolkit-13-2" and lo.residual
    assert lo.describe("rhel") == "cuda-toolkit-13-2 not installed, its versionlock left"
    assert lo.fix("rhel") == "dnf versionlock delete cuda-toolkit-13-2"


# --- the pin clears what it can now see: rc entries and holds of packages no longer installed
def _r570_installed() -> dict[str, str]:
    return {p.name: p.version + "-1" for p in R570.packages("debian")}


def test_the_apt_pin_purges_other_releases_rc_entries_and_releases_their_dangling_holds() -> None:
    from fleet.domain.host_change import host_change
    from fleet.domain.pinning import plan_pin
    from fleet.remote.facts import parse_dpkg_residual as residual_names

    wanted = R570.packages("debian")
    installed = _r570_installed()
    held = {p.name for p in wanted} | {"cudnn9-cuda-13", "bash"}  # bash: a site's own hold
    residual = residual_names([
        "nvidia-driver-580-open\t580.95.05-1\trc", "bash\t5.2\trc",
        f"{wanted[0].name}\t{wanted[0].version}-1\trc"])  # the release's own: not another's
    plan = plan_pin("debian", wanted, installed, held, {}, residual=residual)
    commands = [s.command for s in plan.steps if s.command]
    assert "apt-mark unhold cudnn9-cuda-13" in commands
    assert "dpkg --purge nvidia-driver-580-open" in commands
    assert not any("bash" in c for c in commands)
    assert commands.index("apt-mark unhold cudnn9-cuda-13") < \
        commands.index("dpkg --purge nvidia-driver-580-open")
    assert plan.changed and not plan.reboot_required
    change = host_change(plan, wanted)
    assert [str(h) for h in change.holds if h.action == "unhold"] == [
        next(str(h) for h in change.holds if h.package == "cudnn9-cuda-13")]
    assert any("purge configuration" in line for line in change.lines())


def test_a_host_without_leftovers_gets_no_leftover_steps() -> None:
    from fleet.domain.pinning import plan_pin

    wanted = R570.packages("debian")
    plan = plan_pin("debian", wanted, _r570_installed(), {p.name for p in wanted}, {},
                    residual=[])
    assert not any("dpkg --purge" in (s.command or "") or "unhold" in (s.command or "")
                   for s in plan.steps)


def test_the_dnf_pin_deletes_version_locks_of_other_releases_packages_no_longer_installed() -> None:
    from fleet.domain.pinning import plan_pin

    wanted = R570.packages("rhel")
    installed = {p.name: p.version for p in wanted}
    locks = {p.name for p in wanted} | {"datacenter-gpu-manager"}  # DCGM 3: r570 has DCGM 4
    plan = plan_pin("rhel", wanted, installed, locks, {})
    assert "dnf versionlock delete datacenter-gpu-manager" in [s.command for s in plan.steps]
