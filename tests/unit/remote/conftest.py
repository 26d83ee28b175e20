"""Fixtures of the SSH tests against a paramiko server on loopback (`loopback_sshd`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback_sshd import Server, loopback_sshd


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scratch HOME with an empty ~/.ssh: no known_hosts or config of the machine's leaks in."""
    h = tmp_path / "home"
    (h / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(h))
    return h


@pytest.fixture
def server() -> Iterator[Server]:
    with loopback_sshd() as s:
        yield s
