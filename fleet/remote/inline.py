"""Ship a self-contained Python script to a host inside its command line.

The source travels compressed and base64-encoded as the argument of `python3 -c` (the probe is
about 19 KB that way, far below the kernel's 128 KB per-argument limit); stdin is not used because
feeding `python3 -` over some SSH stacks closed the channel early (see the lab spike). Nothing is
installed on the host. Used for the probe, the synthetic benchmark runner and the replay client.
"""

from __future__ import annotations

import base64
import shlex
import zlib
from collections.abc import Sequence
from functools import cache
from pathlib import Path

MAX_ARG_BYTES = 120 * 1024  # Linux MAX_ARG_STRLEN is 128 KiB per argument
PROBE_SOURCE = Path(__file__).resolve().parent.parent / "probe" / "hostprobe.py"
"""The host probe, shipped whole (the probe fact, the Slurm probe, the support bundle)."""


@cache
def _payload(path: Path, mtime_ns: int) -> str:
    return base64.b64encode(zlib.compress(path.read_bytes(), 9)).decode()


def inline_python_command(path: str | Path, args: Sequence[str] = (),
                          python: str = "python3") -> str:
    """A shell command running the script at `path` on the host with `args`, every word quoted.

    `sys.argv[0]` on the host is `-c`; scripts parse `sys.argv[1:]` as usual.
    """
    p = Path(path).resolve()
    payload = _payload(p, p.stat().st_mtime_ns)
    loader = (
        "import base64,zlib;"
        f"exec(compile(zlib.decompress(base64.b64decode('{payload}')),{p.name!r},'exec'))"
    )
    if len(loader) > MAX_ARG_BYTES:
        raise ValueError(f"{p.name} is too large to ship inline ({len(loader)} bytes)")
    return " ".join(shlex.quote(a) for a in [python, "-c", loader, *args])
