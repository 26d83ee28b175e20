"""The reboot's wait for a new boot, against a host double that shuts down slowly.

The double plays what the clean-clone CI met: after the reboot command, the host keeps answering
on its old boot for a while, then drops the connection in the middle of a read, refuses
connections while it is down, and comes back on a new boot id. pyinfra's own `server.reboot`
stays on the first connection and fails the host there; the wait here must ride it out, and must
never count the old boot, or a host that never went down, as rebooted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from pyinfra.api.exceptions import OperationError

from fleet.remote.reboot_wait import BOOT_ID, read_boot_id, wait_for_new_boot

OLD = "0b6f5e3c-1d2a-4b8e-9f00-aaaaaaaaaaaa"
NEW = "7c1d9a42-5e6f-4a0b-8c9d-bbbbbbbbbbbb"


@dataclass
class Output:
    stdout_lines: list[str]


@dataclass
class SlowHost:
    """Per poll, one of: "old" (up on the old boot), "cut" (connects, the read dies),
    "down" (refuses), "new" (up on the new boot), "junk" (answers something not a boot id)."""

    script: list[str]
    connected: bool = False
    polls: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)

    def _now(self) -> str:
        return self.script[min(len(self.polls) - 1, len(self.script) - 1)]

    def connect(self, reason: str | None = None, show_errors: bool = True,
                raise_exceptions: bool = False) -> None:
        self.polls.append(self.script[min(len(self.polls), len(self.script) - 1)])
        self.connected = self._now() != "down"

    def disconnect(self) -> None:
        if self.polls and self._now() == "cut":
            raise OSError("Socket is closed")  # closing a dead channel may fail too
        self.connected = False

    def run_shell_command(self, command: Any, **_: Any) -> tuple[bool, Output]:
        self.commands.append(str(command))
        state = self._now()
        if state == "cut":
            raise EOFError("connection dropped mid-read")
        if state == "junk":
            return True, Output(["cat: /proc/sys/kernel/random/boot_id: No such file"])
        return True, Output([OLD if state == "old" else NEW])


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def sleep(self, s: float) -> None:
        self.t += s

    def __call__(self) -> float:
        return self.t


def wait(host: SlowHost, timeout: float = 30) -> int:
    clock = Clock()
    return wait_for_new_boot(host, OLD, delay=2, interval=1, timeout=timeout,
                             sleep=clock.sleep, clock=clock)


def test_a_host_slow_to_go_down_is_waited_for_through_a_dropped_read() -> None:
    host = SlowHost(["old", "old", "cut", "down", "down", "new"])
    assert wait(host) == 6
    assert all(BOOT_ID in c for c in host.commands)


def test_every_poll_opens_a_fresh_connection() -> None:
    """Staying on the first connection that answers is what left pyinfra reading a dying
    host; the old boot's connection is closed before each poll."""
    host = SlowHost(["old", "old", "new"])
    host.connected = True  # the connection the reboot command went over
    assert wait(host) == 3
    assert host.polls == ["old", "old", "new"]


def test_the_old_boot_never_counts_as_rebooted() -> None:
    host = SlowHost(["old"])
    with pytest.raises(OperationError, match=f"still the boot before; boot id before: {OLD}"):
        wait(host, timeout=10)


def test_a_host_that_stays_down_times_out_naming_it() -> None:
    host = SlowHost(["old", "down"])
    with pytest.raises(OperationError, match="did not come back on a new boot within 10 s "
                                             r"\(no answer"):
        wait(host, timeout=10)
    assert 9 <= len(host.polls) <= 12  # one poll a second over the 10 s


def test_an_answer_that_is_not_a_boot_id_is_not_a_new_boot() -> None:
    host = SlowHost(["junk"])
    with pytest.raises(OperationError):
        wait(host, timeout=5)
    assert read_boot_id(SlowHost(["junk"], polls=["junk"])) is None
    assert read_boot_id(SlowHost(["cut"], polls=["cut"])) is None
    assert read_boot_id(SlowHost(["new"], polls=["new"])) == NEW
