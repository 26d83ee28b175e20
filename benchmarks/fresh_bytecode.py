"""Compile fleet's modules before timing fresh `fleet` processes.

An installed fleet has its bytecode: pip writes it at install, and an editable checkout writes it
on first import. Where PYTHONDONTWRITEBYTECODE is set (it is on these CI machines), every module
changed since its .pyc was written is compiled again by every process: ~0.1 s of a `fleet probe`
after an edit, which is not what a user's command costs. Compiling first measures the command as
it runs for a user; the compile is reported, not hidden.
"""

from __future__ import annotations

import compileall
import time
from pathlib import Path


def ensure_bytecode(package: Path) -> None:
    t = time.monotonic()
    compileall.compile_dir(str(package), quiet=1)
    print(f"bytecode of {package.name}/ up to date ({time.monotonic() - t:.1f} s)", flush=True)
