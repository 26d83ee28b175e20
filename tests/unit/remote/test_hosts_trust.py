"""`fleet hosts trust`: the explicit first contact (issue 32). Against a paramiko server on
127.0.0.1 with a scratch HOME; the command runs as users run it (a subprocess)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import paramiko
import pytest
from loopback_sshd import Server

from fleet.remote.backend import SshBackend
from fleet.remote.hostkeys import fingerprint, key_target, known_keys, trust


def _events(db: Path) -> list[Any]:
    from fleet.history import list_events, open_history

    with open_history(str(db), create=False) as h:
        return list_events(h, kind="hosts.trust")


def test_trust_a_new_host_then_it_connects(server: Server, home: Path, tmp_path: Path,
                                           fleet_cli: Any) -> None:
    inv = server.inventory(tmp_path / "inv")  # no ssh_known_hosts_file: ~/.ssh/known_hosts
    env = {"HOME": str(home), "USER": "alice", "SUDO_USER": ""}
    before = SshBackend(inv, connect_timeout=5).probe(["target"])["target"]
    assert not before.reachable and "unknown host key" in (before.error or "")
    db = tmp_path / "h.db"
    r = fleet_cli("--db", str(db), "hosts", "trust", "-i", str(inv), "target", "--json", env=env)
    assert r.returncode == 0, r.stderr
    [doc] = json.loads(r.stdout)["hosts"]
    fp = fingerprint(server.key)
    assert doc["action"] == "added" and doc["fingerprint"] == fp
    assert doc["entry"] == f"[127.0.0.1]:{server.port}"
    assert doc["known_hosts"] == str(home / ".ssh" / "known_hosts")
    assert fp in r.stderr  # shown to the human too
    after = SshBackend(inv, connect_timeout=5).probe(["target"])["target"]
    assert after.ok and after.value is not None, after.error
    [event] = _events(db)
    assert event.subject == "target" and event.actor
    assert event.data["fingerprint"] == fp and fp in event.message
    again = fleet_cli("--db", str(db), "hosts", "trust", "-i", str(inv), "target", "--json",
                      env=env)
    assert again.returncode == 0 and json.loads(again.stdout)["hosts"][0]["action"] == \
        "already trusted"
    assert len(_events(db)) == 1  # nothing changed, nothing recorded
    assert server.passwords == []


def test_a_changed_key_needs_replace_and_is_recorded(server: Server, home: Path,
                                                     tmp_path: Path, fleet_cli: Any) -> None:
    """A re-imaged host offers a new key: refused until --replace, which drops the old line
    (hashed ones too) and records both fingerprints."""
    old = paramiko.ECDSAKey.generate()
    known = tmp_path / "known_hosts"
    entry = f"[127.0.0.1]:{server.port}"
    hashed = paramiko.HostKeys.hash_host(entry)
    known.write_text(f"other.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE1vcmUgdGhhbiAzMiBieXRl\n"
                     f"{hashed} {old.get_name()} {old.get_base64()}\n")
    inv = server.inventory(tmp_path / "inv", known_hosts=known)
    db = tmp_path / "h.db"
    r = fleet_cli("--db", str(db), "hosts", "trust", "-i", str(inv), "target", "--json")
    assert r.returncode == 3, r.stderr
    assert "--replace" in r.stderr and fingerprint(old) in r.stderr
    assert json.loads(r.stdout)["refused"][0]["host"] == "target"
    r = fleet_cli("--db", str(db), "hosts", "trust", "-i", str(inv), "target", "--replace",
                  "--json")
    assert r.returncode == 0, r.stderr
    [doc] = json.loads(r.stdout)["hosts"]
    assert doc["action"] == "replaced" and doc["previous"] == [fingerprint(old)]
    lines = known.read_text().splitlines()
    assert lines[0].startswith("other.example ") and len(lines) == 2  # the rest kept
    assert [k.asbytes() for k in known_keys(known, entry)] == [server.key.asbytes()]
    [event] = _events(db)
    assert event.data["previous"] == [fingerprint(old)] and "replaced" in event.message
    assert SshBackend(inv, connect_timeout=5).probe(["target"])["target"].ok


def test_fingerprint_check_and_dry_run(server: Server, home: Path, tmp_path: Path,
                                       fleet_cli: Any) -> None:
    known = tmp_path / "known_hosts"
    inv = server.inventory(tmp_path / "inv", known_hosts=known)
    db = tmp_path / "h.db"
    wrong = "SHA256:" + "A" * 43
    r = fleet_cli("--db", str(db), "hosts", "trust", "-i", str(inv), "target",
                  "--fingerprint", wrong)
    assert r.returncode == 3 and "not the expected" in r.stderr and not known.exists()
    dry = fleet_cli("--db", str(db), "hosts", "trust", "-i", str(inv), "target", "--dry-run",
                    "--json")
    assert dry.returncode == 0 and json.loads(dry.stdout)["hosts"][0]["action"] == "would add"
    assert not known.exists() and not db.exists()
    ok = fleet_cli("--db", str(db), "hosts", "trust", "-i", str(inv), "target",
                   "--fingerprint", fingerprint(server.key))
    assert ok.returncode == 0, ok.stderr
    assert known.stat().st_mode & 0o777 == 0o600
    bad = fleet_cli("hosts", "trust", "-i", str(inv), "target", "nope")
    assert bad.returncode == 2 and "nope" in bad.stderr


def test_unreachable_host_is_reported(home: Path, tmp_path: Path, fleet_cli: Any) -> None:
    import socket

    with socket.socket() as held:  # bound, never listening: connecting is refused, and the
        held.bind(("127.0.0.1", 0))  # port cannot go to another test's server meanwhile
        inv = Server(held.getsockname()[1], paramiko.ECDSAKey.generate()).inventory(
            tmp_path / "inv")
        r = fleet_cli("--db", str(tmp_path / "h.db"), "hosts", "trust", "-i", str(inv),
                      "target")
    assert r.returncode == 3 and "cannot connect" in r.stderr, r.stderr
    assert not (tmp_path / "h.db").exists()


def test_key_target_follows_the_connection(tmp_path: Path, home: Path) -> None:
    t = key_target("gpu-01", {})
    assert (t.entry, t.known_hosts) == ("gpu-01", home / ".ssh" / "known_hosts")
    t = key_target("gpu-01", {"ssh_hostname": "10.0.0.5", "ssh_port": 2222,
                              "ssh_known_hosts_file": str(tmp_path / "kh")})
    assert (t.entry, t.known_hosts) == ("[10.0.0.5]:2222", tmp_path / "kh")


def test_trust_writes_nothing_when_refused(tmp_path: Path) -> None:
    from fleet.remote.hostkeys import KeyRefused, KeyTarget

    a, b = paramiko.ECDSAKey.generate(), paramiko.ECDSAKey.generate()
    known = tmp_path / "kh"
    target = KeyTarget("h", "10.0.0.1", 22, known)
    assert trust(target, a).action == "added"
    text = known.read_text()
    with pytest.raises(KeyRefused):
        trust(target, b)
    assert known.read_text() == text


def test_key_target_reads_ssh_config_as_pyinfra_does(tmp_path: Path, home: Path) -> None:
    (home / ".ssh" / "config").write_text(
        "Host gpu-*\n  HostName 10.9.9.9\n  Port 2200\n"
        f"  UserKnownHostsFile {tmp_path / 'site_known_hosts'}\n")
    t = key_target("gpu-01", {})
    assert (t.entry, t.known_hosts) == ("[10.9.9.9]:2200", tmp_path / "site_known_hosts")
    t = key_target("gpu-01", {"ssh_port": 22})  # host data wins over ssh_config
    assert t.entry == "10.9.9.9"
