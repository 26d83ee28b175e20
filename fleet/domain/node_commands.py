"""The commands fleet may run on a host to put its node state right, checked before they leave
the controller. Pure.

Only what `fleet.domain.node_plan` plans goes this way: argv lists (never a shell string) whose
program is one of the GPU tools below and whose every argument is a plain token (letters,
digits and `. , _ : / + = -`, no space, no quote, no `$`, no glob). Values that come from the
matrix (power limits, clocks, MIG profile names, the mig-parted config name) pass through here
before any backend sees them; the SSH backend then quotes each argument as well.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

TOOLS = frozenset({"nvidia-smi", "nvidia-mig-parted"})
"""Programs a node-state command may run (looked up on the host's PATH)."""

_ARG = re.compile(r"^[A-Za-z0-9.,_:/+=-]{1,128}$")
MAX_ARGS = 16


class UnsafeCommand(ValueError):
    """A planned command that is not an allowed tool with plain arguments."""


def check_argv(argv: Sequence[str]) -> tuple[str, ...]:
    """`argv` as a tuple when it is safe to send; UnsafeCommand naming what is wrong."""
    if not argv or not isinstance(argv, (tuple, list)):
        raise UnsafeCommand(f"not an argument list: {argv!r}")
    if argv[0] not in TOOLS:
        raise UnsafeCommand(f"{argv[0]!r} is not a node-state tool ({', '.join(sorted(TOOLS))})")
    if len(argv) > MAX_ARGS:
        raise UnsafeCommand(f"{len(argv)} arguments (at most {MAX_ARGS})")
    for arg in argv[1:]:
        if not isinstance(arg, str) or not _ARG.fullmatch(arg):
            raise UnsafeCommand(f"argument {arg!r} of {argv[0]} is not a plain token "
                                "(letters, digits, . , _ : / + = -)")
    return tuple(argv)


def shell_line(argv: Sequence[str]) -> str:
    """The command line a shell on the host runs: checked, then each argument quoted."""
    return " ".join(shlex.quote(a) for a in check_argv(argv))


def show(argv: Sequence[str]) -> str:
    """How a planned command reads in a report (the same text as `shell_line` for a safe one)."""
    try:
        return shell_line(argv)
    except UnsafeCommand:
        return " ".join(shlex.quote(str(a)) for a in argv) + "  (refused: unsafe)"
