"""The one command-runner seam every scheduler adapter goes through.

A runner takes an argv list and a timeout and returns (returncode, stdout, stderr). The default
runs the command with `subprocess` and never through a shell; tests pass a fake runner, or the
default runner with fake `scontrol`/`squeue`/`kubectl` executables first on PATH.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping, Sequence

from fleet.domain.names import NODE_NAME_RE as NODE_NAME_RE  # the one grammar, re-exported
from fleet.domain.names import name_problem

Runner = Callable[[list[str], float | None], tuple[int, str, str]]
"""run(argv, timeout_s) -> (returncode, stdout, stderr); 124 means the timeout expired."""

TIMEOUT_RC = 124
NOT_FOUND_RC = 127


def subprocess_runner(env: Mapping[str, str] | None = None) -> Runner:
    """A runner over `subprocess.run` (argv list, no shell), optionally with an environment."""

    def run(argv: list[str], timeout: float | None) -> tuple[int, str, str]:
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                               env=dict(env) if env is not None else None, check=False)
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            return TIMEOUT_RC, out, f"timed out after {timeout:g} s: {' '.join(argv)}"
        except FileNotFoundError:
            return NOT_FOUND_RC, "", f"{argv[0]}: command not found"
        except PermissionError as exc:
            return 126, "", f"{argv[0]}: {exc}"
        return p.returncode, p.stdout, p.stderr

    return run


run_command: Runner = subprocess_runner()
"""The default runner."""


def check_node_name(name: str) -> str:
    """`name` when it is a node name as Slurm and Kubernetes accept it (fleet.domain.names);
    anything else never reaches a command."""
    problem = name_problem("node", name)
    if problem is not None:
        raise ValueError(f"refusing {problem}")
    return name


def one_line(text: str, limit: int = 200) -> str:
    """A reason or error squeezed onto one line (Slurm reasons and annotations are one line)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def tail(text: str, lines: int = 3) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:] if line.strip())


def describe(argv: Sequence[str]) -> str:
    return " ".join(argv[:3])
