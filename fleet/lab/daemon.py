"""The lab supervisor: one detached process per lab (`python -m fleet.lab.daemon RUN_DIR`).

It serves the apt repository over HTTP, runs the lab's munged and slurmctld when the lab has
Slurm (`fleet.lab.slurm`), and keeps every host booted: when a host's PID 1 exits (the
host ran `reboot`, or `fleet lab reboot` killed it) it prepares the next boot (pending kernel module
becomes the loaded one, new boot id, kernel log) and starts it again, unless the host carries the
`reboot-hang` fault (then it stays down until `fleet lab reset`). SIGTERM stops everything.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from fleet.lab import hosts as H
from fleet.lab import kube as K
from fleet.lab import slurm as S
from fleet.lab.model import REPO_PORT, HostSpec, LabState
from fleet.lab.paths import LabPaths
from fleet.lab.startup import ssh_banner


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


class Supervisor:
    def __init__(self, paths: LabPaths, state: LabState) -> None:
        self.paths = paths
        self.state = state
        self.stopping = threading.Event()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.lock = threading.Lock()
        self.model_server = os.environ.get("FLEET_LAB_MODEL_SERVER", "1") == "1"
        self.slurm: list[subprocess.Popen[bytes]] = []
        self.kube: K.ControlPlane | None = None
        self.answered: dict[str, subprocess.Popen[bytes]] = {}  # host -> the boot sshd answered

    def serve_repo(self) -> ThreadingHTTPServer:
        addr = self.state.repo_url.split("//", 1)[1].split(":", 1)[0]
        handler = functools.partial(_Quiet, directory=str(self.paths.repo))
        ThreadingHTTPServer.allow_reuse_address = True
        srv = ThreadingHTTPServer((addr, REPO_PORT), handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, name="repo-http", daemon=True).start()
        return srv

    def _uptime(self) -> float:
        with open("/proc/uptime") as f:
            return float(f.read().split()[0])

    def run_host(self, host: HostSpec) -> None:
        log = open(self.paths.logs / f"{host.name}.log", "ab")  # noqa: SIM115
        fast_exits = 0
        booted = False  # the first boot is the lab's start, later ones are reboots
        while not self.stopping.is_set():
            flags = H.read_flags(self.paths, host.name)
            down = self.paths.host_dir(host.name) / "down"
            if flags.get("reboot-hang") and down.exists():
                time.sleep(0.2)  # powered off until `fleet lab reset` clears the fault
                continue
            down.unlink(missing_ok=True)
            H.prepare_boot(self.paths, host, model_server=self.model_server)
            S.prepare_boot(self.paths, self.state, host, reboot=booted)
            booted = True
            argv = H.host_argv(self.paths, host, self._uptime())
            with self.lock:
                if self.stopping.is_set():
                    break
                p = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                self.procs[host.name] = p
                (self.paths.host_dir(host.name) / "pid").write_text(f"{p.pid}\n")
            started = time.monotonic()
            p.wait()
            if self.stopping.is_set():
                break
            (self.paths.host_dir(host.name) / "down").write_text("rebooting\n")
            fast_exits = fast_exits + 1 if time.monotonic() - started < 1.0 else 0
            time.sleep(min(5.0, 0.2 * (2**fast_exits)) if fast_exits > 2 else 0.3)
        log.close()

    def stop(self) -> None:
        self.stopping.set()
        with self.lock:
            for p in self.procs.values():
                if p.poll() is None:
                    # `unshare --fork` ignores SIGTERM; SIGKILL plus --kill-child ends the namespace
                    p.kill()
        for p in list(self.procs.values()):
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
        S.stop_controller(self.slurm)
        if self.kube is not None:
            self.kube.stop()

    def host_up(self, name: str) -> bool:
        """The host's PID 1 runs, it is not between boots, and its sshd answered once since
        this boot (Node Ready). sshd is asked only until it answers: a banner every poll would
        fork an sshd per host four times a second and crowd out real logins (MaxStartups)."""
        p = self.procs.get(name)
        if p is None or p.poll() is not None or (self.paths.host_dir(name) / "down").exists():
            return False
        if self.answered.get(name) is p:
            return True
        h = self.state.host(name)
        if not ssh_banner(h.address, h.port, 0.5):
            return False
        self.answered[name] = p
        return True

    def main(self) -> int:
        srv = self.serve_repo()
        if self.state.slurm_conf:
            # before any host boots, so every slurmd registers at its first try
            self.slurm = S.start_controller(self.paths, Path(self.state.slurm_conf))
        if self.state.kubeconfig:  # starts beside the hosts' boots; `lab up` waits for it
            self.kube = K.ControlPlane(self.paths, [h.name for h in self.state.hosts], self.host_up)
            self.kube.start()
        threads = [
            threading.Thread(target=self.run_host, args=(h,), name=h.name, daemon=True)
            for h in self.state.hosts
        ]
        for t in threads:
            t.start()
        (self.paths.run / "daemon.ready").write_text("ok\n")
        self.stopping.wait()
        self.stop()
        srv.shutdown()
        return 0


def main(argv: list[str]) -> int:
    run_dir = Path(argv[0])
    paths = LabPaths(
        cache=Path(os.environ.get("FLEET_LAB_CACHE", "/var/cache/fleet-lab")), run=run_dir
    )
    state = LabState.load(paths.state_file)
    sup = Supervisor(paths, state)

    def on_term(signum: int, frame: object) -> None:
        sup.stopping.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    paths.daemon_pid.write_text(f"{os.getpid()}\n")
    return sup.main()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
