"""Host keys: where a host's key is looked up, what the host offers, and trusting it.

Every connection fleet makes checks the host's key strictly (pyinfra with
`ssh_strict_host_key_checking = "yes"`, fabric with paramiko's RejectPolicy): an unknown or
changed key refuses that host. The only way a key enters known_hosts through fleet is
`fleet hosts trust HOST`, which reads the key the host offers (before any authentication, so no
password or key is sent), prints its fingerprint and appends it; a key that differs from the one
on file is replaced only with `--replace` (a re-imaged host).

The known_hosts file of a host is the one its connections read: its `ssh_known_hosts_file`
host data, else the `UserKnownHostsFile` of ~/.ssh/config for it, else ~/.ssh/known_hosts; the
name looked up is `ssh_hostname` (or the inventory name, or ssh_config's HostName), as
`[name]:port` when the port is not 22.
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet.errors import CouldNotComplete


class KeyRefused(CouldNotComplete):
    """The host's key was not trusted: it differs from the one on file (without --replace) or
    from the fingerprint the operator expects."""


@dataclass(frozen=True)
class KeyTarget:
    """Where one inventory host's key is checked: the name in known_hosts and the file."""

    host: str  # the inventory name
    hostname: str
    port: int
    known_hosts: Path

    @property
    def entry(self) -> str:
        """The name as known_hosts spells it (OpenSSH and paramiko agree)."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


def key_target(name: str, data: Mapping[str, Any]) -> KeyTarget:
    """The same resolution pyinfra's SSH connector makes when it connects `name`."""
    from pyinfra.connectors.sshuserclient.client import SSHClient, get_ssh_config

    get_ssh_config.cache.clear()  # pyinfra keeps the file it read first; read it as it is now
    hostname = str(data.get("ssh_hostname") or name)
    port = int(data.get("ssh_port") or 0)
    resolved, cfg, _fwd, _policy, files, _alive, _agent = SSHClient().parse_config(  # type: ignore[no-untyped-call]
        hostname, {"port": port} if port else {}, ssh_config_file=data.get("ssh_config_file"),
        strict_host_key_checking="yes")
    explicit = data.get("ssh_known_hosts_file")
    known = Path(os.path.expanduser(str(explicit))) if explicit else Path(files[0])
    # pyinfra's connect lays its own arguments over ssh_config's: an explicit ssh_port wins
    return KeyTarget(name, str(resolved), port or int(cfg.get("port") or 22), known)


def fingerprint(key: Any) -> str:
    """OpenSSH's SHA256 fingerprint (`ssh-keygen -lf`): SHA256:<base64, no padding>."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def offered_key(target: KeyTarget, timeout: float = 10.0) -> Any:
    """The host key the server at `target` offers: a key exchange, no authentication."""
    import paramiko

    try:
        sock = socket.create_connection((target.hostname, target.port), timeout=timeout)
    except OSError as exc:
        raise CouldNotComplete(f"{target.host}: cannot connect to {target.entry}: {exc}") from exc
    transport = paramiko.Transport(sock)
    try:
        transport.start_client(timeout=timeout)
        return transport.get_remote_server_key()
    except (paramiko.SSHException, EOFError, OSError) as exc:
        raise CouldNotComplete(f"{target.host}: no SSH key exchange with {target.entry}: "
                               f"{exc}") from exc
    finally:
        transport.close()


def _matches(entry: Any, name: str) -> bool:
    import paramiko

    for pattern in entry.hostnames:
        if pattern == name:
            return True
        if pattern.startswith("|1|"):  # a hashed name (HashKnownHosts)
            salt = pattern.split("|")[2]
            if paramiko.HostKeys.hash_host(name, salt) == pattern:
                return True
    return False


def known_keys(path: Path, name: str) -> list[Any]:
    """The keys known_hosts at `path` holds for `name` (empty when none or no file)."""
    from paramiko.hostkeys import HostKeyEntry

    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            entry = HostKeyEntry.from_line(line)
        except Exception:  # noqa: BLE001 - a line paramiko cannot read is not ours to judge
            entry = None
        if entry is not None and entry.key is not None and _matches(entry, name):
            out.append(entry.key)
    return out


@dataclass(frozen=True)
class Trusted:
    """What `trust` did for one host."""

    host: str
    entry: str
    known_hosts: str
    key_type: str
    fingerprint: str
    action: str  # "added", "replaced", "already trusted", "would add", "would replace"
    previous: tuple[str, ...] = ()  # fingerprints replaced

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "entry": self.entry, "known_hosts": self.known_hosts,
                "key_type": self.key_type, "fingerprint": self.fingerprint,
                "action": self.action, "previous": list(self.previous)}


def trust(target: KeyTarget, key: Any, *, replace: bool = False, dry_run: bool = False,
          expect: str | None = None) -> Trusted:
    """Record `key` as `target`'s host key in its known_hosts.

    KeyRefused when the key's fingerprint is not `expect` (given), or when known_hosts holds
    another key for the host and `replace` is not set (a re-imaged host, or an impostor: say
    which after checking). Replacing drops every line for the host, hashed ones included, and
    keeps the rest of the file as it was.
    """
    fp = fingerprint(key)
    if expect is not None and expect != fp:
        raise KeyRefused(f"{target.host} ({target.entry}) offers {key.get_name()} key {fp}, "
                         f"not the expected {expect}: refusing it")
    known = known_keys(target.known_hosts, target.entry)
    same = [k for k in known if k.get_name() == key.get_name() and k.asbytes() == key.asbytes()]
    others = tuple(fingerprint(k) for k in known if k not in same)
    base = {"host": target.host, "entry": target.entry, "known_hosts": str(target.known_hosts),
            "key_type": key.get_name(), "fingerprint": fp}
    if same and not others:
        return Trusted(**base, action="already trusted")
    if others and not replace:
        raise KeyRefused(
            f"{target.host} ({target.entry}) now offers {key.get_name()} key {fp}, but "
            f"{target.known_hosts} holds another key for it ({', '.join(others)}): if the host "
            "was re-imaged, check the new fingerprint and run again with --replace")
    if dry_run:
        action = "would replace" if others else "would add"
    else:
        _write(target, key)
        action = "replaced" if others else "added"
    return Trusted(**base, action=action, previous=others)


def _write(target: KeyTarget, key: Any) -> None:
    """known_hosts without the host's old lines, plus the new one; written whole (a temporary
    file renamed over it), so a reader never sees half a file."""
    from paramiko.hostkeys import HostKeyEntry

    path = target.known_hosts
    try:
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        lines, mode = [], 0o600
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    kept = []
    for line in lines:
        try:
            entry = HostKeyEntry.from_line(line)
        except Exception:  # noqa: BLE001 - kept as it was
            entry = None
        if entry is None or not _matches(entry, target.entry):
            kept.append(line if line.endswith("\n") else line + "\n")
    kept.append(f"{target.entry} {key.get_name()} {key.get_base64()}\n")
    fd, tmp = tempfile.mkstemp(prefix=".known_hosts.", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.writelines(kept)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def refusal(host: str, detail: str) -> str:
    """The message for a host refused for its key: what happened and how to trust it."""
    return (f"{detail}: refusing {host} (strict host-key checking). If the host is new or was "
            f"re-imaged, check its key and trust it: fleet hosts trust -i INVENTORY {host}"
            " (add --replace for a changed key)")
