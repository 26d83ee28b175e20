"""Reboot a host and wait until it is back on a new boot, as a pyinfra operation.

pyinfra's own `server.reboot` sleeps a fixed delay, then stays on the first connection that
answers and compares uptimes over it. A host still shutting down after that delay (a real server
whose services take their time to stop, a lab host on a loaded machine) drops that connection in
the middle of a fact read, and the operation fails with no message: the clean-clone CI and the
Slurm lab tests saw `reboot: operation failed` this way. Here the sign of a new boot is the
kernel's boot id changing, every poll opens a fresh connection, and a refused connection or a
read cut short while the host is down or going down is one more poll, until `reboot_timeout`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Generator
from contextlib import suppress
from typing import Any, Protocol

from pyinfra.api.command import FunctionCommand, StringCommand
from pyinfra.api.exceptions import OperationError
from pyinfra.api.operation import operation
from pyinfra.connectors.util import clear_askpass_cache, remove_any_sudo_askpass_file

BOOT_ID = "/proc/sys/kernel/random/boot_id"
_BOOT_ID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# detached, so the SSH channel closes at once instead of waiting on a process the reboot kills
REBOOT = "( sleep 1 && reboot ) </dev/null >/dev/null 2>&1 &"


class Host(Protocol):
    """What the wait needs of a pyinfra `Host` (tests pass a double)."""

    connected: bool

    def connect(self, reason: str | None = ..., show_errors: bool = ...,
                raise_exceptions: bool = ...) -> None: ...

    def disconnect(self) -> None: ...

    def run_shell_command(self, *args: Any, **kwargs: Any) -> tuple[bool, Any]: ...


def read_boot_id(host: Host) -> str | None:
    """The host's boot id, or None when it cannot be read now (down, going down, refused)."""
    try:
        ok, out = host.run_shell_command(StringCommand("cat", BOOT_ID))
    except Exception:  # noqa: BLE001 - a connection cut mid-read: not readable now
        return None
    lines = list(getattr(out, "stdout_lines", []) or []) if ok else []
    value = lines[0].strip() if lines else ""
    return value if _BOOT_ID_RE.fullmatch(value) else None


def _drop(host: Host) -> None:
    with suppress(Exception):  # a dead connection may fail to close: it is gone either way
        host.disconnect()
    host.connected = False


def wait_for_new_boot(host: Host, before: str, *, delay: float, interval: float,
                      timeout: float, sleep: Callable[[float], None] = time.sleep,
                      clock: Callable[[], float] = time.monotonic) -> int:
    """Poll until the host answers with a boot id other than `before`; the number of polls.
    Raises `OperationError` after `timeout` seconds (counted after `delay`)."""
    sleep(delay)
    deadline = clock() + timeout
    polls = 0
    while True:
        polls += 1
        _drop(host)  # a fresh connection per poll: the one before may belong to the old boot
        with suppress(Exception):
            host.connect(show_errors=False)
        now = read_boot_id(host) if host.connected else None
        if now is not None and now != before:
            return polls
        if clock() >= deadline:
            seen = "still the boot before" if now == before else "no answer"
            raise OperationError(f"the host did not come back on a new boot within "
                                 f"{timeout:g} s ({seen}; boot id before: {before})")
        sleep(interval)


@operation(is_idempotent=False)
def reboot(delay: int = 2, interval: int = 1,
           reboot_timeout: int = 300) -> Generator[Any, None, None]:
    """
    Reboot the host and wait until it answers on a new boot id.

    + delay: seconds before the first reconnect
    + interval: seconds between reconnects
    + reboot_timeout: seconds after ``delay`` before giving up
    """
    before: list[str] = []

    def capture_boot_id(state: Any, host: Any) -> None:
        remove_any_sudo_askpass_file(host)  # the reboot would leave it behind on disk
        boot_id = read_boot_id(host)
        if boot_id is None:
            raise OperationError(f"cannot read {BOOT_ID} before rebooting: not rebooted")
        before.append(boot_id)

    def wait(state: Any, host: Any) -> None:
        clear_askpass_cache(host)  # the files were on the boot that is going away
        wait_for_new_boot(host, before[0], delay=delay, interval=interval,
                          timeout=reboot_timeout)
        clear_askpass_cache(host)

    yield FunctionCommand(capture_boot_id, (), {})
    yield StringCommand(REBOOT)
    yield FunctionCommand(wait, (), {})
