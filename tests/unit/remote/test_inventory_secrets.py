"""An inventory error never prints a secret (issue 32, finding 11): a host listed twice with
different data names the keys that differ, and masks the values of passwords, passphrases,
tokens and keys, on stderr and in the `--json` error document."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleet.cli.app import run
from fleet.domain.secrets import is_secret_key, masked, scrub
from fleet.errors import BadInput
from fleet.remote.inventory import load_inventory_file

TWICE = (
    "a = [('gpu-01', {'ssh_password': 'hunter2-old', 'ssh_key_password': 'pp-old',\n"
    "                 'pool': 'h100', 'extra': {'api_token': 'tok-old-123'}})]\n"
    "b = [('gpu-01', {'ssh_password': 'hunter2-new', 'ssh_key_password': 'pp-new',\n"
    "                 'pool': 'a100', 'extra': {'api_token': 'tok-new-456'}})]\n"
)
SECRETS = ("hunter2-old", "hunter2-new", "pp-old", "pp-new", "tok-old-123", "tok-new-456")


def test_conflicting_data_names_the_keys_and_masks_the_secrets(tmp_path: Path) -> None:
    inv = tmp_path / "inv.py"
    inv.write_text(TWICE)
    with pytest.raises(BadInput) as e:
        load_inventory_file(inv)
    [problem] = e.value.problems
    text = str(problem)
    assert "ssh_password *** vs ***" in text and "ssh_key_password *** vs ***" in text
    assert "pool 'h100' vs 'a100'" in text  # what is not secret still says what differs
    assert "extra {'api_token': '***'} vs {'api_token': '***'}" in text
    assert not [s for s in SECRETS if s in text]


def test_the_cli_error_and_its_json_document_hold_no_secret(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = tmp_path / "inv.py"
    inv.write_text(TWICE)
    with pytest.raises(SystemExit) as info:
        run(["exec", "-i", str(inv), "--json", "--", "true"])
    out, err = capsys.readouterr()
    assert info.value.code == 2
    doc = json.loads(out)
    assert "ssh_password" in json.dumps(doc) and "ssh_password" in err
    assert not [s for s in SECRETS if s in out or s in err]


def test_a_secret_value_quoted_in_another_message_is_masked(tmp_path: Path) -> None:
    # a bad pool name whose text is also the host's password: printed as the mask
    inv = tmp_path / "inv.py"
    inv.write_text("h100 = [('gpu-01', {'ssh_password': 'bad pool!', 'pool': 'bad pool!'})]\n")
    with pytest.raises(BadInput) as e:
        load_inventory_file(inv)
    assert "bad pool!" not in " ".join(str(p) for p in e.value.problems)


@pytest.mark.parametrize(("key", "secret"), [
    ("ssh_password", True), ("ssh_key_password", True), ("ssh_key", True),
    ("vault_token", True), ("client_secret", True), ("private_key", True), ("api_key", True),
    ("passphrase", True), ("pool", False), ("ssh_user", False), ("gpu_model", False),
    ("ssh_strict_host_key_checking", False), ("ssh_known_hosts_file", False),
])
def test_secret_keys(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


def test_masked_and_scrub() -> None:
    assert masked({"a": [{"password": "x"}], "b": 1}) == {"a": [{"password": "***"}], "b": 1}
    assert scrub("user alice password alice-pw!", ["alice-pw!", "ab"]) == "user alice password ***"
