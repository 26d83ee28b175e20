"""Lab orchestration: up, down, status, inject, reset, reboot. State lives in `RUN/lab.json`."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fleet.errors import BadInput, CouldNotComplete
from fleet.lab import faults as F
from fleet.lab import hostfleet, layers, nvml_build, prom_service, repo, rpmrepo, startup
from fleet.lab import hosts as H
from fleet.lab import kube as K
from fleet.lab import slurm as S
from fleet.lab.base import BaseRecipe, ensure_base, recipe_for
from fleet.lab.model import BRIDGE, BRIDGE_ADDR, REPO_PORT, LabState, Mode, plan_hosts
from fleet.lab.paths import LabPaths
from fleet.lab.startup import ssh_banner
from fleet.lab.sysutil import (
    atomic_write,
    mounts_under,
    require_root,
    require_tools,
    run,
    umount_all,
)

Progress = Callable[[str, int, int], None]  # message, done, total


def _quiet(msg: str, done: int, total: int) -> None:
    pass


@dataclass
class UpConfig:
    hosts: int = 8
    matrix: Path = Path("matrices/example.yaml")
    release: str | None = None  # None: the matrix golden; "none": no driver installed
    mode: Mode = "netns"
    perf: dict[str, repo.Perf] = field(default_factory=dict)
    model_server: bool = True
    timeout: float = 60.0
    slurm: bool = False  # slurmctld + munged here, one slurmd per host (netns mode only)
    health_check_interval: int = S.DEFAULT_HEALTH_INTERVAL
    el9: int = 0  # how many hosts (the last ones) are el9 hosts: dnf + rpm, Rocky Linux 9
    el9_pools: tuple[str, ...] = ()  # and every host of these matrix pools
    prometheus: bool = False  # Debian's prometheus scraping every host (fleet.lab.prom_service)
    kubernetes: bool = False  # etcd, kube-apiserver, the disruption controller, a kubelet stand-in


def parse_os(spec: str, hosts: int) -> int:
    """`--os debian`, `--os el9` (every host) or `--os el9:N` (the last N hosts): the el9 count."""
    name, _, count = spec.partition(":")
    if name == "debian" and not count:
        return 0
    if name == "el9":
        if not count:
            return hosts
        if count.isdigit() and 1 <= int(count) <= hosts:
            return int(count)
    raise BadInput.single(
        f"--os {spec!r}: expected debian, el9 (every host) or el9:N with N in 1..{hosts}",
        field="--os",
    )


def load_releases(path: Path) -> tuple[list[Any], str, dict[str, tuple[str | None, bool]]]:
    """The matrix's releases, its golden (default) release name, and its pools as
    {pool: (gpu_model, canary)} so lab hosts land in the pools the matrix knows."""
    from fleet.domain.matrix.loader import load_matrix

    matrix = load_matrix(path).matrix
    pools = {name: (p.gpu_model, p.canary) for name, p in matrix.pools.items()}
    return list(matrix.releases), matrix.policy.golden.default, pools


def is_up(paths: LabPaths) -> bool:
    return paths.state_file.exists() and _daemon_pid(paths) is not None


def _daemon_pid(paths: LabPaths) -> int | None:
    try:
        pid = int(paths.daemon_pid.read_text())
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None
    return pid if b"fleet.lab.daemon" in cmd else None


def up(paths: LabPaths, cfg: UpConfig, progress: Progress = _quiet) -> LabState:
    require_root("`fleet lab up`")
    require_tools()
    if is_up(paths):
        raise BadInput.single(f"a lab is already up in {paths.run}; run `fleet lab down` first")
    if paths.run.exists():
        down(paths)  # leftovers of a crashed lab
    releases, golden, pools = load_releases(cfg.matrix)
    names = [r.name for r in releases]
    unknown = [n for n in cfg.perf if n not in names]
    if unknown:
        raise BadInput.single(
            f"--perf names unknown releases {unknown}; the matrix has {names}", file=str(cfg.matrix)
        )
    release = golden if cfg.release is None else cfg.release
    if release != "none" and release not in names:
        raise BadInput.single(
            f"no release {release!r} in the matrix (has: {', '.join(names)})",
            file=str(cfg.matrix),
            field="--release",
        )
    if cfg.slurm and cfg.mode != "netns":
        raise BadInput.single(
            "--slurm needs --mode netns: each slurmd listens on its host's own address and port "
            f"{S.SLURMD_PORT}, which loopback hosts would share",
            field="--slurm",
        )
    if cfg.slurm and S.missing_tools():
        raise BadInput.single(
            "--slurm needs these Debian packages: " + " ".join(S.missing_tools()),
            field="--slurm",
        )
    if cfg.mode == "netns":
        H.check_subnet()
    if cfg.slurm:
        S.check_port()
    if cfg.prometheus:
        prom_service.check()
    if cfg.kubernetes:
        K.check()
    if unknown_pools := sorted(set(cfg.el9_pools) - set(pools)):
        raise BadInput.single(f"el9 pools {unknown_pools} are not pools of the matrix "
                              f"(has: {', '.join(sorted(pools))})", file=str(cfg.matrix))
    hosts = plan_hosts(cfg.hosts, cfg.mode, pools, cfg.el9, cfg.el9_pools)
    el9 = any(h.os == "el9" for h in hosts)
    if el9 and (missing := [t for t in ("rpmbuild", "createrepo_c")
                            if shutil.which(t) is None]):
        raise BadInput.single(
            f"--os el9 needs {' and '.join(missing)} here (Debian packages rpm, createrepo-c)",
            field="--os",
        )
    steps = 7 if cfg.slurm else 6
    t0 = time.monotonic()
    try:
        progress("base rootfs", 0, steps)
        recipe = BaseRecipe()
        base = ensure_base(paths, recipe, progress=lambda m: progress(m, 0, steps))
        bases = {"debian": base}
        if el9:
            bases["el9"] = ensure_base(paths, recipe_for("el9"),
                                       progress=lambda m: progress(m, 0, steps))
        for d in (paths.run, paths.ssh, paths.logs):
            d.mkdir(parents=True, exist_ok=True)
        progress("fake NVML and apt repository", 1, steps)
        lib = nvml_build.build(paths.cache / "nvml")
        pkgs = repo.plan_packages(releases, cfg.perf, lib.read_bytes()) + repo.kernel_debs()
        repo.build_repo(pkgs, paths.repo)
        addr = BRIDGE_ADDR if cfg.mode == "netns" else "127.0.0.1"
        repo_url = f"http://{addr}:{REPO_PORT}/"
        rpms = (rpmrepo.plan_rpms(releases, cfg.perf, lib.read_bytes()) + rpmrepo.kernel_rpms()
                if el9 else [])
        if rpms:
            rpmrepo.build_rpm_repo(rpms, paths.repo / rpmrepo.DIST,
                                   rpmrepo.driver_streams(releases, rpms))
        if not paths.client_key.exists():
            run(
                [
                    "ssh-keygen",
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    "fleet-lab-controller",
                    "-f",
                    paths.client_key,
                ]
            )
        progress(f"lab layer (release {release})", 2, steps)
        H.write_layer(paths, base, repo_url)
        conf = S.configure(paths, hosts, cfg.health_check_interval) if cfg.slurm else None
        kubeconfig = K.configure(paths) if cfg.kubernetes else None
        S.write_layer(paths, conf)
        if el9:  # a copy of the layer before the debs go in, made EL9
            H.write_el9_layer(paths, f"{repo_url}{rpmrepo.DIST}/")
            layers.install_release_el9(paths, bases["el9"], release, releases)
        layers.install_release(paths, base, pkgs, release, releases)
        atomic_write(paths.host_init, H.HOST_INIT, 0o755)
        progress(f"network ({cfg.mode})", 3, steps)
        if cfg.mode == "netns":
            H.setup_bridge()
            for h in hosts:
                H.setup_host_net(h)
        progress(f"{len(hosts)} hosts", 4, steps)
        with ThreadPoolExecutor(max_workers=8) as ex:
            lines = list(ex.map(lambda h: H.create_host(paths, h, bases[h.os]), hosts))
        atomic_write(paths.known_hosts, "".join(lines))
        state = LabState(
            mode=cfg.mode,
            hosts=hosts,
            repo_url=repo_url,
            matrix=str(cfg.matrix),
            release=None if release == "none" else release,
            run_dir=str(paths.run),
            base_key=recipe.key(),
            created=datetime.now(UTC).isoformat(),
            perf={k: {"factor": v.factor, "noise": v.noise} for k, v in cfg.perf.items()},
            slurm=cfg.slurm,
            slurm_conf=str(conf) if conf else None,
            health_check_interval=cfg.health_check_interval if cfg.slurm else None,
            kubeconfig=str(kubeconfig) if kubeconfig else None,
            fleet_binds=[str(d) for d in hostfleet.fleet_dirs()]
            if hostfleet.fleet_runs_in_hosts()
            else [],
        )
        atomic_write(paths.state_file, state.to_json())
        startup.start_daemon(paths, cfg.model_server)
        progress("waiting for sshd on every host", 5, steps)
        startup.wait_ssh(
            state,
            cfg.timeout,
            lambda n: progress(f"sshd answering on {n}/{len(hosts)} hosts", 5, steps),
        )
        if cfg.prometheus:
            prom_service.start(paths, state, cfg.timeout)
            atomic_write(paths.state_file, state.to_json())
        if state.slurm:
            progress("waiting for every Slurm node to be idle", 6, steps)
            state.slurm_ready_s = round(S.wait_idle(paths, state, cfg.timeout), 2)
            atomic_write(paths.state_file, state.to_json())
            progress(
                f"Slurm: {len(hosts)} nodes idle {state.slurm_ready_s:.1f} s after the daemons "
                "started",
                6,
                steps,
            )
        if state.kubeconfig:
            state.kube_ready_s = round(K.wait_ready(paths, cfg.timeout + 60), 2)
            atomic_write(paths.state_file, state.to_json())
    except BaseException:
        down(paths)
        raise
    progress(f"lab up: {len(hosts)} hosts in {time.monotonic() - t0:.1f} s", steps, steps)
    return state


# ------------------------------------------------------------------------------------ down
def _ours(pid: int, run_dir: Path) -> bool:
    """A process of this lab: its command line or root is in the run dir, or it carries the
    lab's owner mark (slurmctld's helper renames itself and keeps no path in its cmdline)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        root = os.readlink(f"/proc/{pid}/root")
    except OSError:
        return False
    if str(run_dir).encode() in cmd or root.startswith(str(run_dir) + "/"):
        return True
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"{S.OWNER_ENV}={run_dir}".encode() in environ


def _lab_processes(run_dir: Path) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid() and _ours(int(d), run_dir):
            out.append(int(d))
    return out


def down(paths: LabPaths) -> list[str]:
    """Stop everything and remove it; returns what is left (empty when clean). Safe twice."""
    state = None
    with contextlib.suppress(FileNotFoundError, ValueError, TypeError, KeyError):
        state = LabState.load(paths.state_file)
    if state is None and not paths.run.exists():
        return []  # never up, or already down: touch nothing (another lab may be up)
    # a loopback lab owns no network; a netns lab, or a crashed `up` with no state, owns the bridge
    network = state is None or state.mode != "loopback"
    pid = _daemon_pid(paths)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        for _ in range(150):
            if _daemon_pid(paths) is None:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
    if paths.run.exists():
        for _ in range(3):  # host processes whose root or command line is inside the run dir
            procs = _lab_processes(paths.run)
            if not procs:
                break
            for p in procs:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)
            time.sleep(0.2)
        umount_all(paths.run)
    if network:
        H.teardown_net(state)
    left = leftovers(paths, network)
    if not left and paths.run.exists():
        shutil.rmtree(paths.run, ignore_errors=True)
    return left


def leftovers(paths: LabPaths, network: bool = True) -> list[str]:
    left = [f"mount {m}" for m in mounts_under(paths.run)] if paths.run.exists() else []
    if paths.run.exists():
        left += [f"process {p}" for p in _lab_processes(paths.run)]
    if not network:
        return left
    cp = run(["ip", "netns", "list"], check=False)
    left += [
        f"netns {ln.split()[0]}"
        for ln in cp.stdout.decode().splitlines()
        if ln.startswith("fleet-h")
    ]
    left += [f"link {name}" for name in H.lab_links()]
    if run(["ip", "link", "show", BRIDGE], check=False).returncode == 0:
        left.append(f"bridge {BRIDGE}")
    return left


# ------------------------------------------------------------------------------------ status etc.
def load_state(paths: LabPaths) -> LabState:
    if not paths.state_file.exists():
        raise BadInput.single(f"no lab is up (no {paths.state_file}); run `fleet lab up`")
    return LabState.load(paths.state_file)


def installed_packages(root: Path) -> dict[str, str]:
    """nvidia/cuda/companion packages installed in a host, from its dpkg status file."""
    out: dict[str, str] = {}
    try:
        text = (root / "var/lib/dpkg/status").read_text()
    except FileNotFoundError:
        return out
    for block in text.split("\n\n"):
        f = dict(
            ln.split(": ", 1) for ln in block.splitlines() if ": " in ln and not ln.startswith(" ")
        )
        if f.get("Maintainer", "").startswith("fleet lab") and f.get("Status", "").endswith(
            " installed"
        ):
            out[f["Package"]] = f["Version"]
    return out


def installed_rpms(root: Path) -> dict[str, str]:
    """The fake NVIDIA packages installed in an el9 host, from its rpm database (EPOCH:V-R)."""
    cp = run(["rpm", "--root", root, "-qa", "--qf", "%{NAME} %{EPOCHNUM}:%{VERSION}-%{RELEASE}\n"],
             check=False)
    rows = [ln.split() for ln in cp.stdout.decode().splitlines()] if cp.returncode == 0 else []
    return {r[0]: r[1] for r in rows if len(r) == 2 and r[0] != rpmrepo.SYSTEM_PACKAGE}


def status(paths: LabPaths) -> dict[str, Any]:
    state = load_state(paths)
    daemon = _daemon_pid(paths)
    nodes = S.node_states(state.slurm_conf) if state.slurm_conf and daemon else {}
    hosts = []
    for h in state.hosts:
        info = H.boot_info(paths, h.name)
        root = paths.host_root(h.name)
        hosts.append(
            {
                "name": h.name,
                "address": h.address,
                "pool": h.pool,
                "wave": h.wave,
                "gpu_model": h.gpu_model,
                "gpu_count": h.gpu_count,
                "unit": h.unit,
                "os": h.os,
                "ssh": ssh_banner(h.address, h.port, 0.5) if daemon else False,
                "boot_id": info.get("boot_id"),
                "module_loaded": info.get("module"),
                "module_pending": (root / H.PENDING).read_text().strip()
                if (root / H.PENDING).exists()
                else None,
                "packages": installed_rpms(root) if h.os == "el9" else installed_packages(root),
                "faults": sorted(H.read_flags(paths, h.name)),
                "slurm_state": nodes[h.name][0] if h.name in nodes else None,
                "slurm_reason": nodes[h.name][1] or None if h.name in nodes else None,
            }
        )
    return {
        "up": daemon is not None,
        "mode": state.mode,
        "run_dir": state.run_dir,
        "repo_url": state.repo_url,
        "matrix": state.matrix,
        "release": state.release,
        "known_hosts": str(paths.known_hosts),
        "ssh_key": str(paths.client_key),
        "slurm_conf": state.slurm_conf,
        "slurm_ready_s": state.slurm_ready_s,
        "prometheus_url": state.prometheus_url,
        "prometheus_ready_s": state.prometheus_ready_s,
        "kubeconfig": state.kubeconfig,
        "kube_ready_s": state.kube_ready_s,
        "hosts": hosts,
    }


def _host(state: LabState, name: str) -> Any:
    try:
        return state.host(name)
    except KeyError:
        raise BadInput.single(
            f"no lab host {name!r}; hosts: {', '.join(h.name for h in state.hosts)}"
        ) from None


def inject(paths: LabPaths, host: str, specs: list[str]) -> list[F.Fault]:
    require_root("`fleet lab inject`")
    state = load_state(paths)
    h = _host(state, host)
    if not specs:
        raise BadInput.single("name at least one fault: " + ", ".join(F.FAULTS))
    faults = F.parse(specs, h.gpu_count)
    eff = F.Effects()
    for f in faults:
        eff.merge(F.effects(f, h))
    H.apply_effects(paths, h, eff)
    return faults


def reset(paths: LabPaths, host: str) -> None:
    """Clear a host's injected faults; with Slurm, also resume the node if `fleet node-check`
    (the HealthCheckProgram) drained it, since that drain came with the faults."""
    require_root("`fleet lab reset`")
    state = load_state(paths)
    h = _host(state, host)
    H.reset_host(paths, h)
    if state.slurm_conf and _daemon_pid(paths) is not None:
        S.resume_health_drain(state.slurm_conf, h.name)


def reboot(paths: LabPaths, host: str, wait: bool = True, timeout: float = 30) -> dict[str, object]:
    """Power-cycle a host (SIGKILL its namespace); the daemon boots it again."""
    require_root("`fleet lab reboot`")
    state = load_state(paths)
    h = _host(state, host)
    before = H.boot_info(paths, h.name).get("boot_id")
    try:
        upid = int((paths.host_dir(h.name) / "pid").read_text())
        if _ours(upid, paths.run):
            os.kill(upid, signal.SIGKILL)
    except (FileNotFoundError, ValueError, ProcessLookupError):
        pass
    if not wait:
        return {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = H.boot_info(paths, h.name)
        if info.get("boot_id") != before and ssh_banner(h.address, h.port, 0.5):
            return info
        time.sleep(0.1)
    raise CouldNotComplete(f"{h.name} did not come back within {timeout:.0f} s")
