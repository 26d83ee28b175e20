"""`fleet rollout start`: check every option, then drive a new rollout."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from fleet.cli.rollout.common import (
    InventoryOpt,
    JsonFlag,
    LimitOpt,
    MatrixOpt,
    PoolOpt,
    PrometheusOpt,
    SchedulerOpt,
    SeedOpt,
    SimOpt,
    SimSpecOpt,
    check_pools,
    check_scheduler,
    from_history,
    selected_pools,
)
from fleet.cli.rollout.drive import drive
from fleet.cli.rollout.group import app
from fleet.cli.rollout.wiring import RATE_NAMES, Saving, reuse_sim_state, say_where, sim_build
from fleet.errors import BadInput


@app.command("start")
def start_cmd(
    ctx: typer.Context,
    matrix: MatrixOpt,
    inventory: InventoryOpt = None,
    sim: SimOpt = None,
    sim_spec: SimSpecOpt = None,
    seed: SeedOpt = 0,
    sim_faults: Annotated[str | None, typer.Option(
        "--sim-faults", help="Fault rates of the simulated fleet: NAME=RATE,... ("
                             + ", ".join(RATE_NAMES) + ").",
    )] = None,
    sim_slow: Annotated[list[str] | None, typer.Option(
        "--sim-slow", metavar="RELEASE=FACTOR",
        help="RELEASE=FACTOR: the release runs at FACTOR speed (0.8 = 20% slower) on every "
             "simulated host; repeatable.")] = None,
    sim_state: Annotated[Path | None, typer.Option(
        "--sim-state", help="Where the simulated fleet's state is kept between commands "
                            "(default: <db>.sim.json). A start finding one there built from "
                            "the same --sim options goes on with that fleet.")] = None,
    limit: LimitOpt = None,
    pool: PoolOpt = None,
    release: Annotated[str | None, typer.Option(
        "--release", "-r", help="Target release (default: each pool's golden release).")] = None,
    scheduler: SchedulerOpt = None,
    prometheus: PrometheusOpt = None,
    rollback_scope: Annotated[Literal["wave", "all"], typer.Option(
        "--rollback-scope", help="On a failed wave roll back: wave (its hosts) or all (every "
                                 "host moved so far in the pool).")] = "wave",
    dry: Annotated[bool, typer.Option(
        "--dry", help="Print the plan and what the first wave would do (each host's package, "
        "hold and pin-file changes, drain, reboot), reading the hosts; records, locks, drains "
        "and changes nothing.")] = False,
    json_out: JsonFlag = False,
) -> None:
    """Start a rollout: canary pools first, then waves, each drained, pinned, rebooted,
    health-checked, benchmarked against a baseline, baked and undrained.

    Exit 0 completed; 1 rolled back (a gate failed); 3 paused (inconclusive: promote or abort
    it; a drain timeout: keep-waiting or abort), lock held by another rollout, or could not
    complete. With --dry: 0 when everything
    could be computed, 3 when a host could not be read or a pool is held by another rollout,
    1 when nothing can move (max_unavailable used up). See docs/rollouts.md.
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
    check_scheduler(scheduler, sim=inventory is None)
    named = selected_pools(limit, pool)
    pool = list(dict.fromkeys(p for _, p in named))
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
        build = sim_build(m, sim, seed, sim_spec, sim_faults, sim_slow)
        why_new = reuse_sim_state(state, m, build, db)
        source = {"source": "sim", "sim_state": str(state.absolute()), "build": build,
                  "reused": why_new is None}
        if why_new is not None:
            source["new_because"] = why_new
        say_where(db, source, dry=dry)
    if prometheus is not None:  # recorded: resume and promote ask the same server
        from fleet.prometheus.config import check_url

        source["prometheus"] = check_url(prometheus, "--prometheus")
    if dry:
        from fleet.cli.rollout.dry import start_dry

        start_dry(ctx, m, source, build, pools=named, release=release, json_out=json_out)
        return

    def action(engine: Any) -> Any:
        check_pools(named, list(engine.refs.values()), m)
        raw = engine.unfenced_backend
        fleet = raw._target if isinstance(raw, Saving) else None
        releases: dict[str, str | None] = {}
        unreachable: list[str] = []
        if fleet is not None:
            releases = fleet.releases_by_host()
            unreachable = fleet.unreachable_hosts()
        else:
            names = list(engine.refs)
            seen = from_history(settings(ctx).db, names)
            releases, unreachable = seen.releases, seen.unreachable
        return engine.start(matrix_path=str(matrix.absolute()), pools=pool or None,
                            release=release,
                            releases=releases, unreachable=unreachable,
                            start_data={"source": source})

    drive(ctx, str(matrix), source, json_out, action, create=True, build=build,
          options={"rollback_scope": rollback_scope}, matrix=m)
