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
from typing import TYPE_CHECKING, Any

import typer

from fleet.cli.output import emit_json, esc
from fleet.cli.output import stdout as console
from fleet.cli.rollout.common import (
    InventoryOpt,
    JsonFlag,
    LimitOpt,
    MatrixOpt,
    PoolOpt,
    SchedulerOpt,
    SeedOpt,
    SimOpt,
    SimSpecOpt,
    admin_states,
    check_pools,
    check_scheduler,
    from_history,
    inventory_hosts,
    selected_pools,
)
from fleet.cli.rollout.group import app
from fleet.cli.table import Grid, OutputOpt, show, wants_json
from fleet.errors import BadInput, ProblemsFound

if TYPE_CHECKING:  # pydantic models: imported when a plan is made
    from fleet.domain.plan import RolloutPlan
    from fleet.domain.ports import AdminState

_SHOW = 8


def _short(hosts: list[str]) -> str:
    shown = ", ".join(hosts[:_SHOW])
    return shown + (f", ... (+{len(hosts) - _SHOW})" if len(hosts) > _SHOW else "")


def print_plan(plan: RolloutPlan, output: str | None = None) -> None:
    t = Grid(("pool", "release", "canary", "moving", "waves", "wave sizes", "skipped",
              "max unavailable"))
    for p in plan.pools:
        sizes = [len(w.hosts) for w in p.waves]
        shown = ", ".join(map(str, sizes[:12])) + (" ..." if len(sizes) > 12 else "")
        t.add_row(esc(p.pool), esc(p.release), "yes" if p.canary else "", str(len(p.hosts)),
                  str(len(p.waves)), shown, str(len(p.skipped)),
                  f"{p.max_unavailable} ({len(p.unavailable)} out now)"
                  + (" [red]blocked[/]" if p.blocked else ""))
    show(t, output)
    for p in plan.pools:
        console.print(f"\n[bold]{esc(p.pool)}[/bold] -> {esc(p.release)}")
        for w in p.waves[:_SHOW]:
            console.print(f"  wave {w.index}: {len(w.hosts)} host(s): {_short(w.hosts)}",
                          markup=False)
        if len(p.waves) > _SHOW:
            console.print(f"  ... {len(p.waves) - _SHOW} more wave(s)")
        reasons: dict[str, list[str]] = {}
        for host, why in p.skipped.items():
            reasons.setdefault(why, []).append(host)
        for why, hosts in sorted(reasons.items()):
            console.print(f"  [dim]{esc(f'skipped ({why}): {_short(hosts)}')}[/dim]")
        for note in p.notes:
            console.print(f"  [yellow]note[/yellow]: {esc(note)}")
        if p.blocked:
            console.print(f"  [red]blocked[/red]: {esc(p.blocked)}")
    if plan.unassigned:
        console.print(f"\n[yellow]in no pool[/yellow] (never moved): "
                      f"{esc(_short(plan.unassigned))}")


@app.command("plan")
def plan_cmd(
    ctx: typer.Context,
    matrix: MatrixOpt,
    inventory: InventoryOpt = None,
    sim: SimOpt = None,
    sim_spec: SimSpecOpt = None,
    seed: SeedOpt = 0,
    limit: LimitOpt = None,
    pool: PoolOpt = None,
    scheduler: SchedulerOpt = None,
    json_out: JsonFlag = False,
    output: OutputOpt = None,
) -> None:
    """Show the waves of a rollout to each pool's golden release; touches nothing.

    Canary pools first; waves from the pool's `waves` list; hosts sharing a unit (NVLink domain
    or rack) move together; quarantined, unreachable, drained-by-others hosts and hosts already
    on the target are skipped with the reason. Exit 3 when a host of the plan was unreachable at
    its latest probe or never probed (`fleet probe` first); else 1 when a pool cannot move
    because its `max_unavailable` is used up.
    """
    from fleet.cli.app import settings
    from fleet.domain.matrix.loader import load_matrix
    from fleet.domain.plan import plan_rollout

    sources = [s for s in (inventory, sim, sim_spec) if s is not None]
    if len(sources) != 1:
        raise BadInput.single("give exactly one of --inventory, --sim N or --sim-spec FILE",
                              field="--inventory/--sim")
    check_scheduler(scheduler, sim=inventory is None)
    named = selected_pools(limit, pool)
    pool = list(dict.fromkeys(p for _, p in named))
    m = load_matrix(matrix, today=datetime.now(UTC).date()).matrix
    releases: dict[str, str | None]
    admin: dict[str, AdminState]
    unreachable: list[str] = []
    quarantined: dict[str, str] = {}
    probed: set[str] | None = None  # None: the simulated fleet knows every host
    meta: dict[str, Any] = {"matrix": str(matrix)}
    if inventory is not None:
        refs = inventory_hosts(inventory, m)
        check_pools(named, refs, m)  # before the history or the scheduler is asked anything
        names = [r.name for r in refs]
        seen = from_history(settings(ctx).db, names)
        releases, quarantined, unreachable = seen.releases, seen.quarantined, seen.unreachable
        probed = seen.probed
        admin = admin_states(scheduler, refs)
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
        if not refs:  # an empty plan is not "all fine" (docs/exit-codes.md)
            raise BadInput.single("the simulated fleet has no host: give `hosts: N` or "
                                  "`pools: {POOL: {hosts: N}}`", file=str(sim_spec or "--sim"))
        check_pools(named, refs, m)
        releases = fleet.releases_by_host()
        sched = fleet.scheduler()
        admin = {r.name: s for r in refs
                 if (s := sched.state(r.name)).state != "available"}
        unreachable = fleet.unreachable_hosts()
    plan = plan_rollout(m, refs, releases=releases, admin=admin, quarantined=quarantined,
                        unreachable=unreachable, pools=set(pool) if pool else None)
    lost = [h for p in plan.pools for h in p.unreachable]
    unknown = [] if probed is None else [h for p in plan.pools
                                         for h in [*p.hosts, *p.skipped] if h not in probed]
    if wants_json(json_out, output):
        emit_json({**meta, **plan.as_dict(), "unreachable": lost, "never_probed": unknown})
    else:
        print_plan(plan, output)
    _exit(plan, lost, unknown)


def _exit(plan: RolloutPlan, lost: list[str], unknown: list[str]) -> None:
    """Exit 3 when the plan rests on hosts nobody could look at (docs/exit-codes.md, as `check`
    and `rollout start`): unreachable at their latest probe, or never probed (they are planned
    to move, but what they run is not known). Else 1 when a pool cannot move."""
    from fleet.domain.selection import known
    from fleet.errors import CouldNotComplete

    why = []
    if lost:
        why.append(f"{len(lost)} host(s) unreachable at their latest probe: {known(lost)}")
    if unknown:
        why.append(f"{len(unknown)} host(s) never probed, what they run is not known (run "
                   f"`fleet probe -i INVENTORY`): {known(unknown)}")
    if why:
        raise CouldNotComplete("; ".join(why))
    blocked = [p.pool for p in plan.pools if p.blocked]
    if blocked:
        raise ProblemsFound(f"pool(s) cannot move, max_unavailable used up: {', '.join(blocked)}")
