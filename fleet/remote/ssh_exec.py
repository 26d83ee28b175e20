"""Ad-hoc commands on many hosts at once over fabric, for incident triage.

fabric's ThreadingGroup joins its threads without a timeout, so a stuck host would stall the whole
command; here each host runs in a pool thread with a connect timeout and a command timeout, and
the controller never waits longer than both. fabric accepts unknown host keys by default: the
client is switched to paramiko's RejectPolicy with the inventory's known_hosts, so strict
host-key checking stays on.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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


def _run_one(target: SshTarget, command: str, timeout: float, connect_timeout: float) -> ExecResult:
    import paramiko
    from fabric import Config, Connection
    from invoke.exceptions import CommandTimedOut

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
        result = conn.run(command, hide=True, warn=True, timeout=timeout, in_stream=False)
        return ExecResult(target.name, result.exited, result.stdout, result.stderr, None,
                          time.monotonic() - start)
    except CommandTimedOut:
        return ExecResult(target.name, None, "", "", f"timed out after {timeout:g}s",
                          time.monotonic() - start)
    except Exception as exc:  # unreachable, auth, unknown host key: report, don't raise
        return ExecResult(target.name, None, "", "", f"{type(exc).__name__}: {exc}",
                          time.monotonic() - start)
    finally:
        conn.close()


def run_everywhere(targets: Sequence[SshTarget], command: str, *, timeout: float = 60,
                   connect_timeout: float = 10, parallel: int = 32) -> list[ExecResult]:
    if not targets:
        return []
    with ThreadPoolExecutor(max_workers=min(parallel, len(targets))) as pool:
        futures = [pool.submit(_run_one, t, command, timeout, connect_timeout) for t in targets]
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
