"""The lab for integration tests: 5 hosts (netns) with a real Slurm (slurmctld + munged here, a
slurmd in every host) and a real Kubernetes API server (one Node per host) for the whole session,
torn down at the end. Slurm commands need `SLURM_CONF=lab_state.slurm_conf` (the `slurm_env`
fixture), kubectl the `kube_env` fixture."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest

from fleet.lab import lab
from fleet.lab.kube import missing_tools as kube_missing_tools
from fleet.lab.paths import LabPaths
from fleet.lab.repo import Perf
from fleet.lab.slurm import missing_tools as slurm_missing_tools
from fleet.lab.sysutil import missing_tools

ROOT = Path(__file__).resolve().parents[2]
RUN_DIR = Path(os.environ.get("FLEET_LAB_TEST_DIR", "/run/fleet-lab-test"))


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "the lab needs root (CI runs it as root: bash scripts/test)"
    missing = missing_tools() + slurm_missing_tools() + kube_missing_tools()
    if missing:
        return "the lab needs Debian packages: " + " ".join(missing)
    if shutil.which("ip") and os.system("ip link show fleetbr0 >/dev/null 2>&1") == 0:
        return "another lab is up (bridge fleetbr0 exists): `fleet lab down` first"
    return None


class Host:
    """One lab host over SSH with strict host-key checking (paramiko, RejectPolicy)."""

    def __init__(self, paths: LabPaths, spec) -> None:  # noqa: ANN001
        self.paths, self.spec, self.name = paths, spec, spec.name
        self._client: paramiko.SSHClient | None = None

    def client(self) -> paramiko.SSHClient:
        if (
            self._client is None
            or not self._client.get_transport()
            or not self._client.get_transport().is_active()
        ):  # type: ignore[union-attr]
            c = paramiko.SSHClient()
            c.load_host_keys(str(self.paths.known_hosts))
            c.set_missing_host_key_policy(paramiko.RejectPolicy())
            c.connect(
                self.spec.address,
                port=self.spec.port,
                username="root",
                key_filename=str(self.paths.client_key),
                timeout=5,
                allow_agent=False,
                look_for_keys=False,
            )
            self._client = c
        return self._client

    def sh(self, cmd: str, check: bool = True, timeout: float = 60) -> tuple[int, str, str]:
        """Run `cmd` on a channel of its own. Not SSHClient.exec_command: the stdin file it
        makes, dropped unclosed, was collected by the garbage collector on paramiko's
        transport thread while that thread held the channel's lock, and its close() took the
        same lock: a deadlock (CI, test_pin_on_lab.py's setup hung until the 600 s timeout)."""
        for attempt in (1, 2):
            try:
                transport = self.client().get_transport()
                assert transport is not None
                chan = transport.open_session(timeout=timeout)
                chan.settimeout(timeout)
                chan.exec_command(cmd)
                break
            except (paramiko.SSHException, OSError, EOFError):
                # a connection from before a reboot can look active until its channel times out
                self.close()
                if attempt == 2:
                    raise
        try:
            o = chan.makefile("rb").read().decode()
            e = chan.makefile_stderr("rb").read().decode()
            # never recv_exit_status(): it waits forever when the host reboots before sending it
            if not chan.status_event.wait(timeout):
                raise AssertionError(f"{self.name}: `{cmd}` gave no exit status in {timeout} s")
            rc = chan.exit_status
        finally:
            chan.close()
        if check and rc != 0:
            raise AssertionError(f"{self.name}: `{cmd}` exited {rc}: {e[-2000:]}{o[-2000:]}")
        return rc, o, e

    def py(self, code: str) -> object:
        """Run python3 on the host (plain pynvml available) and parse its last stdout line."""
        _, o, _ = self.sh("python3 - <<'EOF'\n" + textwrap.dedent(code) + "\nEOF\n")
        return json.loads(o.strip().splitlines()[-1])

    def nvml(self) -> dict:
        return self.py("""
            import json, pynvml as n
            try:
                n.nvmlInit()
            except n.NVMLError as e:
                print(json.dumps({"error": type(e).__name__})); raise SystemExit
            print(json.dumps({"driver": n.nvmlSystemGetDriverVersion(),
                              "count": n.nvmlDeviceGetCount()}))
        """)  # type: ignore[return-value]

    def boot_id(self) -> str:
        return self.sh("cat /proc/sys/kernel/random/boot_id")[1].strip()

    def reboot_and_wait(self, timeout: float = 30) -> str:
        before = self.boot_id()
        try:
            self.sh("( sleep 1 && reboot ) </dev/null >/dev/null 2>&1 &", timeout=5)
        finally:
            self.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(0.3)
            try:
                now = self.boot_id()
            except Exception:  # noqa: BLE001 - down while rebooting
                self.close()
                continue
            if now != before:
                return now
        raise AssertionError(f"{self.name} did not reboot in {timeout} s")

    def release_pins(self) -> None:
        """Undo what `fleet apply` leaves on a Debian host to keep its release (the apt pin, the
        unattended-upgrades blacklist, the holds), so that a test installing packages by hand
        finds the host as the lab made it, whichever tests ran before."""
        self.sh("rm -f /etc/apt/preferences.d/fleet-nvidia.pref "
                "/etc/apt/apt.conf.d/51fleet-nvidia-unattended && "
                "held=$(apt-mark showhold) && { [ -z \"$held\" ] || apt-mark unhold $held; }"
                " >/dev/null")

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


@pytest.fixture(scope="session")
def lab_paths() -> Iterator[LabPaths]:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    paths = LabPaths(cache=LabPaths.from_env().cache, run=RUN_DIR)
    lab.down(paths)
    try:
        lab.up(
            paths,
            lab.UpConfig(
                hosts=5,
                matrix=ROOT / "matrices" / "example.yaml",
                perf={"r570-cuda12.8": Perf(0.75, 0.01)},
                slurm=True,
                # `fleet node-check` in every host costs CPU that the benchmark gates of the
                # rollout tests feel on a 2-core machine: every 30 s instead of the lab's 10 s
                health_check_interval=30,
                prometheus=True,  # one for the session: the live gate's and hygiene's lab tests
                kubernetes=True,  # etcd + API server start beside the hosts' boots (~10 s)
            ),
        )
        yield paths
    finally:
        left = lab.down(paths)
        assert not left, f"teardown left {left}"
        assert not paths.run.exists()
        # nothing of the lab's Slurm either: slurmctld's port is free again
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", 6917), 0.5):
            raise AssertionError("something still listens on the lab's SlurmctldPort 6917")
        for port in (6930, 6932):  # nor of its etcd and API server
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
                raise AssertionError(f"something still listens on the lab's Kubernetes port {port}")


@pytest.fixture(scope="session")
def lab_state(lab_paths: LabPaths):
    return lab.load_state(lab_paths)


@pytest.fixture(scope="session")
def kube_env(lab_state) -> dict[str, str]:
    """The environment for kubectl against the lab's own API server (KUBECONFIG, KUBECACHEDIR)."""
    from fleet.lab.kube import kubectl_env

    assert lab_state.kubeconfig, "the session lab runs with kubernetes"
    return kubectl_env(lab_state.kubeconfig)


@pytest.fixture(scope="session")
def slurm_env(lab_state) -> dict[str, str]:
    """The environment for sinfo, squeue, sbatch, srun and scontrol against the lab's Slurm."""
    assert lab_state.slurm_conf, "the session lab runs with slurm"
    return {**os.environ, "SLURM_CONF": lab_state.slurm_conf}


@pytest.fixture(scope="session")
def hosts(lab_paths: LabPaths, lab_state) -> Iterator[dict[str, Host]]:
    hs = {h.name: Host(lab_paths, h) for h in lab_state.hosts}
    yield hs
    for h in hs.values():
        h.close()
