"""A pool's rollout settings in the matrix: waves, budgets, gates, drains and reboots.

`drain` says how long a host may keep running jobs once it is drained and what happens when they
outlive that (`fleet.domain.drain` decides, the jobs layer waits); `reboot` says whether fleet
reboots hosts over SSH or asks the workload manager to (`scontrol reboot`).
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, StrictBool, field_validator

from fleet.domain.endpoint import endpoint_problem
from fleet.domain.kube_selector import parse_selector
from fleet.domain.matrix.base import Model as _Model
from fleet.domain.matrix.live_settings import LiveGateSettings
from fleet.domain.matrix.profiles import PoolProfile

_PERCENT_RE = re.compile(r"^([0-9]{1,3})%$")

_COMMAND_RE = re.compile(r"^[A-Za-z0-9_./:=,+@%-]+( [A-Za-z0-9_./:=,+@%-]+)*$")


def _check_command(value: str) -> str:
    """A benchmark command: words of plain characters, run without a shell on the host."""
    if not _COMMAND_RE.match(value):
        raise ValueError(
            "expected a command of plain words separated by single spaces (letters, digits and "
            "_./:=,+@%-), run without a shell, e.g. 'fleet-lab-bench --seconds 5'"
        )
    return value


def _check_endpoint(value: str) -> str:
    """What the replay client on the hosts can use (fleet.domain.endpoint), refused here rather
    than at the replay gate in the middle of a rollout."""
    why = endpoint_problem(value)
    if why:
        raise ValueError(why)
    return value


def _check_percent(value: object) -> object:
    """A host count (an integer >= 1) or a percentage string "1%".."100%"; nothing else."""
    if isinstance(value, str):
        match = _PERCENT_RE.fullmatch(value)
        if match and 1 <= int(match.group(1)) <= 100:
            return value
    elif isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ValueError(
        f"expected a host count (an integer >= 1) or a percentage such as '20%', got {value!r}"
    )


CountOrPercent = Annotated[int | str, BeforeValidator(_check_percent)]

OnTimeout = Literal["pause", "skip", "cancel", "requeue"]
RebootVia = Literal["ssh", "slurm"]


class DrainSettings(_Model):
    """How a host is emptied before it changes.

    A host is ready only when the workload manager reports it drained with nothing running or
    completing on it. Jobs that outlive `timeout_minutes`: `pause` the rollout for a human
    (default), `skip` the host (undrained, left on its release), or `cancel` / `requeue` them
    (only when the matrix says so; recorded in the event log with the job ids).
    """

    timeout_minutes: float = Field(default=60.0, ge=0, le=7 * 24 * 60,
                                   description="How long running jobs may take to end.")
    on_timeout: OnTimeout = "pause"
    poll_seconds: float = Field(default=10.0, gt=0, le=600,
                                description="How often the scheduler is asked.")
    pod_selector: str | None = Field(default=None, max_length=1024,
                                     description="Kubernetes: only pods matching it are evicted.")
    delete_emptydir_data: bool = Field(
        default=False, description="Kubernetes: evict pods with emptyDir volumes (data lost).")
    grace_period_seconds: int | None = Field(
        default=None, ge=1, le=86400,
        description="Kubernetes: seconds each evicted pod gets to shut down (default: its own); "
                    "0, which deletes pods at once, is refused.")

    @field_validator("timeout_minutes", "poll_seconds")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    @field_validator("pod_selector")
    @classmethod
    def _selector(cls, value: str | None) -> str | None:
        """Parsed as kubectl parses `--pod-selector`, so what passes here passes there."""
        if value is not None:
            try:
                parse_selector(value)
            except ValueError as exc:
                raise ValueError(f"{value!r} is not a Kubernetes label selector: {exc} "
                                 "(e.g. 'app=trainer,tier!=system')") from None
        return value

    @property
    def timeout_s(self) -> float:
        return self.timeout_minutes * 60.0


class GateSettings(_Model):
    """Which gates run between rollout steps, and how often an inconclusive gate is retried.

    `benchmark_command` names the synthetic benchmark on the hosts (a command printing JSON
    metrics; default: dcgmi diag, else a CUDA micro-benchmark, else "could not measure");
    `replay_endpoint` is the HTTP endpoint on each host the replay suite sends its trace to.
    """

    health: bool = True
    benchmark: bool = True
    replay: bool = False
    max_retries: int = Field(default=1, ge=0, le=10)
    benchmark_command: Annotated[str, AfterValidator(_check_command)] | None = None
    benchmark_repeats: int = Field(default=3, ge=1, le=100,
                                   description="Runs of the synthetic benchmark per host.")
    replay_endpoint: Annotated[str, AfterValidator(_check_endpoint)] | None = None
    live: LiveGateSettings = LiveGateSettings()

    def suite_params(self) -> dict[str, dict[str, str | int]]:
        """Per-suite parameters for `Backend.benchmark` from these settings."""
        out: dict[str, dict[str, str | int]] = {"synthetic": {"repeats": self.benchmark_repeats}}
        if self.benchmark_command:
            out["synthetic"]["command"] = self.benchmark_command
        if self.replay_endpoint:
            out["replay"] = {"endpoint": self.replay_endpoint}
        return out


class RolloutSettings(_Model):
    """How a pool changes: waves in Ansible's `serial` grammar, budgets and gates."""

    waves: list[CountOrPercent] = Field(
        default=[1, "25%"], min_length=1,
        description="Wave sizes, counts or percentages of the pool ('20%'); the last repeats.",
    )
    max_unavailable: CountOrPercent = "10%"
    bake_minutes: int = Field(default=30, ge=0)
    failure_budget_per_wave: int = Field(default=0, ge=0)
    failure_budget_total: int = Field(default=1, ge=0)
    gates: GateSettings = GateSettings()
    drain: DrainSettings = DrainSettings()
    reboot: RebootVia = Field(
        default="ssh", description="ssh: fleet reboots the host; slurm: `scontrol reboot`.")

    def wave_sizes(self, n_hosts: int) -> list[int]:
        return wave_sizes(self.waves, n_hosts)


SecureBootPolicy = Literal["required", "forbidden", "any"]


class KernelSettings(_Model):
    """What fleet does to the kernel packages of a pool's hosts (`fleet.domain.kernel_hold`)."""

    hold: StrictBool = Field(
        default=False,
        description="While a release is pinned, hold the installed kernel packages (apt-mark "
                    "hold, dnf versionlock), so unattended upgrades cannot move the kernel under "
                    "the driver; the pin of a pool without it releases what fleet held.")


class PoolSettings(_Model):
    """A pool's role (canary or not), its GPU model, its rollout settings, its Secure Boot
    policy (checked by `node.next_boot`), its node profile and whether its kernel packages are
    held."""

    canary: bool = False
    gpu_model: str | None = Field(
        default=None, max_length=64, description="e.g. H100, A100, L40S; checked against branches."
    )
    rollout: RolloutSettings = RolloutSettings()
    secure_boot: SecureBootPolicy = Field(
        default="any", description="required: hosts must boot with Secure Boot on; forbidden: "
                                   "off; any: either (the module must then load either way).")
    profile: PoolProfile | None = Field(
        default=None, description="The node profile (matrix `profiles:`) its hosts must match: "
        "a name, or GPU model -> name.")
    kernel: KernelSettings = KernelSettings()


def wave_sizes(serial: list[int | str], n_hosts: int) -> list[int]:
    """Batch sizes for `n_hosts` under Ansible's `serial` semantics.

    A percentage is of the whole pool, rounded down but at least 1; a count is taken as is; the
    last value repeats until every host is in a batch; the final batch may be smaller. An empty
    list means one batch of everything. The result always sums to `n_hosts`.
    """
    if n_hosts <= 0:
        return []
    if not serial:
        return [n_hosts]
    sizes: list[int] = []
    remaining = n_hosts
    i = 0
    while remaining > 0:
        item = serial[min(i, len(serial) - 1)]
        size = _to_count(item, n_hosts)
        if size <= 0:
            size = remaining
        size = min(size, remaining)
        sizes.append(size)
        remaining -= size
        i += 1
    return sizes


def _to_count(item: int | str, n_hosts: int) -> int:
    if isinstance(item, str):
        text = item.strip()
        if text.endswith("%"):
            return int(float(text[:-1]) / 100.0 * n_hosts) or 1
        return int(text)
    return int(item)
