"""Hosts are untrusted (issue 32): strict host keys on every connection, a deadline on every
command, a cap on what a host may send. Against a paramiko server on 127.0.0.1
(loopback_sshd), with a scratch HOME so nothing of the real user's ~/.ssh is read or written.
"""

from __future__ import annotations

import resource
import time
from pathlib import Path

import paramiko
import pytest
from loopback_sshd import Server, loopback_sshd

from fleet.errors import BadInput
from fleet.remote.backend import SshBackend
from fleet.remote.bounded import MiB
from fleet.remote.ssh_exec import SshTarget, run_everywhere


def _exec(inv: Path, command: str = "true", **kw: float) -> object:
    from fleet.remote.session import load_inventory

    h = next(iter(load_inventory(inv)))
    return run_everywhere([SshTarget.from_host_data(h.name, h.data.dict())], command, **kw)[0]


# ------------------------------------------------------------------------------- host keys
def test_unknown_host_key_refuses_the_host_and_sends_no_password(
        server: Server, home: Path, tmp_path: Path) -> None:
    """pyinfra's default (`accept-new`) saved an impostor's key at first contact and sent it
    the password; now the probe refuses the host, names it and says how to trust it."""
    known = home / ".ssh" / "known_hosts"
    known.write_text("")
    inv = tmp_path / "inv.py"
    data = {"ssh_hostname": "127.0.0.1", "ssh_port": server.port, "ssh_user": "root",
            "ssh_password": "S3cret-root-pw"}
    inv.write_text(f"gpu = [('target', {data!r})]\n")
    res = SshBackend(inv, connect_timeout=5).probe(["target"])["target"]
    assert not res.ok and not res.reachable and res.value is None
    assert "unknown host key" in (res.error or "") and "refusing target" in (res.error or "")
    assert "fleet hosts trust" in (res.error or "")
    assert known.read_text() == ""  # nothing saved
    assert server.passwords == [] and server.commands == []


def test_changed_host_key_is_refused_by_pyinfra_and_fabric(server: Server, home: Path,
                                                           tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(server.known_hosts_line(paramiko.ECDSAKey.generate()))  # the old image
    inv = server.inventory(tmp_path / "inv", known_hosts=known)
    res = SshBackend(inv, connect_timeout=5).probe(["target"])["target"]
    assert not res.reachable and "host key changed" in (res.error or "")
    assert "refusing target" in (res.error or "") and "--replace" in (res.error or "")
    r = _exec(inv)
    assert r.exit_code is None and "host key changed" in (r.error or "")  # type: ignore[attr-defined]
    assert server.commands == []


def test_known_host_key_connects(server: Server, home: Path, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(server.known_hosts_line())
    inv = server.inventory(tmp_path / "inv", known_hosts=known)
    res = SshBackend(inv, connect_timeout=5).probe(["target"])["target"]
    assert res.ok and res.value is not None and res.value.source == "none", res.error
    r = _exec(inv, "echo hi")
    assert r.exit_code == 0 and r.error is None  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", ["no", "accept-new", "off", False])
def test_inventory_turning_checking_off_is_refused(tmp_path: Path, value: object) -> None:
    inv = tmp_path / "inv.py"
    inv.write_text(f"gpu = [('gpu-01', {{'ssh_strict_host_key_checking': {value!r}}})]\n")
    with pytest.raises(BadInput) as e:
        SshBackend(inv)
    [p] = e.value.problems
    assert p.field == "ssh_strict_host_key_checking" and p.file == str(inv)
    assert "gpu-01" in p.message and "fleet hosts trust" in p.message
    if isinstance(value, str):
        assert p.line == 1


def test_a_host_built_in_code_with_accept_new_is_still_strict(server: Server, home: Path) -> None:
    """Belt and braces: an Inventory object made in code never reaches the inventory check."""
    from pyinfra.api import Inventory

    from fleet.remote.session import connected

    inv = Inventory(([("127.0.0.1", {"ssh_port": server.port, "ssh_user": "root",
                                     "ssh_strict_host_key_checking": "accept-new"})], {}))
    with connected(inv, list(inv), connect_timeout=5) as conn:
        assert "unknown host key" in conn.unreachable["127.0.0.1"]
    assert not (home / ".ssh" / "known_hosts").exists() or \
        (home / ".ssh" / "known_hosts").read_text() == ""


# ------------------------------------------------------------------------------ deadlines
def test_a_host_that_never_answers_times_out_and_the_rest_finish(home: Path,
                                                                 tmp_path: Path) -> None:
    """One host accepts the probe and never answers: it is reported unreachable (timed out)
    after its deadline (`command_timeout_s` host data), and the other host's facts are in."""
    with loopback_sshd() as good, loopback_sshd() as stuck:
        stuck.mode = "hang"
        known = tmp_path / "known_hosts"
        known.write_text(good.known_hosts_line() + stuck.known_hosts_line())
        key = tmp_path / "id_ecdsa"
        paramiko.ECDSAKey.generate().write_private_key_file(str(key))
        common = {"ssh_hostname": "127.0.0.1", "ssh_user": "root", "ssh_key": str(key),
                  "ssh_known_hosts_file": str(known)}
        inv = tmp_path / "inv.py"
        a = {**common, "ssh_port": good.port}
        b = {**common, "ssh_port": stuck.port, "command_timeout_s": 2}
        inv.write_text(f"gpu = [('good', {a!r}), ('stuck', {b!r})]\n")
        start = time.monotonic()
        out = SshBackend(inv, connect_timeout=5).probe(["good", "stuck"])
        took = time.monotonic() - start
    assert out["stuck"].reachable is False and not out["stuck"].ok
    assert "timed out after 2 s" in (out["stuck"].error or "")
    assert out["good"].ok and out["good"].value is not None, out["good"].error
    assert took < 20, took


def test_a_bad_command_timeout_is_refused(tmp_path: Path) -> None:
    """Refused as bad input when the inventory loads (file:line: field, exit 2), before any
    host is contacted (the inventory's host-data check, issue 28)."""
    with loopback_sshd() as s:
        known = tmp_path / "known_hosts"
        known.write_text(s.known_hosts_line())
        inv = s.inventory(tmp_path / "inv", known_hosts=known,
                          extra={"command_timeout_s": "soon"})
        with pytest.raises(BadInput, match=r"inv\.py:1: command_timeout_s: host 'target': "
                                           r"expected seconds above 0, got 'soon'"):
            SshBackend(inv, connect_timeout=5).probe(["target"])
        assert s.commands == [] and s.passwords == []


def test_fleet_exec_times_out_a_silent_host(server: Server, home: Path, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(server.known_hosts_line())
    inv = server.inventory(tmp_path / "inv", known_hosts=known)
    start = time.monotonic()
    r = _exec(inv, "hang", timeout=1.5)
    assert r.exit_code is None and "timed out after 1.5s" in (r.error or "")  # type: ignore[attr-defined]
    assert time.monotonic() - start < 10


# ---------------------------------------------------------------------------- output caps
def test_a_host_flooding_the_probe_fails_that_host_and_memory_stays_bounded(
        server: Server, home: Path, tmp_path: Path) -> None:
    """64 MiB from one host: the probe stops reading at the fact limit (16 MiB), fails the
    host with a clear finding, and the controller's peak memory grows by far less than what
    the host tried to send (it grew by a multiple of it before)."""
    server.flood_bytes = 64 * MiB
    known = tmp_path / "known_hosts"
    known.write_text(server.known_hosts_line())
    inv = server.inventory(tmp_path / "inv", known_hosts=known)
    server.mode = "flood"
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    res = SshBackend(inv, connect_timeout=5).probe(["target"])["target"]
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert not res.ok and res.value is None
    assert "sent more than 16 MiB of output" in (res.error or "")
    assert after - before < 48, (before, after)


def test_fleet_exec_caps_a_host_output(server: Server, home: Path, tmp_path: Path) -> None:
    server.flood_bytes = 8 * MiB
    known = tmp_path / "known_hosts"
    known.write_text(server.known_hosts_line())
    inv = server.inventory(tmp_path / "inv", known_hosts=known)
    from fleet.remote.session import load_inventory

    h = next(iter(load_inventory(inv)))
    r = run_everywhere([SshTarget.from_host_data(h.name, h.data.dict())], "flood",
                       limit=1 * MiB)[0]
    assert r.exit_code is None and r.stdout == "" and "more than 1 MiB" in (r.error or "")


def test_bundle_collect_fails_a_host_sending_more_than_the_bundle_cap(
        server: Server, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`bundle collect` / `fleet diagnose HOST` read through the same cap (BUNDLE_LIMIT, here
    lowered to 1 MiB): a host printing more fails, nothing it sent is parsed."""
    from fleet.errors import CouldNotComplete
    from fleet.remote import bounded
    from fleet.remote.bundle import collect_host

    monkeypatch.setattr(bounded, "BUNDLE_LIMIT", 1 * MiB)
    server.flood_bytes = 4 * MiB
    server.mode = "flood"
    known = tmp_path / "known_hosts"
    known.write_text(server.known_hosts_line())
    inv = server.inventory(tmp_path / "inv", known_hosts=known)
    with pytest.raises(CouldNotComplete, match="more than 1 MiB"):
        collect_host(inv, "target", seconds=1)
