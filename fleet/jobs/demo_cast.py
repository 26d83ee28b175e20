"""The demo's cast and vocabulary: the releases, pools and faulty hosts the story is written
against (`Cast`), what a target must offer (`Target`), a chapter (`Step`) and the outcome
(`DemoResult`). Shared by the simulated story (`fleet.jobs.demo`) and the lab's
(`fleet.jobs.demo_lab`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from fleet.domain.ports import Backend, Scheduler

SEED = 7
START = datetime(2025, 9, 1, 8, 0, tzinfo=UTC)
"""The logical clock starts here (a Monday morning, UTC); the history is stamped with it."""
WEEK = timedelta(weeks=1)
POOLS: dict[str, int] = {"h100-canary": 4, "h100": 20, "a100": 20, "l40s": 20}
GOLDEN = "r570-cuda12.8"
CANDIDATE_A = "r575-cuda12.9"
CANDIDATE_B = "r580-cuda13.0"
SLOW_A = 0.75
"""Candidate A's performance factor on every host: 25% less replay throughput."""
ECC_HOSTS = ("h100-00007", "a100-00013")
ECC_RAMP = (100, 400, 1600)
"""Corrected ECC errors each probe adds on the faulty GPU, raised week by week."""
DRIFT_HOST = "l40s-00005"
DRIFT_PACKAGE = "nvidia-container-toolkit"
DRIFT_VERSION = "1.18.1"
INCIDENT_POOL = "l40s"
INCIDENT_REASON = "inference jobs on l40s fail with CUDA_ERROR_ILLEGAL_ADDRESS since r580"

MATRIX_FILE = "matrix.yaml"
DB_FILE = "fleet.db"
SIM_FILE = "fleet.sim.json"
REPORT_DIR = "reports"

Reporter = Callable[[Mapping[str, Any], Path], Mapping[str, Path]]
"""(a hygiene report's `as_dict()`, a directory) -> the files written, by kind (html, md, ...)."""


@dataclass
class Step:
    """One chapter of the story: what happened, and what a user types to do it on a fleet."""

    number: int
    title: str
    lines: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    ok: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {"number": self.number, "title": self.title, "lines": list(self.lines),
                "commands": list(self.commands), "ok": self.ok}


@dataclass(frozen=True)
class Cast:
    """Who plays which part: the releases, the pools, the faulty and drifted hosts, the pool of
    the incident. The story is written once against it (and a `Target`)."""

    kind: str  # "simulated" or "lab"
    golden: str
    candidate_a: str
    candidate_b: str
    slow: float
    pools: dict[str, int]
    ecc_hosts: tuple[str, ...]
    ecc_ramp: tuple[int, ...]
    drift_host: str
    drift_package: str
    drift_version: str
    incident_pool: str
    slow_how: str = "the simulation's release performance factor"
    el9_pools: tuple[str, ...] = ()  # pools whose hosts run EL9 (dnf, rpm); the rest Debian
    el9_hosts: tuple[str, ...] = ()

    def hand_install(self, host: str) -> str:
        """The command someone typed to drift `host` (its own package manager)."""
        if host in self.el9_hosts:
            return f"dnf versionlock delete {self.drift_package} && " \
                   f"dnf install {self.drift_package}-{self.drift_version}"
        return f"apt-get install {self.drift_package}={self.drift_version}-1"

    @property
    def hosts(self) -> int:
        return sum(self.pools.values())


SIM_CAST = Cast("simulated", GOLDEN, CANDIDATE_A, CANDIDATE_B, SLOW_A, dict(POOLS), ECC_HOSTS,
                ECC_RAMP, DRIFT_HOST, DRIFT_PACKAGE, DRIFT_VERSION, INCIDENT_POOL)


class Target(Protocol):
    """The per-target bits of the story (the rest is the Backend and Scheduler ports): the
    clock, fault injection, drift made by hand, and what runs where."""

    cast: Cast
    backend: Backend
    source: dict[str, Any]  # the rollout's recorded source (how `rollout resume` rewires)
    hygiene_benchmark: bool

    @property
    def scheduler(self) -> Scheduler: ...
    def now(self) -> datetime: ...
    def at(self, when: datetime) -> None: ...
    def sleep(self, seconds: float) -> None: ...
    def installed(self) -> dict[str, str | None]:
        """Each host's release, as it runs now."""
        ...
    def unreachable(self) -> list[str]: ...
    def ecc(self, host: str, count: int) -> None:
        """Corrected ECC errors on GPU 0 of `host`: `count` more by the next probe."""
        ...
    def drift(self, host: str, package: str, version: str) -> None: ...
    def drifted(self, host: str) -> bool: ...
    def save(self) -> None: ...


def cast_backend(obj: Any) -> Backend:
    """A concrete backend (SimFleet, SshBackend) as the `Backend` port."""
    return obj  # type: ignore[no-any-return]



@dataclass
class DemoResult:
    folder: Path
    matrix: Path
    db: Path
    sim_state: Path | None
    report: Path | None = None
    reports: dict[str, Path] = field(default_factory=dict)
    baseline: dict[str, Any] = field(default_factory=dict)
    rollouts: list[dict[str, Any]] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)
    incident: dict[str, Any] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    started: datetime = START
    ended: datetime = START
    cast: Cast = SIM_CAST
    lab_run: Path | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> dict[str, Any]:
        """The `--json` document (stable keys)."""
        return {
            "ok": self.ok,
            "problems": list(self.problems),
            "seed": SEED,
            "target": "lab" if self.cast.kind == "lab" else "sim",
            "folder": str(self.folder),
            "matrix": str(self.matrix),
            "db": str(self.db),
            "sim_state": str(self.sim_state) if self.sim_state else None,
            "lab_run": str(self.lab_run) if self.lab_run else None,
            "report": str(self.report) if self.report else None,
            "reports": {k: str(v) for k, v in sorted(self.reports.items())},
            "fleet": {"hosts": self.cast.hosts, "pools": dict(self.cast.pools),
                      "el9_pools": list(self.cast.el9_pools)},
            "releases": {"golden": self.cast.golden, "candidate_a": self.cast.candidate_a,
                         "candidate_b": self.cast.candidate_b},
            "baseline": dict(self.baseline),
            "rollouts": list(self.rollouts),
            "quarantined": list(self.quarantined),
            "drift": list(self.drift),
            "incident": dict(self.incident),
            "steps": [s.as_dict() for s in self.steps],
            "simulated_time": {"start": self.started.isoformat(),
                               "end": self.ended.isoformat()},
        }


def demo_matrix_text() -> str:
    """The demo's matrix, shipped as package data."""
    return resources.files("fleet.data").joinpath("demo_matrix.yaml").read_text()

