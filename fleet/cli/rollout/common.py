"""What several `fleet rollout` commands share: options, checks of their values, and what the
inventory, the history and the scheduler say about the hosts."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

import typer

from fleet.errors import BadInput, Problem

if TYPE_CHECKING:  # pydantic models: imported by the commands that read hosts
    from fleet.domain.matrix.models import Matrix
    from fleet.domain.ports import AdminState, HostRef

MatrixOpt = Annotated[Path, typer.Option("--matrix", "-m", help="Version matrix.",
                                         envvar="FLEET_MATRIX", show_default=False)]
InventoryOpt = Annotated[Path | None, typer.Option(
    "--inventory", "-i", help="pyinfra inventory file.", envvar="FLEET_INVENTORY")]
SimOpt = Annotated[int | None, typer.Option(
    "--sim", help="Plan for a simulated fleet of N hosts spread over the matrix pools.",
    min=1, max=1_000_000)]
SimSpecOpt = Annotated[Path | None, typer.Option(
    "--sim-spec", help="Plan for a simulated fleet described by a YAML spec (fleet.sim.SimSpec).")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of the simulated fleet.")]
LimitOpt = Annotated[list[str] | None, typer.Option(
    "--limit", "-l", metavar="POOL", show_default=False,
    help="Only this pool; repeatable. A rollout moves whole pools, so each value is a pool "
    "name; one that names no pool with hosts is refused.")]
PoolOpt = Annotated[list[str] | None, typer.Option(
    "--pool", "-p", metavar="POOL", show_default=False,
    help="Alias of --limit (a pool name; kept for existing scripts).")]
SchedulerOpt = Annotated[str | None, typer.Option(
    "--scheduler", metavar="none|slurm|kubernetes", help="Drain through, and read "
    "administrative states from (default: the inventory's `scheduler` host data, else none).")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]

PrometheusOpt = Annotated[str | None, typer.Option(
    "--prometheus", metavar="URL", show_default=False,
    help="Prometheus server the live gate asks (default: FLEET_PROMETHEUS_URL, else the "
         "inventory's prometheus_url data); credentials only from the environment.")]

ForceOpt = Annotated[bool, typer.Option(
    "--force", help="Take over a stale lock (its controller died or hangs); recorded.")]
ReasonOpt = Annotated[str | None, typer.Option("--reason", help="Why (recorded).")]


def now() -> datetime:
    return datetime.now(UTC)


def inventory_hosts(path: Path, matrix: Matrix) -> list[HostRef]:
    """HostRefs of an inventory; a host's pool is its `pool` data, else the first of its groups
    the matrix names, else its first group."""
    from fleet.domain.ports import HostRef
    from fleet.remote.backend import SshBackend

    refs = SshBackend(path).hosts()
    out = []
    for ref in refs:
        if not ref.data.get("pool"):
            known = [g for g in ref.groups if g in matrix.pools]
            if known:
                ref = HostRef(ref.name, known[0], ref.gpu_model, ref.gpu_count, ref.unit,
                              ref.groups, ref.data)
        out.append(ref)
    return out


class HistoryView(NamedTuple):
    """What the history says of some hosts (all empty without a history file)."""

    releases: dict[str, str | None]  # newest reachable snapshot that matched a release
    quarantined: dict[str, str]  # open quarantines: host -> reason
    unreachable: list[str]  # the latest probe could not reach them
    probed: set[str]  # hosts with any snapshot at all


def from_history(db: str, names: list[str]) -> HistoryView:
    """From the history, if there is one: each host's release (its newest reachable snapshot
    that matched a matrix release), the open quarantines, the hosts whose latest probe could
    not reach them, and the hosts ever probed."""
    if "://" not in db and not Path(db).exists():
        return HistoryView({}, {}, [], set())
    from fleet.history import latest_snapshots, list_quarantines, open_history

    wanted = set(names)
    with open_history(db) as history:
        reachable = latest_snapshots(history, hosts=names, reachable_only=True)
        latest = latest_snapshots(history, hosts=names)
        quarantines = list_quarantines(history)
    releases: dict[str, str | None] = {h.name: s.release for h, s in reachable if s.release}
    quarantined = {h.name: q.reason for q, h in quarantines if h.name in wanted}
    unreachable = [h.name for h, s in latest if not s.reachable]
    return HistoryView(releases, quarantined, unreachable, {h.name for h, _ in latest})


def admin_states(name: str | None, refs: list[HostRef]) -> dict[str, AdminState]:
    from fleet.schedulers import scheduler_for

    sched = scheduler_for(name, refs)
    if sched.name == "none":
        return {}
    return {r.name: sched.state(r.name) for r in refs}


def check_scheduler(name: str | None, *, sim: bool) -> None:
    if name is None:
        return
    if name.strip().lower() not in ("none", "slurm", "kubernetes", "k8s"):
        raise BadInput.single(f"unknown scheduler {name!r} (schedulers: none, slurm, "
                              "kubernetes)", field="--scheduler")
    if sim and name.strip().lower() != "none":
        raise BadInput.single("a simulated fleet drains through its own scheduler; "
                              "--scheduler goes with --inventory", field="--scheduler")


def selected_pools(limit: list[str] | None, pool: list[str] | None) -> list[tuple[str, str]]:
    """The pools `-l/--limit` and its alias `--pool/-p` name, as (option, pool)."""
    from fleet.cli.selection import given

    return given(limit, pool)


def check_pools(pools: Sequence[str | tuple[str, str]] | None, refs: list[HostRef],
                m: Matrix) -> None:
    """Every pool named (a bare name, or (option, name) to say which option named it) must be
    a pool with hosts: a typo is refused with the pools that exist, even beside valid ones."""
    from fleet.domain.selection import pool_problems

    problems = [Problem(None, None, option, why)
                for option, name in (("--limit", p) if isinstance(p, str) else p
                                     for p in pools or ())
                for why in pool_problems([name], refs, m)]
    if problems:
        raise BadInput(problems)


def no_rollout(history: Any, rollout_id: int | None) -> BadInput:
    """An unknown rollout id, with the ids the history has."""
    from fleet.history.rollouts import list_rollouts

    ids = [str(r.id) for r in list_rollouts(history, limit=20)]
    if not ids:
        return BadInput.single("no rollout in the history yet", field="ID")
    return BadInput.single(f"no rollout {rollout_id} in the history (rollouts, newest first: "
                           f"{', '.join(ids)}{' ...' if len(ids) == 20 else ''})", field="ID")


def step_reason(step: dict[str, Any]) -> str:
    """A host step's reason, where the engine recorded one."""
    d = step.get("detail") or {}
    if d.get("error"):
        return f"{d.get('failed_at') or 'failed'}: {d['error']}"
    for key in ("why", "rollback_reason"):
        if d.get(key):
            return str(d[key])
    w = d.get("waiting_for")
    if step["state"] == "draining" and isinstance(w, dict):
        return f"waiting for {len(w.get('jobs') or [])} job(s)"
    return ""
