"""The pin files are staged in a private folder on the host, never at pyinfra's predictable
`/tmp/pyinfra-<sha1(dest)>` (issue 32, finding 4): under sudo, pyinfra's `files.put` uploads
as the login user to that name, the same on every host and run, which any local user can
pre-create (every apply fails) or own (and swap the apt configuration before root copies it).
"""

from __future__ import annotations

import glob
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.operation import add_op
from pyinfra.api.operations import run_ops
from pyinfra.api.state import StateStage
from pyinfra.connectors.fake import FakeConnector
from pyinfra.connectors.util import make_unix_command

from fleet.domain.kernel_hold import KERNEL_HOLD_PATH
from fleet.domain.pinning import PREFERENCES_PATH, UNATTENDED_PATH
from fleet.remote.operations import pin_release, write_file_command
from tests.unit.remote.test_pin_operation import R570

BRANCH_SWITCH = {
    "os-release": ["ubuntu debian"],
    "dpkg-query": ["nvidia-driver-550\t550.54.15-1\tii ", "cuda-toolkit-12-4\t12.4.1-1\tii "],
    "apt-mark showhold": ["nvidia-driver-550"],
    "for f in": [f"{KERNEL_HOLD_PATH} -"],  # no kernel hold record
}


def test_a_sudo_pin_uploads_nothing_and_writes_through_a_private_folder(
        monkeypatch: pytest.MonkeyPatch) -> None:
    uploads: list[tuple[str, str | None]] = []

    def put_file(self: Any, src: Any, remote: str, remote_temp_filename: str | None = None,
                 *a: Any, **k: Any) -> bool:
        uploads.append((remote, remote_temp_filename))
        return True

    monkeypatch.setattr(FakeConnector, "put_file", put_file)
    data = {"fake_delay": 0, "fake_delay_jitter": 0, "fake_responses": BRANCH_SWITCH}
    inventory = Inventory(([("@fake/gpu-01", data)], {}))
    state = State(inventory, Config())
    state.set_stage(StateStage.Connect)
    connect_all(state)
    state.set_stage(StateStage.Prepare)
    add_op(state, pin_release, release="r570", packages=R570, _sudo=True)
    state.set_stage(StateStage.Execute)
    run_ops(state)
    commands = [str(c) for c in inventory.get_host("@fake/gpu-01").connector.executed_commands]
    assert uploads == []  # nothing goes over SFTP as the login user
    assert not [c for c in commands if "/tmp/pyinfra-" in c]
    for dest in (PREFERENCES_PATH, UNATTENDED_PATH):
        [write] = [c for c in commands if f"install -m 644 \"$d/f\" {dest}" in c]
        assert write.startswith("d=$(mktemp -d /tmp/fleet-pin.XXXXXXXXXX) && ")
        # the connector runs it as one command: all of it as root under sudo
        wrapped = make_unix_command(write, _sudo=True).get_raw_value()
        assert wrapped.startswith("sudo -H -n sh -c '")


CONTENT = ("Package: nvidia-*\nPin: version 570.124.06-*\nPin-Priority: 1001\n"
           "// it's 100% \\literal\\ $(id) `id` \"quoted\"\n\n")


def staging_folders() -> set[str]:
    return set(glob.glob("/tmp/fleet-pin.*"))


def as_the_connector_runs_it(command: str) -> str:
    """`sh -c '...'`, quoted as pyinfra's connectors wrap a command (without the sudo)."""
    return str(make_unix_command(command).get_raw_value())


def test_the_command_writes_exactly_the_content_and_leaves_no_staging_folder(
        tmp_path: Path) -> None:
    before = staging_folders()
    dest = tmp_path / "preferences.d" / "fleet-nvidia"  # its folder made too
    subprocess.run(["sh", "-c", as_the_connector_runs_it(write_file_command(str(dest), CONTENT))],
                   check=True, timeout=30)
    assert dest.read_text() == CONTENT
    assert stat.S_IMODE(dest.stat().st_mode) == 0o644
    assert stat.S_IMODE(dest.parent.stat().st_mode) == 0o755
    assert staging_folders() == before
    # again, over the file it wrote: the same bytes (a deploy's second run rewrites nothing,
    # the planner sees the content equal; this is the write itself)
    subprocess.run(["sh", "-c", write_file_command(str(dest), CONTENT + "x")], check=True,
                   timeout=30)
    assert dest.read_text() == CONTENT + "x"


def test_a_failed_write_fails_the_command_and_still_cleans_up(tmp_path: Path) -> None:
    before = staging_folders()
    blocker = tmp_path / "file"
    blocker.write_text("")
    cp = subprocess.run(["sh", "-c", write_file_command(str(blocker / "x"), CONTENT)],
                        capture_output=True, timeout=30, check=False)
    assert cp.returncode != 0
    assert staging_folders() == before


def test_the_staging_folder_is_private(tmp_path: Path) -> None:
    probe = write_file_command(str(tmp_path / "f"), "x").replace(
        "install -m 644", "stat -c %a \"$d\" > " + str(tmp_path / "mode") + " && install -m 644")
    subprocess.run(["sh", "-c", probe], check=True, timeout=30)
    assert (tmp_path / "mode").read_text().strip() == "700"
    assert os.path.exists(tmp_path / "f")


@pytest.mark.parametrize(("path", "mode"), [("relative/x", "644"), ("/etc/x", "a+r")])
def test_refuses_a_relative_path_or_a_symbolic_mode(path: str, mode: str) -> None:
    with pytest.raises(ValueError):
        write_file_command(path, "x", mode)
