"""Ad-hoc commands on many hosts at once over fabric, for incident triage.

fabric's ThreadingGroup joins its threads without a timeout, so a stuck host would stall the whole
command; here each host runs in a pool thread with a connect timeout and a command timeout, and
the controller never waits longer than both. fabric accepts unknown host keys by default: the
client is switched to paramiko's RejectPolicy with the inventory's known_hosts, so strict
host-key checking stays on (`fleet hosts trust` adds a key). fabric keeps everything a command
prints; the command runs through `fleet.remote.bounded` instead, so one host's output is capped
(`limit`, EXEC_LIMIT by default) and past it that host fails, cut off.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet.remote.bounded import EXEC_LIMIT, HostTimedOut, OutputTooLarge, run_bounded


@dataclass(frozen=True)
class SshTarget:
    """How to reach one host, from pyinfra host data (the keys pyinfra's SSH connector reads)."""

    name: str
    hostname: str
    port: int = 22
    user: str | None = None
    key: str | None = None
    known_hosts: str | None = None

    @classmethod
    def from_host_data(cls, name: str, data: Mapping[str, Any]) -> SshTarget:
        return cls(
            name=name,
            hostname=str(data.get("ssh_hostname") or name),
            port=int(data.get("ssh_port") or 22),
            user=data.get("ssh_user"),
            key=data.get("ssh_key"),
            known_hosts=data.get("ssh_known_hosts_file"),
        )


@dataclass(frozen=True)
class ExecResult:
    host: str
    exit_code: int | None  # None: could not run (unreachable, timed out)
    stdout: str
    stderr: str
    error: str | None
    seconds: float


def _run_one(target: SshTarget, command: str, timeout: float, connect_timeout: float,
             limit: int = EXEC_LIMIT) -> ExecResult:
    import paramiko
    from fabric import Config, Connection

    from fleet.remote.hostkeys import refusal

    start = time.monotonic()
    connect_kwargs: dict[str, Any] = {"allow_agent": False, "look_for_keys": target.key is None}
    if target.key:
        connect_kwargs["key_filename"] = [target.key]
    config = Config(overrides={"load_ssh_configs": False})
    conn = Connection(target.hostname, user=target.user, port=target.port, config=config,
                      connect_timeout=connect_timeout, connect_kwargs=connect_kwargs)
    conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
    known = target.known_hosts or str(Path.home() / ".ssh" / "known_hosts")
    try:
        if Path(known).is_file():
            conn.client.load_host_keys(known)
        conn.open()
        out = run_bounded(conn.client.get_transport(), command, timeout=timeout, limit=limit)
        return ExecResult(target.name, out.exit_code, out.stdout.decode("utf-8", "replace"),
                          out.stderr.decode("utf-8", "replace"), None, time.monotonic() - start)
    except HostTimedOut:
        return ExecResult(target.name, None, "", "", f"timed out after {timeout:g}s",
                          time.monotonic() - start)
    except OutputTooLarge as exc:
        return ExecResult(target.name, None, "", "", str(exc), time.monotonic() - start)
    except paramiko.BadHostKeyException as exc:
        return ExecResult(target.name, None, "", "", refusal(
            target.name, f"host key changed: {exc.hostname} offers another key than "
            f"{known} holds"), time.monotonic() - start)
    except paramiko.SSHException as exc:
        error = f"{type(exc).__name__}: {exc}"
        if "not found in known_hosts" in str(exc):
            error = refusal(target.name, f"unknown host key: {str(exc).split(chr(39))[1]} is "
                                         f"not in {known}")
        return ExecResult(target.name, None, "", "", error, time.monotonic() - start)
    except Exception as exc:  # unreachable, auth: report, don't raise
        return ExecResult(target.name, None, "", "", f"{type(exc).__name__}: {exc}",
                          time.monotonic() - start)
    finally:
        conn.close()


def run_everywhere(targets: Sequence[SshTarget], command: str, *, timeout: float = 60,
                   connect_timeout: float = 10, parallel: int = 32,
                   limit: int = EXEC_LIMIT) -> list[ExecResult]:
    if not targets:
        return []
    with ThreadPoolExecutor(max_workers=min(parallel, len(targets))) as pool:
        futures = [pool.submit(_run_one, t, command, timeout, connect_timeout, limit)
                   for t in targets]
        return [f.result() for f in futures]


@dataclass(frozen=True)
class ResultGroup:
    """Hosts that answered exactly the same: what on-call reads first."""

    hosts: tuple[str, ...]
    exit_code: int | None
    stdout: str
    stderr: str
    error: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"hosts": list(self.hosts), "exit_code": self.exit_code, "stdout": self.stdout,
                "stderr": self.stderr, "error": self.error}


def group_results(results: Sequence[ExecResult]) -> list[ResultGroup]:
    """Identical outcomes together, largest group first; errors are grouped by message."""
    groups: dict[tuple[Any, ...], list[str]] = {}
    for r in results:
        groups.setdefault((r.exit_code, r.stdout, r.stderr, r.error), []).append(r.host)
    out = [ResultGroup(tuple(sorted(h)), *key) for key, h in groups.items()]
    return sorted(out, key=lambda g: (-len(g.hosts), g.exit_code is None, g.hosts))
