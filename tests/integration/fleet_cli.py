"""`fleet` as an operator runs it in the lab tests: a process of its own, `--json`, the exit code
and the document. One copy for every lab module that drives the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def fleet(env: dict[str, str], *args: str, timeout: float = 300) -> tuple[int, dict[str, Any]]:
    """`python -m fleet ARGS --json` in the repository root: (exit code, JSON document). No
    traceback may reach stderr, and a run that prints no JSON fails with what it did print."""
    r = subprocess.run([sys.executable, "-m", "fleet", *args, "--json"], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in r.stderr, r.stderr
    try:
        return r.returncode, json.loads(r.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"exit {r.returncode}, no JSON: {r.stdout}\n{r.stderr}") from None
