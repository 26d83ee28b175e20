"""`fleet demo --lab`: the story of `fleet.jobs.demo`, told on the lab of real SSH hosts (root).

The same chapters run against the SSH backend (`SshBackend` over an inventory written into the
demo folder), the `none` scheduler and the lab's own fault injection; history timestamps still
come from the demo's logical clock (weekly probes a week apart), while waits really wait.

Without `lab_paths` a lab of 8 hosts is brought up in a run directory of its own (with the demo's
releases, candidate A 25% slower through the lab's perf factor) and always torn down at the end.
With `lab_paths` the story runs on the hosts of a lab already up there (the integration tests'
session lab); its releases come from the matrix it was built with, candidate A being the one its
perf factors make slow; that lab is left up.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from fleet.domain.matrix.models import Matrix
from fleet.errors import BadInput, CouldNotComplete
from fleet.history import History
from fleet.jobs import demo_cast as D
from fleet.jobs.demo_folder import INVENTORY_FILE, LAB_RELEASES_FILE
from fleet.jobs.demo_story import tell as tell_story
from fleet.lab.paths import LabPaths
from fleet.local_files import recreate_file

HOSTS = 8
BRIDGE = "fleetbr0"
EL9_POOL = D.INCIDENT_POOL
"""The pool of the demo's own lab whose hosts are EL9 (Rocky Linux 9: dnf and rpm)."""
LAB_GATES = {"health": True, "benchmark": True, "replay": False, "max_retries": 1,
             "benchmark_command": "fleet-lab-bench --duration 0.3", "benchmark_repeats": 8}
"""As in matrices/lab.yaml: the lab's own synthetic benchmark, whose speed follows --perf."""

_INVENTORY = '''"""pyinfra inventory of the lab `fleet demo --lab` used (gone after the demo)."""
import json
from pathlib import Path

_RUN = Path({run!r})
_groups = {{}}
lab = []
_state = json.loads((_RUN / "lab.json").read_text())
_slurm = {{"scheduler": "slurm", "slurm_conf": _state["slurm_conf"]}} if _state.get("slurm_conf") \
    else {{}}
for _h in _state["hosts"]:
    _entry = (_h["name"], {{**_slurm,
        "ssh_hostname": _h["address"], "ssh_port": _h.get("port", 22), "ssh_user": "root",
        "ssh_key": str(_RUN / "ssh" / "id_ed25519"),
        "ssh_known_hosts_file": str(_RUN / "ssh" / "known_hosts"),
        "ssh_strict_host_key_checking": "yes", "pool": _h["pool"],
        "gpu_model": _h["gpu_model"], "gpu_count": _h["gpu_count"], "unit": _h["unit"]}})
    lab.append(_entry)
    _groups.setdefault(_h["pool"], []).append(_entry)
globals().update(_groups)
'''


def bridge_exists() -> bool:
    return subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True,
                          check=False).returncode == 0


def lab_matrix(releases_from: Path, golden: str, a: str, b: str) -> str:
    """The demo's matrix for lab hosts: the releases the lab's repository holds (without
    kernel constraints: lab hosts run this machine's kernel), the demo's policy, and the lab's
    rollout settings (no bake, small waves, the lab benchmark)."""
    demo = yaml.safe_load(D.demo_matrix_text())
    src = yaml.safe_load(releases_from.read_text())
    releases = []
    for r in src["releases"]:
        if r["name"] in (golden, a, b):
            r = dict(r)
            r["companions"] = {k: v for k, v in (r.get("companions") or {}).items()
                               if k != "kernel"}
            releases.append(r)
    pools: dict[str, Any] = {}
    for name, pool in demo["pools"].items():
        waves = [1] if pool.get("canary") else [1, "50%"]
        pools[name] = {**{k: v for k, v in pool.items() if k != "rollout"},
                       "rollout": {"waves": waves, "max_unavailable": 2, "bake_minutes": 0,
                                   "failure_budget_per_wave": 0, "failure_budget_total": 0,
                                   "gates": dict(LAB_GATES)}}
    doc = {"schema_version": 1, "releases": releases,
           "policy": {"golden": {"default": golden}, "allowed": [b],
                      "previous": dict.fromkeys(pools, golden),
                      "thresholds": {"quarantine_max_share": 0.10}},
           "pools": pools}
    return str("# `fleet demo --lab`: the demo's releases and policy with the lab's rollout "
            "settings.\n" + yaml.safe_dump(doc, sort_keys=False))


class LabTarget:
    """The lab's hosts over SSH, drained through the lab's real Slurm (the `none` scheduler on
    a lab without it), a logical clock whose waits are real."""

    hygiene_benchmark = False

    def __init__(self, paths: LabPaths, inventory: Path, matrix: Matrix, cast: D.Cast) -> None:
        from fleet.remote.backend import SshBackend
        from fleet.schedulers import make_scheduler
        from fleet.sim import SimClock

        self.paths, self.matrix, self.cast = paths, matrix, cast
        from fleet.lab import lab

        state = lab.load_state(paths)
        self.backend = D.cast_backend(SshBackend(inventory))
        sched = "slurm" if state.slurm_conf else "none"
        self._scheduler = (make_scheduler("slurm", slurm_conf=state.slurm_conf)
                           if state.slurm_conf else make_scheduler("none"))
        self.clock = SimClock(D.START)
        self.source = {"source": "inventory", "inventory": str(inventory), "scheduler": sched}
        self._by_driver = {r.driver.version: r.name for r in matrix.releases}
        self._unreachable: list[str] = []
        self.spec = {h.name: h for h in state.hosts}

    @property
    def scheduler(self) -> Any:
        return self._scheduler

    def now(self) -> datetime:
        return self.clock()

    def at(self, when: datetime) -> None:
        if when > self.clock():
            self.clock.set(when)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
        self.clock.advance(seconds)

    def installed(self) -> dict[str, str | None]:
        names = [r.name for r in self.backend.hosts()]
        answers = self.backend.probe(names)
        out: dict[str, str | None] = {}
        self._unreachable = []
        for n in names:
            res = answers[n]
            if not (res.ok and res.value is not None):
                self._unreachable.append(n)
                out[n] = None
                continue
            out[n] = self._by_driver.get(res.value.versions.driver_library or "")
        return out

    def unreachable(self) -> list[str]:
        return list(self._unreachable)

    def ecc(self, host: str, count: int) -> None:
        from fleet.lab import lab

        lab.inject(self.paths, host, [f"ecc-corrected:gpu=0,count={count}"])

    def ssh(self, host: str, command: str, timeout: float = 120) -> str:
        h = self.spec[host]
        cp = subprocess.run(
            ["ssh", "-i", str(self.paths.client_key), "-o",
             f"UserKnownHostsFile={self.paths.known_hosts}", "-o", "StrictHostKeyChecking=yes",
             "-o", "BatchMode=yes", "-p", str(h.port), f"root@{h.address}", command],
            capture_output=True, text=True, timeout=timeout, check=False)
        if cp.returncode != 0:
            raise CouldNotComplete(f"{host}: `{command}` exited {cp.returncode}: "
                                   f"{cp.stderr.strip()[-500:]}")
        return cp.stdout

    def drift(self, host: str, package: str, version: str) -> None:
        """What someone does by hand: lift the hold (versionlock on EL9) and install another
        version of one package with the host's own package manager."""
        from fleet.lab.repo import apt_version

        pkg = shlex.quote(package)
        if self.spec[host].os == "el9":
            from fleet.domain.matrix.packages import dnf_spec

            want = shlex.quote(dnf_spec(package, version))
            # `dnf install` of an older NEV downgrades; dnf-automatic's exclude guard does not
            # apply to a dnf run by hand
            self.ssh(host, f"dnf -q versionlock delete {pkg} >/dev/null 2>&1; "
                     f"dnf -y -q install {want} >/dev/null")
            return
        self.ssh(host, f"apt-mark unhold {pkg} >/dev/null; apt-get update -qq && "
                 "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --allow-downgrades "
                 f"--allow-change-held-packages {pkg}={shlex.quote(apt_version(version))} "
                 ">/dev/null")

    def drifted(self, host: str) -> bool:
        from fleet.lab.repo import apt_version

        pkg = shlex.quote(self.cast.drift_package)
        if self.spec[host].os == "el9":
            out = self.ssh(host, f"rpm -q --qf '%{{VERSION}}' {pkg}")
            return out.strip() == self.cast.drift_version
        out = self.ssh(host, "dpkg-query -W -f '${Version}' " + pkg)
        return out.strip() == apt_version(self.cast.drift_version)

    def save(self) -> None:
        pass


def _cast(paths: LabPaths, matrix: Matrix, a: str, slow: float) -> D.Cast:
    from fleet.lab import lab

    state = lab.load_state(paths)
    pools: dict[str, int] = {}
    by_pool: dict[str, list[str]] = {}
    for h in state.hosts:
        pools[h.pool] = pools.get(h.pool, 0) + 1
        by_pool.setdefault(h.pool, []).append(h.name)
    need = ("h100-canary", "h100", "a100", D.INCIDENT_POOL)
    missing = [p for p in need if p not in pools]
    if missing:
        raise BadInput.single(f"the lab in {paths.run} has no host in pool(s) {missing}; the "
                              "story needs at least 4 hosts (H100, H100, A100, L40S)")
    rel_a = next(r for r in matrix.releases if r.name == a)
    toolkit = str(rel_a.companions.container_toolkit or "1.17.3")
    el9 = {h.pool for h in state.hosts if h.os == "el9"}
    el9_pools = tuple(sorted(p for p in el9
                             if all(h.os == "el9" for h in state.hosts if h.pool == p)))
    return D.Cast("lab", D.GOLDEN, a, D.CANDIDATE_B, slow, pools,
                  (by_pool["h100"][0], by_pool["a100"][0]), D.ECC_RAMP,
                  by_pool[D.INCIDENT_POOL][-1], D.DRIFT_PACKAGE, toolkit, D.INCIDENT_POOL,
                  slow_how="the lab's perf factor for its driver package", el9_pools=el9_pools,
                  el9_hosts=tuple(sorted(h.name for h in state.hosts if h.os == "el9")))


@contextmanager
def _own_lab(folder: Path, say: Callable[[str], None]) -> Iterator[LabPaths]:
    """A lab of its own, in its own run directory; always torn down."""
    from fleet.lab import lab
    from fleet.lab.repo import Perf

    if os.geteuid() != 0:
        raise BadInput.single("`fleet demo --lab` needs root (it starts SSH hosts in network "
                              "namespaces); run `sudo .venv/bin/fleet demo --lab`, or "
                              "`fleet demo` for the simulated fleet", field="--lab")
    if bridge_exists():
        raise CouldNotComplete(f"another lab is up (bridge {BRIDGE} exists) and only one can "
                               "be: run `fleet lab down` (or let the tests finish) first")
    run = Path(tempfile.mkdtemp(prefix="fleet-demo-lab-", dir="/run"))
    paths = LabPaths(cache=LabPaths.from_env().cache, run=run)
    releases = folder / LAB_RELEASES_FILE
    recreate_file(releases, lab_matrix_from_demo())
    try:
        say(f"bringing up a lab of {HOSTS} hosts in {run}")
        from fleet.lab import slurm as S

        slurm = not S.missing_tools()
        if not slurm:
            say("no Slurm here (" + " ".join(S.missing_tools()) + " missing): hosts are drained "
                "through no scheduler")
        el9 = _el9_pools(say)
        lab.up(paths, lab.UpConfig(hosts=HOSTS, matrix=releases, release=D.GOLDEN,
                                   perf={D.CANDIDATE_A: Perf(D.SLOW_A, 0.01)}, slurm=slurm,
                                   el9_pools=el9),
               progress=lambda m, _d, _t: say(f"lab up: {m}"))
        yield paths
    finally:
        say("tearing the lab down")
        left = lab.down(paths)
        releases.unlink(missing_ok=True)
        if left:
            raise CouldNotComplete(f"the demo's lab left {left} behind in {run}; "
                                   f"run `FLEET_LAB_DIR={run} fleet lab down`")


def _el9_pools(say: Callable[[str], None]) -> tuple[str, ...]:
    """The pool whose hosts run EL9 (dnf, rpm, module streams, versionlock): the incident's,
    so the drift by hand, the waves of candidate B and the incident rollback all go through
    dnf. None where this machine cannot build the lab's RPM repository."""
    import shutil

    missing = [t for t in ("rpmbuild", "createrepo_c") if shutil.which(t) is None]
    if missing:
        say(f"no EL9 pool ({' and '.join(missing)} missing here: Debian packages rpm, "
            "createrepo-c): every lab host runs Debian")
        return ()
    return (EL9_POOL,)


def lab_matrix_from_demo() -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(D.demo_matrix_text())
    try:
        return lab_matrix(Path(f.name), D.GOLDEN, D.CANDIDATE_A, D.CANDIDATE_B)
    finally:
        os.unlink(f.name)


def _slow_release(paths: LabPaths) -> tuple[str, float]:
    from fleet.lab import lab

    perf = lab.load_state(paths).perf
    if D.CANDIDATE_A in perf and perf[D.CANDIDATE_A]["factor"] < 1:
        return D.CANDIDATE_A, perf[D.CANDIDATE_A]["factor"]
    slow = sorted((v["factor"], k) for k, v in perf.items() if v["factor"] < 1)
    if not slow:
        raise BadInput.single(f"the lab in {paths.run} has no slow release (--perf) to play "
                              "candidate A")
    return slow[0][1], slow[0][0]


def _golden_everywhere(target: LabTarget, matrix: Matrix, reused: bool,
                       say: Callable[[str], None]) -> Callable[[History], None]:
    """Before the story: every host pinned on golden (`fleet apply -r GOLDEN`), from a clean
    slate on a reused lab (faults reset, rebooted so earlier kernel-log events are gone)."""

    def prologue(history: History) -> None:
        from fleet.jobs.apply import pin_hosts
        from fleet.jobs.reboot_gate import gated_reboot
        from fleet.lab import lab

        names = [r.name for r in target.backend.hosts()]
        if reused:
            say("resetting the lab's hosts")
            for n in names:
                lab.reset(target.paths, n)
            gated_reboot(target.backend, dict.fromkeys(names))  # the module loaded now
        golden = next(r for r in matrix.releases if r.name == D.GOLDEN)
        say(f"pinning {D.GOLDEN} on every lab host")
        target.at(D.START - timedelta(days=1))
        done = pin_hosts(target.backend, history, matrix, dict.fromkeys(names, golden),
                         now=target.now, kind="apply", reason="demo: the fleet's golden release",
                         actor="fleet demo")
        bad = [f"{d.host}: {d.error or d.outcome}" for d in done if d.error]
        if bad:
            raise CouldNotComplete("pinning the golden release on the lab failed: "
                                   + "; ".join(bad))
        # a benchmark baseline on golden (`fleet bench run`): a one-host canary pool keeps no
        # host on the old release to compare with during its wave, so the gate uses history
        from fleet.history.bulk import record_benchmarks

        say("benchmark baseline on the golden release")
        pool_of = {r.name: r.pool or "" for r in target.backend.hosts()}
        params = dict(matrix.pools["h100-canary"].rollout.gates.suite_params()["synthetic"])
        started = target.now()
        out = target.backend.benchmark(names, "synthetic", params)
        runs = [(n, D.GOLDEN, out[n].value if out[n].ok and out[n].value else None,
                 "done" if out[n].ok and out[n].value else "error") for n in names]
        record_benchmarks(history, runs, kind="synthetic", name="demo-baseline",
                          started_at=started, ended_at=target.now())
        missing = sorted(n for n, _r, v, _s in runs if v is None and pool_of.get(n))
        if missing:
            raise CouldNotComplete(f"the baseline benchmark failed on {missing}: "
                                   + "; ".join(str(out[n].error) for n in missing[:3]))

    return prologue


def run_lab_story(result: D.DemoResult, *, reporter: D.Reporter,
                  on_step: Callable[[D.Step], None] | None, say: Callable[[str], None],
                  lab_paths: LabPaths | None) -> None:
    from fleet.domain.matrix.loader import load_matrix
    from fleet.lab import lab

    folder = result.folder

    def tell(paths: LabPaths, reused: bool) -> None:
        result.lab_run = paths.run
        state = lab.load_state(paths)
        a, slow = _slow_release(paths)
        recreate_file(result.matrix, lab_matrix(Path(state.matrix), D.GOLDEN, a, D.CANDIDATE_B))
        matrix = load_matrix(result.matrix, today=D.START.date()).matrix
        inventory = folder / INVENTORY_FILE
        recreate_file(inventory, _INVENTORY.format(run=str(paths.run)))
        cast = _cast(paths, matrix, a, slow)
        result.cast = cast
        target = LabTarget(paths, inventory, matrix, cast)
        tell_story(folder, result, matrix, target, reporter, on_step, say,
                   prologue=_golden_everywhere(target, matrix, reused, say))

    if lab_paths is not None:
        if not lab.is_up(lab_paths):
            raise BadInput.single(f"no lab is up in {lab_paths.run}")
        tell(lab_paths, reused=True)
        return
    with _own_lab(folder, say) as paths:
        tell(paths, reused=False)
