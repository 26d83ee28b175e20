"""`fleet rollout plan`: the waves a rollout would take, per pool, without touching a host.

Hosts come from a pyinfra inventory (`--inventory`) or a simulated fleet (`--sim N`, or
`--sim-spec FILE`). What each host runs now:

- with `--sim`, the simulated fleet knows it;
- with `--inventory`, a host is on an unknown release (so it moves) unless the history (`--db`)
  has a snapshot of it that matched a matrix release (`fleet probe` records that). Run
  `fleet probe` first for a plan that leaves hosts already on the target alone. The history
  also gives the open quarantines and the hosts whose latest probe could not reach them (both
  skipped, and counted against `max_unavailable`). Without a history file nothing is known.

Administrative state (drained by someone else counts against `max_unavailable` and is not
moved) is read from the workload manager with `--scheduler slurm|kubernetes`; the default
`none` reads nothing. The simulated fleet has its own.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from fleet.cli.output import console, emit_json
from fleet.domain.matrix.models import Matrix
from fleet.domain.plan import RolloutPlan
from fleet.domain.ports import AdminState, HostRef
from fleet.errors import BadInput, ProblemsFound

app = typer.Typer(
    help="Staged rollouts: canary pools first, then waves, gated by health and benchmarks.",
    no_args_is_help=True,
)

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
PoolOpt = Annotated[list[str] | None, typer.Option(
    "--pool", "-p", help="Only this pool; repeatable.")]
SchedulerOpt = Annotated[str, typer.Option(
    "--scheduler", help="Read administrative states from: none, slurm, kubernetes.")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]

_SHOW = 8


def _inventory_hosts(path: Path, matrix: Matrix) -> list[HostRef]:
    """HostRefs of an inventory; a host's pool is its `pool` data, else the first of its groups
    the matrix names, else its first group."""
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


def _from_history(db: str, names: list[str]) -> tuple[
        dict[str, str | None], dict[str, str], list[str]]:
    """From the history, if there is one: each host's release (its newest reachable snapshot
    that matched a matrix release), the open quarantines, and the hosts whose latest probe
    could not reach them."""
    if "://" not in db and not Path(db).exists():
        return {}, {}, []
    from fleet.history import latest_snapshots, list_quarantines, open_history

    wanted = set(names)
    with open_history(db) as history:
        reachable = latest_snapshots(history, hosts=names, reachable_only=True)
        latest = latest_snapshots(history, hosts=names)
        quarantines = list_quarantines(history)
    releases: dict[str, str | None] = {h.name: s.release for h, s in reachable if s.release}
    quarantined = {h.name: q.reason for q, h in quarantines if h.name in wanted}
    unreachable = [h.name for h, s in latest if not s.reachable]
    return releases, quarantined, unreachable


def _admin_states(name: str, hosts: list[str]) -> dict[str, AdminState]:
    if name == "none":
        return {}
    from fleet.schedulers import make_scheduler

    sched = make_scheduler(name)
    return {h: sched.state(h) for h in hosts}


def _short(hosts: list[str]) -> str:
    shown = ", ".join(hosts[:_SHOW])
    return shown + (f", ... (+{len(hosts) - _SHOW})" if len(hosts) > _SHOW else "")


def _print(plan: RolloutPlan) -> None:
    t = Table("pool", "release", "canary", "moving", "waves", "wave sizes", "skipped",
              "max unavailable", box=None)
    for p in plan.pools:
        sizes = [len(w.hosts) for w in p.waves]
        shown = ", ".join(map(str, sizes[:12])) + (" ..." if len(sizes) > 12 else "")
        t.add_row(p.pool, p.release, "yes" if p.canary else "", str(len(p.hosts)),
                  str(len(p.waves)), shown, str(len(p.skipped)),
                  f"{p.max_unavailable} ({len(p.unavailable)} out now)"
                  + (" [red]blocked[/]" if p.blocked else ""))
    console.print(t)
    for p in plan.pools:
        console.print(f"\n[bold]{p.pool}[/bold] -> {p.release}")
        for w in p.waves[:_SHOW]:
            console.print(f"  wave {w.index}: {len(w.hosts)} host(s): {_short(w.hosts)}")
        if len(p.waves) > _SHOW:
            console.print(f"  ... {len(p.waves) - _SHOW} more wave(s)")
        reasons: dict[str, list[str]] = {}
        for host, why in p.skipped.items():
            reasons.setdefault(why, []).append(host)
        for why, hosts in sorted(reasons.items()):
            console.print(f"  [dim]skipped ({why}): {_short(hosts)}[/dim]")
        for note in p.notes:
            console.print(f"  [yellow]note[/yellow]: {note}")
        if p.blocked:
            console.print(f"  [red]blocked[/red]: {p.blocked}")
    if plan.unassigned:
        console.print(f"\n[yellow]in no pool[/yellow] (never moved): {_short(plan.unassigned)}")


@app.command("plan")
def plan_cmd(
    ctx: typer.Context,
    matrix: MatrixOpt,
    inventory: InventoryOpt = None,
    sim: SimOpt = None,
    sim_spec: SimSpecOpt = None,
    seed: SeedOpt = 0,
    pool: PoolOpt = None,
    scheduler: SchedulerOpt = "none",
    json_out: JsonFlag = False,
) -> None:
    """Show the waves of a rollout to each pool's golden release; touches nothing.

    Canary pools first; waves from the pool's `waves` list; hosts sharing a unit (NVLink domain
    or rack) move together; quarantined, unreachable, drained-by-others hosts and hosts already
    on the target are skipped with the reason. Exit 1 when a pool cannot move because its
    `max_unavailable` is used up.
    """
    from fleet.cli.app import settings
    from fleet.domain.matrix.loader import load_matrix
    from fleet.domain.plan import plan_rollout

    sources = [s for s in (inventory, sim, sim_spec) if s is not None]
    if len(sources) != 1:
        raise BadInput.single("give exactly one of --inventory, --sim N or --sim-spec FILE",
                              field="--inventory/--sim")
    m = load_matrix(matrix, today=datetime.now(UTC).date()).matrix
    unknown = [p for p in pool or [] if p not in m.pools]
    releases: dict[str, str | None]
    admin: dict[str, AdminState]
    unreachable: list[str] = []
    quarantined: dict[str, str] = {}
    meta: dict[str, Any] = {"matrix": str(matrix)}
    if inventory is not None:
        refs = _inventory_hosts(inventory, m)
        names = [r.name for r in refs]
        releases, quarantined, unreachable = _from_history(settings(ctx).db, names)
        admin = _admin_states(scheduler, names)
        meta.update(source="inventory", inventory=str(inventory),
                    releases_known=len(releases))
    else:
        from fleet.sim import SimFleet, SimSpec

        if sim_spec is not None:
            fleet = SimFleet.from_spec(SimSpec.load(sim_spec), m)
            meta.update(source="sim-spec", sim_spec=str(sim_spec))
        else:
            fleet = SimFleet.build(m, sim, seed)
            meta.update(source="sim", sim=sim, seed=seed)
        refs = fleet.hosts()
        releases = fleet.releases_by_host()
        sched = fleet.scheduler()
        admin = {r.name: s for r in refs
                 if (s := sched.state(r.name)).state != "available"}
        unreachable = fleet.unreachable_hosts()
    if unknown and not any(r.pool in unknown for r in refs):
        raise BadInput.single(f"no such pool: {', '.join(unknown)}", field="--pool")
    plan = plan_rollout(m, refs, releases=releases, admin=admin, quarantined=quarantined,
                        unreachable=unreachable, pools=set(pool) if pool else None)
    if json_out:
        emit_json({**meta, **plan.as_dict()})
    else:
        _print(plan)
    blocked = [p.pool for p in plan.pools if p.blocked]
    if blocked:
        raise ProblemsFound(f"pool(s) cannot move, max_unavailable used up: {', '.join(blocked)}")
