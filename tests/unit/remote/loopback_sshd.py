"""A small paramiko SSH server on 127.0.0.1 for the remote tests: its own host key, any client
key or password accepted (the server's identity is what these tests are about), and a behaviour
per command:

- `mode` "hang", or `hang` in the command: accepted, never answered (no output, no exit
  status);
- `mode` "flood", or `flood` in the command: `flood_bytes` of 1 KiB lines, then exit 0;
- otherwise: `reply` on stdout (default: a minimal probe document), exit 0.

Passwords it receives are kept in `passwords`: a test can show one never reached an impostor.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paramiko

PROBE_DOC = {"schema": 1, "source": "none"}


@dataclass
class Server:
    port: int
    key: paramiko.PKey
    reply: bytes = (json.dumps(PROBE_DOC) + "\n").encode()
    flood_bytes: int = 0
    mode: str = "ok"
    passwords: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)

    def known_hosts_line(self, key: paramiko.PKey | None = None) -> str:
        k = key or self.key
        return f"[127.0.0.1]:{self.port} {k.get_name()} {k.get_base64()}\n"

    def inventory(self, folder: Path, name: str = "target", extra: dict[str, Any] | None = None,
                  known_hosts: Path | None = None) -> Path:
        """A one-host inventory file for this server, with a client key and known_hosts."""
        folder.mkdir(parents=True, exist_ok=True)
        client_key = folder / "id_ecdsa"
        if not client_key.exists():
            paramiko.ECDSAKey.generate().write_private_key_file(str(client_key))
        data: dict[str, Any] = {"ssh_hostname": "127.0.0.1", "ssh_port": self.port,
                                "ssh_user": "root", "ssh_key": str(client_key),
                                **({"ssh_known_hosts_file": str(known_hosts)}
                                   if known_hosts else {}), **(extra or {})}
        inv = folder / "inv.py"
        inv.write_text(f"gpu = [({name!r}, {data!r})]\n")
        return inv


class _Handler(paramiko.ServerInterface):
    def __init__(self, server: Server) -> None:
        self.server = server

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.OPEN_SUCCEEDED

    def get_allowed_auths(self, username: str) -> str:
        return "publickey,password"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        return paramiko.AUTH_SUCCESSFUL

    def check_auth_password(self, username: str, password: str) -> int:
        self.server.passwords.append(password)
        return paramiko.AUTH_SUCCESSFUL

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        self.server.commands.append(command.decode(errors="replace"))
        threading.Thread(target=self._serve, args=(channel, command), daemon=True).start()
        return True

    def _serve(self, ch: paramiko.Channel, command: bytes) -> None:
        time.sleep(0.1)  # the exec request's success reply goes out first
        with suppress(Exception):
            if b"hang" in command or self.server.mode == "hang":
                threading.Event().wait(600)
                return
            if b"flood" in command or self.server.mode == "flood":
                block = (b"x" * 1023 + b"\n") * 1024
                sent = 0
                while sent < self.server.flood_bytes:
                    ch.sendall(block)
                    sent += len(block)
            else:
                ch.sendall(self.server.reply)
            ch.send_exit_status(0)
            ch.close()


@contextmanager
def loopback_sshd(key: paramiko.PKey | None = None) -> Iterator[Server]:
    """A server on 127.0.0.1 (an ephemeral port) for the block's duration."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    server = Server(sock.getsockname()[1], key or paramiko.ECDSAKey.generate())
    stop = threading.Event()
    transports: list[paramiko.Transport] = []

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            t = paramiko.Transport(conn)
            t.add_server_key(server.key)
            transports.append(t)
            with suppress(Exception):
                t.start_server(server=_Handler(server))

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        stop.set()
        sock.close()
        for t in transports:
            with suppress(Exception):
                t.close()
