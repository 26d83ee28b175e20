"""Waiting for a lab to come up: the lab daemon's ready file, each host's SSH banner."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from fleet.errors import CouldNotComplete
from fleet.lab.model import LabState
from fleet.lab.paths import LabPaths


def start_daemon(paths: LabPaths, model_server: bool) -> None:
    env = {
        **os.environ,
        "FLEET_LAB_CACHE": str(paths.cache),
        "FLEET_LAB_MODEL_SERVER": "1" if model_server else "0",
    }
    log = open(paths.logs / "daemon.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleet.lab.daemon", str(paths.run)],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=env,
        cwd="/",
    )
    log.close()
    deadline = time.monotonic() + 15
    while not (paths.run / "daemon.ready").exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            tail = (paths.logs / "daemon.log").read_text(errors="replace").strip()[-1500:]
            raise CouldNotComplete(
                f"the lab daemon did not start; see {paths.logs / 'daemon.log'}:\n{tail}"
            )
        time.sleep(0.05)


def ssh_banner(address: str, port: int = 22, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout) as s:
            s.settimeout(timeout)
            return s.recv(8).startswith(b"SSH-")
    except OSError:
        return False


def wait_ssh(state: LabState, timeout: float, report: Callable[[int], None]) -> None:
    pending = {h.name: h for h in state.hosts}
    deadline = time.monotonic() + timeout
    while pending:
        with ThreadPoolExecutor(max_workers=16) as ex:
            ok = dict(
                zip(
                    pending,
                    ex.map(lambda h: ssh_banner(h.address, h.port), pending.values()),
                    strict=True,
                )
            )
        for n, good in ok.items():
            if good:
                del pending[n]
        report(len(state.hosts) - len(pending))
        if pending and time.monotonic() > deadline:
            raise CouldNotComplete(f"hosts did not come up in {timeout:.0f} s: {sorted(pending)}")
        if pending:
            time.sleep(0.1)

