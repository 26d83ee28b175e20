"""Change a running lab's Slurm HealthCheckInterval.

The session lab of the integration tests checks health every 30 s (`fleet node-check` in every
host costs CPU the rollout tests' benchmark gates feel on a 2-core machine); the tests that wait
on a health check set a few seconds for their module and put the 30 s back after, instead of
waiting three 30 s intervals.
"""

from __future__ import annotations

import re
from pathlib import Path

from fleet.errors import CouldNotComplete
from fleet.lab.sysutil import atomic_write, run

_LINE = re.compile(r"^HealthCheckInterval=(\d+)$", re.M)


def with_health_interval(conf_text: str, seconds: int) -> str:
    """slurm.conf text with HealthCheckInterval set to `seconds` (the rest unchanged)."""
    if seconds < 1:
        raise ValueError(f"HealthCheckInterval must be at least 1 s, not {seconds}")
    out, n = _LINE.subn(f"HealthCheckInterval={seconds}", conf_text)
    if n != 1:
        raise ValueError(f"slurm.conf has {n} HealthCheckInterval lines, not one")
    return out


def set_health_interval(conf: Path, seconds: int, env: dict[str, str]) -> int:
    """Rewrite the lab's slurm.conf (bound into every host) and `scontrol reconfigure` (slurmctld
    and every slurmd reread it); returns the interval it replaced."""
    text = conf.read_text()
    m = _LINE.search(text)
    if m is None:
        raise CouldNotComplete(f"{conf}: no HealthCheckInterval line")
    atomic_write(conf, with_health_interval(text, seconds))
    run(["scontrol", "reconfigure"], env=env, timeout=60)
    return int(m.group(1))
