"""One command on a host over an open SSH transport, bounded in time and in size.

A host is untrusted input: a wedged NVML call, a hung sshd or a compromised host must not stall
the controller, and whatever it prints must not grow the controller's memory without end. Every
read of a host's output that fleet does itself goes through `run_bounded`: the probe and the
other facts (`session.gather`), `fleet exec` and support bundles (`ssh_exec`).

What stays in memory per host is at most `limit` bytes plus one read (64 KiB) and paramiko's
channel window (2 MiB by default): the host cannot send past the window until it is read, and
reading stops at the limit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

MiB = 1024 * 1024

FACT_LIMIT = 16 * MiB
"""Most a host may send for one fact (the probe's JSON is tens of KB; a kernel log full of Xid
lines a few MB)."""
EXEC_LIMIT = 16 * MiB
"""Most a host may send for one `fleet exec` command (stdout and stderr together)."""
BUNDLE_LIMIT = 128 * MiB
"""Most a host may send for one support bundle (every capture together)."""
COMMAND_TIMEOUT_S = 120.0
"""Default deadline of one fact command (the probe takes about a second on a healthy host);
host data `command_timeout_s` sets another for a host or a group."""

_READ = 64 * 1024
_SLICE_S = 0.1  # how long one wait for stdout may block before stderr and the clock are checked


class HostTimedOut(Exception):
    """The host accepted the command and did not finish it within the deadline."""


class OutputTooLarge(Exception):
    """The host sent more than the limit; the command was cut off."""


@dataclass(frozen=True)
class Output:
    exit_code: int
    stdout: bytes
    stderr: bytes


def describe_limit(limit: int) -> str:
    return f"{limit // MiB} MiB" if limit % MiB == 0 else f"{limit} bytes"


def run_bounded(transport: Any, command: str, *, timeout: float, limit: int) -> Output:
    """Run `command` in a new session channel of `transport` (a paramiko Transport).

    HostTimedOut when it has not exited within `timeout` seconds of being sent (no output,
    output that never ends, or no exit status); OutputTooLarge as soon as stdout and stderr
    together pass `limit` bytes. Either way the channel is closed, so the host's command gets
    SIGPIPE or a hang-up; nothing waits on it.
    """
    deadline = time.monotonic() + timeout
    chan = transport.open_session(timeout=max(1.0, min(timeout, 30.0)))
    out, err = bytearray(), bytearray()

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise HostTimedOut(f"timed out after {timeout:g} s (the command was accepted and "
                               "never finished)")
        return remaining

    def keep(buf: bytearray, data: bytes) -> None:
        buf += data
        if len(out) + len(err) > limit:
            raise OutputTooLarge(f"sent more than {describe_limit(limit)} of output; cut off")

    try:
        chan.exec_command(command)
        chan.shutdown_write()
        stdout_open = True
        while stdout_open:
            chan.settimeout(min(left(), _SLICE_S))
            try:
                data = chan.recv(_READ)
            except TimeoutError:  # socket.timeout, which paramiko raises, is this one
                data = None
            if data == b"":
                stdout_open = False
            elif data:
                keep(out, data)
            while chan.recv_stderr_ready():
                keep(err, chan.recv_stderr(_READ))
        while True:  # stdout is closed; stderr may still hold the rest
            chan.settimeout(min(left(), _SLICE_S))
            try:
                data = chan.recv_stderr(_READ)
            except TimeoutError:
                continue
            if not data:
                break
            keep(err, data)
        while not chan.status_event.wait(min(left(), _SLICE_S)):
            pass
        return Output(chan.recv_exit_status(), bytes(out), bytes(err))
    finally:
        chan.close()
