"""Several controllers on one PostgreSQL: each a process in its own network namespace.

`Machines(n)` gives n namespaces, each joined to this one by a veth pair (10.213.I.2 there,
10.213.I.1 here). The test server listens on 127.0.0.1 only (scripts/pg-throwaway), which no
other namespace can reach, so a small TCP relay here listens on each 10.213.I.1 and forwards to
it: a controller's every query crosses its own link, as from its own machine. Each controller
has its own name (`FLEET_CONTROLLER`), so none of them treats another's pid as its own.

Without root (no `ip netns`) the controllers run as plain processes, and `Machines.mode` says so.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import make_url

ROOT = Path(__file__).resolve().parents[3]
WORKER = Path(__file__).with_name("controller_worker.py")
FLEET = [sys.executable, "-m", "fleet"]


def write_matrix(path: Path) -> Path:
    """The example matrix with quick rollouts: one wave per pool, the health gate only (the
    benchmark gates judge samples, which is not what these tests are about), no Slurm reboot."""
    doc = yaml.safe_load((ROOT / "matrices" / "example.yaml").read_text())
    for pool in doc["pools"].values():
        ro = pool.setdefault("rollout", {})
        ro.update({"waves": ["100%"], "max_unavailable": "100%", "bake_minutes": 0,
                   "gates": {"health": True, "benchmark": False, "replay": False}})
        ro.pop("reboot", None)
        ro.pop("drain", None)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


class Relay:
    """TCP relay from addresses of this namespace to the database server (one thread)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.loop = asyncio.new_event_loop()
        self.servers: list[Any] = []
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    async def _pipe(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while data := await r.read(65536):
                w.write(data)
                await w.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            w.close()

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            ur, uw = await asyncio.open_connection(self.host, self.port)
        except OSError:
            w.close()
            return
        await asyncio.gather(self._pipe(r, uw), self._pipe(ur, w))

    def listen(self, address: str) -> None:
        fut = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, address, self.port), self.loop)
        self.servers.append(fut.result(10))

    def close(self) -> None:
        for s in self.servers:
            self.loop.call_soon_threadsafe(s.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@dataclass
class Machine:
    name: str  # controller name (FLEET_CONTROLLER)
    netns: str | None
    db: str  # the database URL as this machine reaches it

    def argv(self, cmd: Sequence[str]) -> list[str]:
        return (["ip", "netns", "exec", self.netns] if self.netns else []) + list(cmd)

    def env(self) -> dict[str, str]:
        return {**os.environ, "FLEET_CONTROLLER": self.name, "PYTHONPATH": str(ROOT),
                "NO_COLOR": "1", "COLUMNS": "200"}

    def spawn(self, config: dict[str, Any], out: Path) -> subprocess.Popen[bytes]:
        """A controller_worker.py process with `config`; it writes its result to `out`."""
        cfg = {**config, "db": self.db, "out": str(out)}
        return subprocess.Popen(self.argv([sys.executable, str(WORKER), json.dumps(cfg)]),
                                env=self.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)

    def fleet(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """The real `fleet` CLI, run from this machine against the shared history."""
        return subprocess.run(self.argv([*FLEET, "--db", self.db, *args]), env=self.env(),
                              capture_output=True, text=True, timeout=timeout, check=False)


class Machines:
    """n controller machines on one database (see the module doc)."""

    def __init__(self, n: int, db_url: str) -> None:
        url = make_url(db_url)
        self.tag = uuid.uuid4().hex[:4]
        self.netns_ok = os.geteuid() == 0 and shutil.which("ip") is not None
        self.mode = "netns" if self.netns_ok else "processes"
        self.created: list[str] = []
        self.links: list[str] = []
        self.relay: Relay | None = None
        self.machines: list[Machine] = []
        if not self.netns_ok:
            self.machines = [Machine(f"ctl{i}", None, db_url) for i in range(n)]
            return
        self.relay = Relay(url.host or "127.0.0.1", url.port or 5432)
        try:
            for i, octet in enumerate(_free_subnets(n)):
                ns, here, there = f"fc{self.tag}{i}", f"fh{self.tag}{i}", f"fn{self.tag}{i}"
                near, far = f"10.213.{octet}.1", f"10.213.{octet}.2"
                _ip("netns", "add", ns)
                self.created.append(ns)
                _ip("link", "add", here, "type", "veth", "peer", "name", there, "netns", ns)
                self.links.append(here)
                _ip("addr", "add", f"{near}/30", "dev", here)
                _ip("link", "set", here, "up")
                _ip("-n", ns, "addr", "add", f"{far}/30", "dev", there)
                _ip("-n", ns, "link", "set", there, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
                self.relay.listen(near)
                self.machines.append(Machine(f"ctl{i}", ns, url.set(host=near)
                                             .render_as_string(hide_password=False)))
        except BaseException:
            self.close()
            raise

    def __getitem__(self, i: int) -> Machine:
        return self.machines[i]

    def __len__(self) -> int:
        return len(self.machines)

    def close(self) -> None:
        if self.relay is not None:
            self.relay.close()
        # Delete our ends of the veth pairs first: a deleted namespace lives on (unnamed) while
        # its orphaned TCP sockets time out, and would keep each pair and its address alive.
        for link in self.links:
            subprocess.run(["ip", "link", "del", link], capture_output=True, check=False)
        for ns in self.created:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        self.created, self.links = [], []


def _free_subnets(n: int) -> list[int]:
    """n third octets of 10.213.X.0/30 that no interface here holds yet.

    A fixed choice collides with the lingering links of an earlier run (see `close`): two routes
    to one /30, replies leave by the dead link, and every controller's connect times out."""
    cp = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True,
                        check=False)
    used = {int(m) for m in re.findall(r"inet 10\.213\.(\d+)\.", cp.stdout)}
    free = [x for x in range(256) if x not in used]
    if len(free) < n:
        raise RuntimeError(f"only {len(free)} free subnets in 10.213.0.0/16 for {n} controllers")
    return free[:n]


def _ip(*args: str) -> None:
    cp = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if cp.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {cp.stderr.strip()}")


def wait_file(path: Path, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    """Wait until `path` exists (the worker reached a point), failing if the worker died."""
    import time

    end = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            out = proc.stdout.read().decode() if proc.stdout else ""
            raise AssertionError(f"worker exited {proc.returncode} before {path.name}: {out}"
                                 f"{_worker_error(proc)}")
        if time.monotonic() > end:
            raise AssertionError(f"worker did not reach {path.name} in {timeout} s")
        time.sleep(0.05)


def finish(proc: subprocess.Popen[bytes], out: Path, timeout: float = 120) -> dict[str, Any]:
    """Wait for a worker and read its result (its output in the failure message)."""
    text = proc.communicate(timeout=timeout)[0].decode()
    assert out.exists(), f"worker wrote no result (exit {proc.returncode}): {text}"
    return dict(json.loads(out.read_text()), output=text, exit=proc.returncode)


def _worker_error(proc: subprocess.Popen[bytes]) -> str:
    """The error a worker wrote to its result file (it exits 0 and reports there)."""
    try:
        argv = list(proc.args) if isinstance(proc.args, list) else []
        out = Path(json.loads(str(argv[-1]))["out"])
        return "\n" + str(json.loads(out.read_text()).get("error", ""))
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return ""
