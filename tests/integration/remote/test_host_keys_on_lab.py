"""A re-imaged lab host (a new SSH host key) is refused by every command until it is trusted
(issue 32): probe, apply --dry, exec and bundle collect each refuse it, naming the host and
`fleet hosts trust`; trusting it without --replace is refused too; with --replace and the
fingerprint read from the host's own key file it is accepted, recorded, and probed again.

Host h1's key is put back at the end (the old key files, a reboot, the lab's known_hosts as it
was). Run as root under `flock /tmp/fleet-lab.lock` (one lab at a time)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import paramiko
import pytest

from fleet.domain.matrix.loader import load_matrix
from fleet.remote.hostkeys import fingerprint

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[3]
MATRIX = ROOT / "matrices" / "example.yaml"
INVENTORY = str(ROOT / "inventories" / "lab.py")
HOST = "h1"


def fleet(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, "-m", "fleet", *args], env=env, capture_output=True,
                       text=True, timeout=300, cwd=ROOT)
    assert "Traceback" not in r.stderr, r.stderr
    return r


def test_a_reimaged_host_is_refused_until_trusted(lab_paths, lab_state,  # noqa: ANN001
                                                   tmp_path: Path) -> None:
    from fleet.lab import lab

    key = lab_paths.host_dir(HOST) / "root" / "etc/ssh/ssh_host_ed25519_key"
    pub = key.with_name(key.name + ".pub")
    saved = {p: p.read_bytes() for p in (key, pub)}
    known_before = lab_paths.known_hosts.read_text()
    env = {**os.environ, "FLEET_LAB_DIR": str(lab_paths.run),
           "FLEET_DB": str(tmp_path / "fleet.db"), "COLUMNS": "200"}
    golden = load_matrix(MATRIX).matrix.golden_name("h100-canary")
    try:
        key.unlink()
        pub.unlink()
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                       check=True)
        lab.reboot(lab_paths, HOST)  # the re-image: sshd comes back with the new key
        new = paramiko.Ed25519Key(data=base64.b64decode(pub.read_text().split()[1]))
        for args in (["probe", "-i", INVENTORY, "-l", HOST],
                     ["apply", "-m", str(MATRIX), "-i", INVENTORY, "-r", golden, "-l", HOST,
                      "--dry"],
                     ["exec", "-i", INVENTORY, "-l", HOST, "--", "true"],
                     ["bundle", "collect", HOST, "-i", INVENTORY, "-o", str(tmp_path / "b"),
                      "--seconds", "1"]):
            r = fleet(env, *args)
            said = r.stdout + r.stderr
            assert r.returncode == 3, (args, r.returncode, said)
            assert "host key changed" in said and f"refusing {HOST}" in said, (args, said)
            assert "fleet hosts trust" in said, (args, said)
        r = fleet(env, "hosts", "trust", "-i", INVENTORY, HOST, "--json")
        assert r.returncode == 3 and "--replace" in r.stderr, r.stderr
        r = fleet(env, "hosts", "trust", "-i", INVENTORY, HOST, "--replace",
                  "--fingerprint", fingerprint(new), "--json")
        assert r.returncode == 0, r.stderr
        [doc] = json.loads(r.stdout)["hosts"]
        assert doc["action"] == "replaced" and doc["known_hosts"] == str(lab_paths.known_hosts)
        r = fleet(env, "probe", "-i", INVENTORY, "-l", HOST, "--json")
        assert r.returncode in (0, 1), r.stderr  # reached (1: a finding on the host)
        events = json.loads(fleet(env, "history", "events", "--kind", "hosts.trust",
                                  "--json").stdout)
        [event] = events["events"]
        assert event["subject"] == HOST and fingerprint(new) in event["message"]
    finally:
        for p, data in saved.items():
            p.write_bytes(data)
        key.chmod(0o600)
        lab_paths.known_hosts.write_text(known_before)
        lab.reboot(lab_paths, HOST)
