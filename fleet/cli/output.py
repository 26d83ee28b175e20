"""Where output goes: machine JSON on stdout, human text (rich) on stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from datetime import date, datetime
from enum import Enum
from pathlib import Path
from typing import Any

from rich.console import Console

from fleet.errors import Problem

console = Console(stderr=True, highlight=False)
"""Human-facing output. stdout is reserved for `--json` and plain results."""

stdout = Console(highlight=False, soft_wrap=True)


def _default(obj: Any) -> Any:
    if isinstance(obj, datetime | date):
        return obj.isoformat()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, set | frozenset):
        return sorted(obj)
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if hasattr(obj, "as_dict"):
        return obj.as_dict()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def emit_json(obj: Any) -> None:
    """Print one JSON document on stdout, keys sorted so output is stable across runs."""
    sys.stdout.write(json.dumps(obj, default=_default, sort_keys=True, indent=2) + "\n")
    sys.stdout.flush()


def print_problems(problems: Iterable[Problem]) -> None:
    for p in problems:
        style = "red" if p.severity == "error" else "yellow"
        label = "error" if p.severity == "error" else "warning"
        console.print(f"[{style}]{label}[/{style}]: {p}", markup=True, soft_wrap=True)
