"""The host probe as a pyinfra fact: shipped inline, run with the host's python3.

Nothing is installed on the host: see `fleet.remote.inline` for how the source travels.
"""

from __future__ import annotations

import json
from typing import Any

from pyinfra.api.facts import FactBase

from fleet.remote.inline import PROBE_SOURCE, inline_python_command

_CURSOR_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789=;:-_.+/,")


def probe_command(since: str | None = None, frameworks: bool = True) -> str:
    args: list[str] = []
    if since:
        if not set(since) <= _CURSOR_OK:
            raise ValueError(f"refusing kernel-log cursor {since!r}")
        args += ["--since", since]
    if not frameworks:
        args.append("--no-frameworks")
    return inline_python_command(PROBE_SOURCE, args)


def parse_probe_output(lines: list[str]) -> dict[str, Any]:
    text = "\n".join(lines).strip()
    start = text.find("{")
    if start < 0:
        raise ValueError("the probe printed no JSON document")
    doc = json.loads(text[start:])
    if not isinstance(doc, dict):
        raise ValueError("the probe output is not a JSON object")
    return doc


class HostProbe(FactBase[dict[str, Any]]):
    """Host facts as `fleet/probe/hostprobe.py` reports them."""

    def requires_command(self, since: str | None = None, frameworks: bool = True) -> str:
        return "python3"

    def command(self, since: str | None = None, frameworks: bool = True) -> str:
        return probe_command(since, frameworks)

    @staticmethod
    def default() -> dict[str, Any]:
        return {}

    def process(self, output: list[str]) -> dict[str, Any]:
        return parse_probe_output(output)
