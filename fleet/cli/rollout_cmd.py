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

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from fleet.cli.output import console, emit_json, esc
from fleet.domain.matrix.models import Matrix
from fleet.domain.plan import RolloutPlan
from fleet.domain.ports import AdminState, HostRef
from fleet.errors import BadInput, Problem, ProblemsFound

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
SchedulerOpt = Annotated[str | None, typer.Option(
    "--scheduler", help="Drain through, and read administrative states from: none, slurm, "
    "kubernetes (default: the inventory's `scheduler` host data, else none).")]
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


def _admin_states(name: str | None, refs: list[HostRef]) -> dict[str, AdminState]:
    from fleet.schedulers import scheduler_for

    sched = scheduler_for(name, refs)
    if sched.name == "none":
        return {}
    return {r.name: sched.state(r.name) for r in refs}


def _short(hosts: list[str]) -> str:
    shown = ", ".join(hosts[:_SHOW])
    return shown + (f", ... (+{len(hosts) - _SHOW})" if len(hosts) > _SHOW else "")


def _print(plan: RolloutPlan) -> None:
    t = Table("pool", "release", "canary", "moving", "waves", "wave sizes", "skipped",
              "max unavailable", box=None)
    for p in plan.pools:
        sizes = [len(w.hosts) for w in p.waves]
        shown = ", ".join(map(str, sizes[:12])) + (" ..." if len(sizes) > 12 else "")
        t.add_row(esc(p.pool), esc(p.release), "yes" if p.canary else "", str(len(p.hosts)),
                  str(len(p.waves)), shown, str(len(p.skipped)),
                  f"{p.max_unavailable} ({len(p.unavailable)} out now)"
                  + (" [red]blocked[/]" if p.blocked else ""))
    console.print(t)
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
    pool: PoolOpt = None,
    scheduler: SchedulerOpt = None,
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
    _check_scheduler(scheduler, sim=inventory is None)
    m = load_matrix(matrix, today=datetime.now(UTC).date()).matrix
    releases: dict[str, str | None]
    admin: dict[str, AdminState]
    unreachable: list[str] = []
    quarantined: dict[str, str] = {}
    meta: dict[str, Any] = {"matrix": str(matrix)}
    if inventory is not None:
        refs = _inventory_hosts(inventory, m)
        _check_pools(pool, refs, m)  # before the history or the scheduler is asked anything
        names = [r.name for r in refs]
        releases, quarantined, unreachable = _from_history(settings(ctx).db, names)
        admin = _admin_states(scheduler, refs)
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
        _check_pools(pool, refs, m)
        releases = fleet.releases_by_host()
        sched = fleet.scheduler()
        admin = {r.name: s for r in refs
                 if (s := sched.state(r.name)).state != "available"}
        unreachable = fleet.unreachable_hosts()
    plan = plan_rollout(m, refs, releases=releases, admin=admin, quarantined=quarantined,
                        unreachable=unreachable, pools=set(pool) if pool else None)
    if json_out:
        emit_json({**meta, **plan.as_dict()})
    else:
        _print(plan)
    blocked = [p.pool for p in plan.pools if p.blocked]
    if blocked:
        raise ProblemsFound(f"pool(s) cannot move, max_unavailable used up: {', '.join(blocked)}")


# ------------------------------------------------------------------ running rollouts
ForceOpt = Annotated[bool, typer.Option(
    "--force", help="Take over a stale lock (its controller died or hangs); recorded.")]
ReasonOpt = Annotated[str | None, typer.Option("--reason", help="Why (recorded).")]


def _now() -> datetime:
    return datetime.now(UTC)


class _Saving:
    """The simulated fleet or its scheduler, saving the fleet's state after each call that
    changes it, so a later command (resume, promote, abort) finds the hosts as they were."""

    MUTATING = frozenset({"apply", "reboot", "probe", "benchmark", "drain", "undrain"})

    def __init__(self, target: Any, save: Any) -> None:
        self._target, self._save = target, save
        self.name = getattr(target, "name", "sim")

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if name not in self.MUTATING or not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return attr(*args, **kwargs)
            finally:
                self._save()
        return call


RATE_NAMES = ("apply_fail", "unreachable", "xid_after_upgrade", "slow", "ecc_rising",
              "reboot_hangs", "drained", "slow_factor")
"""What `--sim-faults` sets (`fleet.sim.FaultRates`): probabilities 0..1, and the speed of a
slow host."""


def _sim_faults(text: str | None) -> dict[str, float]:
    """`--sim-faults NAME=RATE,...`, every value checked (a rate is a probability, 0 to 1)."""
    from pydantic import ValidationError

    from fleet.sim.model import FaultRates

    out: dict[str, float] = {}
    problems: list[Problem] = []
    for part in (text or "").split(","):
        if not part.strip():
            continue
        key, eq, value = (x.strip() for x in part.partition("="))
        if key not in RATE_NAMES:
            problems.append(Problem(None, None, "--sim-faults",
                                    f"unknown fault {key!r} (faults: {', '.join(RATE_NAMES)})"))
            continue
        try:
            rate = float(value) if eq else None
        except ValueError:
            rate = None
        if rate is None:
            problems.append(Problem(None, None, "--sim-faults",
                                    f"expected NAME=RATE, got {part.strip()!r}"))
            continue
        if key in out:
            problems.append(Problem(None, None, "--sim-faults", f"{key} is given twice"))
        if not math.isfinite(rate):
            problems.append(Problem(None, None, "--sim-faults",
                                    f"{key}={value}: expected a finite number"))
            continue
        try:
            FaultRates.model_validate({key: rate})
        except ValidationError as exc:
            problems += [Problem(None, None, "--sim-faults", f"{key}={value}: "
                                 f"{e['msg'][:1].lower()}{e['msg'][1:]}") for e in exc.errors()]
        out[key] = rate
    if problems:
        raise BadInput(problems)
    return out


def _sim_perf(items: list[str] | None, m: Matrix) -> dict[str, float]:
    """`--sim-slow RELEASE=FACTOR`: a release of the matrix, a finite factor in bounds."""
    from fleet.domain.selection import release_problem
    from fleet.sim.model import PERF_MAX, PERF_MIN

    out: dict[str, float] = {}
    problems: list[Problem] = []
    for item in items or []:
        rel, eq, text = (x.strip() for x in item.partition("="))
        try:
            factor = float(text) if eq else None
        except ValueError:
            factor = None
        if factor is None:
            problems.append(Problem(None, None, "--sim-slow",
                                    f"expected RELEASE=FACTOR, got {item!r}"))
            continue
        why = release_problem(rel, m)
        if why is not None:
            problems.append(Problem(None, None, "--sim-slow", why))
        if not (math.isfinite(factor) and PERF_MIN <= factor <= PERF_MAX):
            problems.append(Problem(None, None, "--sim-slow",
                                    f"{item}: the factor must be between {PERF_MIN} and "
                                    f"{PERF_MAX:g} (0.8 = 20% slower)"))
        out[rel] = factor
    if problems:
        raise BadInput(problems)
    return out


def _sim_build(m: Matrix, sim: int | None, seed: int, sim_spec: Path | None,
               sim_faults: str | None, sim_slow: list[str] | None) -> dict[str, Any]:
    """How to build the simulated fleet, every value checked before anything runs; recorded
    with the rollout, so a later command can rebuild the fleet the rollout started from."""
    from fleet.domain.selection import release_problem

    if sim_spec is not None:
        if sim_faults or sim_slow:
            raise BadInput.single("--sim-faults and --sim-slow go with --sim N; a --sim-spec "
                                  "file has its own rates and release_perf",
                                  field="--sim-faults/--sim-slow")
        from fleet.sim import SimSpec

        spec = SimSpec.load(sim_spec)
        problems = [Problem(str(sim_spec), None, f"release_perf.{rel}", why)
                    for rel in spec.release_perf
                    if (why := release_problem(rel, m)) is not None]
        if problems:
            raise BadInput(problems)
        return {"spec": str(sim_spec.absolute()), "spec_doc": spec.model_dump(mode="json")}
    return {"n": sim, "seed": seed, "rates": _sim_faults(sim_faults),
            "perf": _sim_perf(sim_slow, m)}


def _check_scheduler(name: str | None, *, sim: bool) -> None:
    if name is None:
        return
    if name.strip().lower() not in ("none", "slurm", "kubernetes", "k8s"):
        raise BadInput.single(f"unknown scheduler {name!r} (schedulers: none, slurm, "
                              "kubernetes)", field="--scheduler")
    if sim and name.strip().lower() != "none":
        raise BadInput.single("a simulated fleet drains through its own scheduler; "
                              "--scheduler goes with --inventory", field="--scheduler")


def _check_pools(pools: list[str] | None, refs: list[HostRef], m: Matrix) -> None:
    from fleet.domain.selection import pool_problems

    problems = pool_problems(pools or (), refs, m)
    if problems:
        raise BadInput([Problem(None, None, "--pool", why) for why in problems])


def _wiring(m: Matrix, source: dict[str, Any], *, create: bool = False,
            build: dict[str, Any] | None = None, rollout_id: int | None = None,
            owner: Any = None) -> tuple[Any, Any, Any]:
    """(backend, scheduler, sleep) for a recorded source: a simulated fleet saved in a state
    file, or an inventory over SSH with a scheduler adapter.

    A simulated fleet's state is saved after every call that changes a host, stamped with its
    rollout (`owner()` gives the rollout id once there is one). A controller killed before its
    first save leaves no state of its own (none, or an earlier run's): no host of its fleet was
    changed then, so the fleet is rebuilt from the recipe the rollout recorded (`build`)."""
    import time as _time

    if source.get("source") == "sim":
        from fleet.sim import SimFleet, load_fleet, save_fleet
        from fleet.sim.state import state_owner

        path = Path(source["sim_state"])
        recipe = build if create else source.get("build")
        rebuild = create
        if not create:
            exists, stamp = state_owner(path)
            earlier = _stamp_id(stamp)
            if exists and (stamp is None or earlier == rollout_id):
                pass  # this rollout's fleet (or a file saved before states were stamped)
            elif recipe and (not path.exists() or (earlier is not None and rollout_id is not None
                                                  and earlier < rollout_id)):
                rebuild = True  # killed before its first save: none of its hosts changed
            elif not exists:
                load_fleet(path, m)  # says why it cannot (missing, unreadable)
            else:
                raise BadInput.single(f"the simulated fleet state is {stamp}'s, not rollout "
                                      f"{rollout_id}'s (a later start with the same "
                                      "--sim-state replaced it)", file=str(path))
        if rebuild:
            b = dict(recipe or {})
            if b.get("spec"):
                from fleet.sim import SimSpec

                spec = (SimSpec.parse(b["spec_doc"], file=b["spec"]) if b.get("spec_doc")
                        else SimSpec.load(b["spec"]))
                fleet = SimFleet.from_spec(spec, m)
            else:
                fleet = SimFleet.build(m, b["n"], b["seed"], rates=b.get("rates") or None,
                                       release_perf=b.get("perf") or None)
            # not saved yet: a start refused (lock held) must not clobber the state of the
            # rollout that holds it; the first call that changes a host writes it
        else:
            fleet = load_fleet(path, m)

        def save() -> None:
            rid = owner() if owner is not None else rollout_id
            save_fleet(fleet, path, owner=f"rollout/{rid}" if rid is not None else None)

        sched = fleet.scheduler()

        def sim_sleep(seconds: float) -> None:
            fleet.clock.advance(seconds)  # type: ignore[attr-defined]
            save()

        return _Saving(fleet, save), _Saving(sched, save), sim_sleep
    from fleet.remote.backend import SshBackend
    from fleet.schedulers import scheduler_for

    backend = SshBackend(Path(source["inventory"]))
    return backend, scheduler_for(source.get("scheduler"), backend.hosts()), _time.sleep


def _stamp_id(stamp: str | None) -> int | None:
    """The rollout id of a state file's `rollout/ID` stamp."""
    if stamp is None or not stamp.startswith("rollout/"):
        return None
    try:
        return int(stamp.split("/", 1)[1])
    except ValueError:
        return None


def _wave_table(engine: Any) -> Any:
    from rich.console import Group
    from rich.text import Text

    t = Table("wave", "pool", "hosts", "status", "verdict", "host states", "gate",
              box=None, title=f"rollout {engine.rid}")
    for w in engine._view_waves():
        gate = w.get("gate") or {}
        bench = gate.get("benchmark") or {}
        health = gate.get("health") or {}
        shown = bench.get("verdict") or health.get("verdict") or ""
        colour = {"pass": "green", "fail": "red", "inconclusive": "yellow",
                  "error": "yellow"}.get(w["verdict"] or "", "white")
        t.add_row(str(w["index"]), esc(w["pool"]), str(w["hosts"]), w["status"],
                  f"[{colour}]{w['verdict'] or ''}[/]",
                  ", ".join(f"{n} {s}" for s, n in w["states"].items()), shown)
    lines = _waiting_lines(_waiting(engine.steps.values()))
    return Group(t, *(Text(line) for line in lines)) if lines else t


def _drive(ctx: typer.Context, matrix_path: str, source: dict[str, Any], json_out: bool,
           action: Any, *, create: bool = False, build: dict[str, Any] | None = None,
           options: dict[str, Any] | None = None, rollout_id: int | None = None,
           matrix: Matrix | None = None) -> None:
    """Run one engine operation with the live display, then report and exit by outcome.

    A rollout that completed while its plan skipped unreachable hosts did not do all it was
    asked: exit 3 naming them (they still run what they ran, whatever that is)."""
    import time as _time

    from rich.live import Live

    from fleet.cli.app import settings
    from fleet.domain.matrix.loader import load_matrix
    from fleet.history import open_history
    from fleet.jobs.rollout import RolloutEngine, RolloutOptions

    m = matrix or load_matrix(Path(matrix_path), today=datetime.now(UTC).date()).matrix
    made: list[Any] = []
    backend, sched, sleep = _wiring(m, source, create=create, build=build,
                                    rollout_id=rollout_id,
                                    owner=lambda: made[0].rid if made else rollout_id)
    live: Live | None = None
    last = [0.0]

    def progress(engine: Any) -> None:
        if live is not None and _time.monotonic() - last[0] > 0.2:
            last[0] = _time.monotonic()
            live.update(_wave_table(engine))

    opts = RolloutOptions(**(options or {}))
    with open_history(settings(ctx).db) as history:
        engine = RolloutEngine(backend, sched, history, m, now=_now, sleep=sleep,
                               options=opts, on_progress=progress)
        made.append(engine)
        if console.is_terminal:
            live = Live(console=console, refresh_per_second=5, transient=False)
            live.start()
        try:
            result = action(engine)
        finally:
            if live is not None:
                live.update(_wave_table(engine))
                live.stop()
        left = _skipped_unreachable(history, result.rollout_id)
    if live is None and result.rollout_id is not None:
        console.print(_wave_table(engine))
    doc = {**result.as_dict(), "source": source, "unreachable": left}
    if json_out:
        emit_json(doc)
    console.print(f"rollout {result.rollout_id}: [bold]{result.status}[/bold]"
                  + (f": {esc(result.reason)}" if result.reason else ""), soft_wrap=True)
    if result.status in ("rolled_back", "aborted", "failed"):
        raise ProblemsFound(f"rollout {result.rollout_id} {result.status}")
    from fleet.errors import CouldNotComplete

    if result.status in ("paused", "aborting", "running", "rolling_back"):
        raise CouldNotComplete(f"rollout {result.rollout_id} is {result.status}: "
                               f"`fleet rollout promote|abort|resume {result.rollout_id}`")
    if left:
        from fleet.domain.selection import known

        raise CouldNotComplete(f"rollout {result.rollout_id} {result.status} without "
                               f"{len(left)} unreachable host(s), still on whatever they ran: "
                               f"{known(left)}")


def _skipped_unreachable(history: Any, rollout_id: int | None) -> list[str]:
    """The hosts a rollout's plan skipped because they could not be reached."""
    from fleet.domain.plan import UNREACHABLE
    from fleet.history.rollouts import start_data

    if rollout_id is None:
        return []
    plan = start_data(history, rollout_id).get("plan") or {}
    return [h for p in plan.get("pools") or [] for h, why in (p.get("skipped") or {}).items()
            if why == UNREACHABLE]


@app.command("start")
def start_cmd(
    ctx: typer.Context,
    matrix: MatrixOpt,
    inventory: InventoryOpt = None,
    sim: SimOpt = None,
    sim_spec: SimSpecOpt = None,
    seed: SeedOpt = 0,
    sim_faults: Annotated[str | None, typer.Option(
        "--sim-faults", help="Fault rates of the simulated fleet: NAME=RATE,... (apply_fail, "
                             "unreachable, xid_after_upgrade, slow, reboot_hangs, drained).",
    )] = None,
    sim_slow: Annotated[list[str] | None, typer.Option(
        "--sim-slow", help="RELEASE=FACTOR: the release runs at FACTOR speed (0.8 = 20% "
                           "slower) on every simulated host; repeatable.")] = None,
    sim_state: Annotated[Path | None, typer.Option(
        "--sim-state", help="Where the simulated fleet's state is kept between commands "
                            "(default: <db>.sim.json).")] = None,
    pool: PoolOpt = None,
    release: Annotated[str | None, typer.Option(
        "--release", "-r", help="Target release (default: each pool's golden release).")] = None,
    scheduler: SchedulerOpt = None,
    rollback_scope: Annotated[str, typer.Option(
        "--rollback-scope", help="On a failed wave roll back: wave (its hosts) or all (every "
                                 "host moved so far in the pool).")] = "wave",
    json_out: JsonFlag = False,
) -> None:
    """Start a rollout: canary pools first, then waves, each drained, pinned, rebooted,
    health-checked, benchmarked against a baseline, baked and undrained.

    Exit 0 completed; 1 rolled back (a gate failed); 3 paused (inconclusive: promote or abort
    it), lock held by another rollout, or could not complete. See docs/rollouts.md.
    """
    from fleet.cli.app import settings
    from fleet.domain.matrix.loader import load_matrix
    from fleet.domain.selection import release_problem

    sources = [s for s in (inventory, sim, sim_spec) if s is not None]
    if len(sources) != 1:
        raise BadInput.single("give exactly one of --inventory, --sim N or --sim-spec FILE",
                              field="--inventory/--sim")
    if rollback_scope not in ("wave", "all"):
        raise BadInput.single("expected wave or all", field="--rollback-scope")
    if inventory is not None and (sim_faults or sim_slow or sim_state):
        raise BadInput.single("--sim-faults, --sim-slow and --sim-state go with --sim N",
                              field="--sim-faults")
    _check_scheduler(scheduler, sim=inventory is None)
    m = load_matrix(matrix, today=datetime.now(UTC).date()).matrix
    if (why := release_problem(release, m)) is not None:
        raise BadInput.single(why, field="--release")
    source: dict[str, Any]
    build: dict[str, Any] | None = None
    if inventory is not None:
        # absolute paths: resume, promote and abort may run from another directory
        source = {"source": "inventory", "inventory": str(inventory.absolute()),
                  "scheduler": scheduler}
    else:
        db = settings(ctx).db
        state = sim_state or Path((db if "://" not in db else "fleet.db") + ".sim.json")
        build = _sim_build(m, sim, seed, sim_spec, sim_faults, sim_slow)
        source = {"source": "sim", "sim_state": str(state.absolute()), "build": build}

    def action(engine: Any) -> Any:
        _check_pools(pool, list(engine.refs.values()), m)
        fleet = engine.backend._target if isinstance(engine.backend, _Saving) else None
        releases: dict[str, str | None] = {}
        unreachable: list[str] = []
        if fleet is not None:
            releases = fleet.releases_by_host()
            unreachable = fleet.unreachable_hosts()
        else:
            names = list(engine.refs)
            releases, _, unreachable = _from_history(settings(ctx).db, names)
        return engine.start(matrix_path=str(matrix.absolute()), pools=pool or None,
                            release=release,
                            releases=releases, unreachable=unreachable,
                            start_data={"source": source})

    _drive(ctx, str(matrix), source, json_out, action, create=True, build=build,
           options={"rollback_scope": rollback_scope}, matrix=m)


def _recorded(ctx: typer.Context, rollout_id: int) -> tuple[str, dict[str, Any]]:
    from fleet.cli.app import settings
    from fleet.history import open_history
    from fleet.history.rollouts import get_rollout, start_data

    with open_history(settings(ctx).db, create=False) as history:
        ro = get_rollout(history, rollout_id)
        if ro is None:
            raise _no_rollout(history, rollout_id)
        data = start_data(history, rollout_id)
    source = data.get("source") or {}
    if not source:
        raise BadInput.single(f"rollout {rollout_id} did not record how to reach its hosts",
                              field="ID")
    return ro.matrix_path, source


def _no_rollout(history: Any, rollout_id: int | None) -> BadInput:
    """An unknown rollout id, with the ids the history has."""
    from fleet.history.rollouts import list_rollouts

    ids = [str(r.id) for r in list_rollouts(history, limit=20)]
    if not ids:
        return BadInput.single("no rollout in the history yet", field="ID")
    return BadInput.single(f"no rollout {rollout_id} in the history (rollouts, newest first: "
                           f"{', '.join(ids)}{' ...' if len(ids) == 20 else ''})", field="ID")


def _options(ctx: typer.Context, rollout_id: int) -> dict[str, Any]:
    from fleet.cli.app import settings
    from fleet.history import open_history
    from fleet.history.rollouts import start_data

    with open_history(settings(ctx).db, create=False) as history:
        opts = start_data(history, rollout_id).get("options") or {}
    return {k: v for k, v in opts.items() if k in ("rollback_scope", "stale_after_s",
                                                  "bench_hosts")}


@app.command("resume")
def resume_cmd(ctx: typer.Context, rollout_id: Annotated[int, typer.Argument(metavar="ID")],
               force: ForceOpt = False, json_out: JsonFlag = False) -> None:
    """Continue a rollout whose controller stopped (killed, crashed); a paused one stays paused."""
    mpath, source = _recorded(ctx, rollout_id)
    _drive(ctx, mpath, source, json_out, lambda e: e.resume(rollout_id, force=force),
           options=_options(ctx, rollout_id), rollout_id=rollout_id)


@app.command("promote")
def promote_cmd(ctx: typer.Context, rollout_id: Annotated[int, typer.Argument(metavar="ID")],
                reason: ReasonOpt = None, force: ForceOpt = False,
                json_out: JsonFlag = False) -> None:
    """Pass the paused (inconclusive) wave by hand and continue the rollout."""
    mpath, source = _recorded(ctx, rollout_id)
    _drive(ctx, mpath, source, json_out,
           lambda e: e.promote(rollout_id, force=force, reason=reason),
           options=_options(ctx, rollout_id), rollout_id=rollout_id)


@app.command("abort")
def abort_cmd(ctx: typer.Context, rollout_id: Annotated[int, typer.Argument(metavar="ID")],
              reason: ReasonOpt = None, force: ForceOpt = False,
              json_out: JsonFlag = False) -> None:
    """Roll back the current wave (or all moved hosts, per the rollout's scope) and stop."""
    mpath, source = _recorded(ctx, rollout_id)
    _drive(ctx, mpath, source, json_out,
           lambda e: e.abort(rollout_id, force=force, reason=reason),
           options=_options(ctx, rollout_id), rollout_id=rollout_id)


def _rollout_doc(history: Any, ro: Any, *, hosts: bool = False) -> dict[str, Any]:
    from fleet.domain.gates import count_states
    from fleet.history.rollouts import load_steps, load_waves, scope_pools

    waves = load_waves(history, ro.id)
    steps = load_steps(history, ro.id)
    by_wave: dict[int, list[Any]] = {}
    for s in steps:
        by_wave.setdefault(s.wave_id, []).append(s)
    doc = {
        "id": ro.id, "status": ro.status, "release": ro.release,
        "pools": scope_pools(ro.scope), "matrix": ro.matrix_path, "started_by": ro.started_by,
        "started_at": ro.started_at, "ended_at": ro.ended_at,
        "lock": ({"owner": ro.lock_owner, "pid": ro.lock_pid, "heartbeat": ro.lock_heartbeat}
                 if ro.lock_owner else None),
        "hosts": count_states(s.state for s in steps),
        "waves": [{**w.as_dict(), "hosts": len(by_wave.get(w.id, [])),
                   "states": count_states(s.state for s in by_wave.get(w.id, []))}
                  for w in waves],
    }
    doc["waiting"] = _waiting(steps)
    if hosts:
        doc["host_steps"] = [s.as_dict() for s in steps]
    return doc


def _waiting(steps: Any) -> list[dict[str, Any]]:
    """Hosts whose drain waits for their jobs: who waits for what, since when."""
    out = []
    for s in steps:
        w = (s.detail or {}).get("waiting_for")
        if s.state == "draining" and w:
            out.append({"host": s.host, "jobs": list(w.get("jobs") or []),
                        "waited_s": w.get("waited_s"), "since": s.detail.get("drain_since"),
                        "timed_out": bool(s.detail.get("drain_timed_out"))})
    return out


def _waiting_lines(waiting: list[dict[str, Any]]) -> list[str]:
    from fleet.domain.drain import describe_jobs

    return [f"  {w['host']}: {'timed out on' if w['timed_out'] else 'waiting for'} "
            f"{describe_jobs(w['jobs'])} ({w['waited_s']} s)" for w in waiting]


@app.command("status")
def status_cmd(ctx: typer.Context,
               rollout_id: Annotated[int | None, typer.Argument(metavar="[ID]")] = None,
               hosts: Annotated[bool, typer.Option("--hosts", help="Every host's step.")] = False,
               json_out: JsonFlag = False) -> None:
    """A rollout's waves, host states and lock (the newest one by default)."""
    from fleet.cli.app import settings
    from fleet.history import open_history
    from fleet.history.rollouts import get_rollout, list_rollouts

    with open_history(settings(ctx).db, create=False) as history:
        ro = (get_rollout(history, rollout_id) if rollout_id is not None
              else next(iter(list_rollouts(history, limit=1)), None))
        if ro is None:
            raise _no_rollout(history, rollout_id)
        doc = _rollout_doc(history, ro, hosts=hosts)
    if json_out:
        emit_json(doc)
        return
    console.print(f"rollout {doc['id']}: [bold]{doc['status']}[/bold] of "
                  + esc(f"{', '.join(doc['pools'])} to {doc['release']} (by {doc['started_by']})"))
    if doc["lock"]:
        console.print(f"  lock: {esc(doc['lock']['owner'])} pid {doc['lock']['pid']}, heartbeat "
                      f"{doc['lock']['heartbeat']}")
    t = Table("wave", "pool", "hosts", "status", "verdict", "host states", box=None)
    for w in doc["waves"]:
        t.add_row(str(w["index"]), esc(w["pool"]), str(w["hosts"]), w["status"],
                  w["verdict"] or "",
                  ", ".join(f"{n} {s}" for s, n in w["states"].items()))
    console.print(t)
    for line in _waiting_lines(doc["waiting"]):
        console.print(line, markup=False, highlight=False)


@app.command("history")
def history_cmd(ctx: typer.Context,
                limit: Annotated[int, typer.Option("--limit", min=1)] = 20,
                json_out: JsonFlag = False) -> None:
    """Past and current rollouts, newest first."""
    from fleet.cli.app import settings
    from fleet.history import open_history
    from fleet.history.rollouts import list_rollouts, scope_pools

    with open_history(settings(ctx).db, create=False) as history:
        rows = list_rollouts(history, limit=limit)
    docs: list[dict[str, Any]] = [{"id": r.id, "status": r.status, "release": r.release,
             "pools": scope_pools(r.scope), "started_by": r.started_by,
             "started_at": r.started_at, "ended_at": r.ended_at} for r in rows]
    if json_out:
        emit_json({"rollouts": docs})
        return
    t = Table("id", "status", "pools", "release", "started", "ended", "by", box=None)
    for d in docs:
        t.add_row(str(d["id"]), d["status"], esc(", ".join(d["pools"])), esc(d["release"]),
                  d["started_at"].isoformat(timespec="seconds"),
                  d["ended_at"].isoformat(timespec="seconds") if d["ended_at"] else "",
                  d["started_by"])
    console.print(t)
