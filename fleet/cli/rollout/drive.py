"""Running one rollout engine operation (start, resume, promote, abort) with a live wave table,
then reporting and exiting by its outcome."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from fleet.cli.output import console, emit_json, esc, stdout
from fleet.cli.rollout.common import now, step_reason
from fleet.cli.rollout.split import warn_splits
from fleet.cli.rollout.wiring import wiring
from fleet.cli.table import Grid, renderable, show
from fleet.errors import ProblemsFound

if TYPE_CHECKING:  # pydantic models: imported by the commands that load a matrix
    from fleet.domain.matrix.models import Matrix


def wave_grid(engine: Any) -> Grid:
    t = Grid(("wave", "pool", "hosts", "status", "verdict", "host states", "gate"),
             title=f"rollout {engine.rid}")
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
    return t


def wave_table(engine: Any) -> Any:
    """The live view of the waves (stderr, on a terminal), with the hosts whose drain waits."""
    from rich.console import Group
    from rich.text import Text

    lines = waiting_lines(waiting(engine.steps.values()))
    return Group(renderable(wave_grid(engine)), *(Text(line) for line in lines))


def show_waves(engine: Any) -> None:
    """The waves as the operation left them: a result, on stdout."""
    show(wave_grid(engine))
    for line in waiting_lines(waiting(engine.steps.values())):
        stdout.print(line, markup=False, highlight=False)


def drive(ctx: typer.Context, matrix_path: str, source: dict[str, Any], json_out: bool,
          action: Any, *, create: bool = False, build: dict[str, Any] | None = None,
          options: dict[str, Any] | None = None, rollout_id: int | None = None,
          matrix: Matrix | None = None, prometheus: str | None = None) -> None:
    """Run one engine operation with the live display, then report and exit by outcome.

    A rollout that completed while its plan skipped unreachable hosts did not do all it was
    asked: exit 3 naming them (they still run what they ran, whatever that is). So is one with
    nothing to move unless every host runs its target already (hosts drained by someone else,
    quarantined, or none in scope: exit 3 with the reason)."""
    import time as _time

    from rich.live import Live

    from fleet.cli.app import settings
    from fleet.domain.matrix.loader import load_matrix
    from fleet.history import open_history
    from fleet.jobs.rollout import RolloutEngine, RolloutOptions
    from fleet.jobs.rollout.startplan import all_on_target

    m = matrix or load_matrix(Path(matrix_path), today=datetime.now(UTC).date()).matrix
    made: list[Any] = []
    backend, sched, sleep = wiring(m, source, create=create, build=build,
                                   rollout_id=rollout_id,
                                   owner=lambda: made[0].rid if made else rollout_id)
    live: Live | None = None
    last = [0.0]

    def progress(engine: Any) -> None:
        if live is not None and _time.monotonic() - last[0] > 0.2:
            last[0] = _time.monotonic()
            live.update(wave_table(engine))

    opts = RolloutOptions(**(options or {}))
    with open_history(settings(ctx).db) as history:
        engine = RolloutEngine(backend, sched, history, m, now=now, sleep=sleep,
                               options=opts, on_progress=progress)
        made.append(engine)
        engine.opts.live_source = _live_source(m, prometheus or source.get("prometheus"),
                                               engine.refs.values())
        if console.is_terminal:
            live = Live(console=console, refresh_per_second=5, transient=True)
            live.start()
        try:
            result = action(engine)
        finally:
            if live is not None:
                live.stop()
        left = _skipped_unreachable(history, result.rollout_id)
        failed = _failed_hosts(history, result.rollout_id)
        split = _split(history, result, settings(ctx).db)
    if result.rollout_id is not None:  # the live view was progress, and is gone
        show_waves(engine)
    doc = {**result.as_dict(), "source": source, "unreachable": left, "split": split,
           "failed_hosts": failed}
    if json_out:
        emit_json(doc)
    # a start with nothing to do records no rollout: say so instead of "rollout None"
    label = "no rollout" if result.rollout_id is None else f"rollout {result.rollout_id}"
    stdout.print(f"{label}: [bold]{result.status}[/bold]"
                  + (f": {esc(result.reason)}" if result.reason else ""), soft_wrap=True)
    warn_splits(split)
    if result.status in ("rolled_back", "aborted", "failed"):
        raise ProblemsFound(f"rollout {result.rollout_id} {result.status}")
    from fleet.errors import CouldNotComplete

    if result.status in ("paused", "aborting", "running", "rolling_back"):
        raise CouldNotComplete(f"rollout {result.rollout_id} is {result.status}: "
                               f"`fleet rollout promote|keep-waiting|abort|resume "
                               f"{result.rollout_id}`")
    if result.status == "nothing" and (result.plan is None or not all_on_target(result.plan)):
        # no host moved, and not because all are done: skipped hosts are not "all fine"
        raise CouldNotComplete(f"no rollout: {result.reason}")
    if left:
        from fleet.domain.selection import known

        raise CouldNotComplete(f"rollout {result.rollout_id} {result.status} without "
                               f"{len(left)} unreachable host(s), still on whatever they ran: "
                               f"{known(left)}")


def _live_source(m: Matrix, url: str | None, refs: Any) -> Any:
    """The Prometheus source of the live gate, where a pool enables it and a server is named
    (`--prometheus`, FLEET_PROMETHEUS_URL, inventory data `prometheus_url`); else None, and
    such a pool's live gate could not measure (it pauses)."""
    if not any(p.rollout.gates.live.enabled for p in m.pools.values()):
        return None
    from fleet.prometheus import PrometheusSource, resolve

    target = resolve(url, [r.data for r in refs])
    return PrometheusSource(target) if target is not None else None


def _split(history: Any, result: Any, db: str) -> list[dict[str, Any]]:
    """An aborted or rolled-back rollout that leaves a pool on two releases (a paused canary's
    earlier waves stay moved): the hosts on each, and the commands to make it whole."""
    from fleet.cli.rollout.split import fleet_prefix, splits

    if result.rollout_id is None or result.status not in ("aborted", "rolled_back", "failed"):
        return []
    return splits(history, result.rollout_id, fleet=fleet_prefix(db))


def _failed_hosts(history: Any, rollout_id: int | None) -> list[dict[str, Any]]:
    """Each host whose step failed, with the step and the error the engine recorded: what a
    script needs from `rollout start --json` without a second `rollout status --hosts`."""
    from fleet.history.rollouts import load_steps

    if rollout_id is None:
        return []
    return [{"host": s.host, "pool": s.pool, "state": s.state, "why": step_reason(s.as_dict())}
            for s in load_steps(history, rollout_id)
            if s.state == "failed" or (s.detail or {}).get("error")]


def _skipped_unreachable(history: Any, rollout_id: int | None) -> list[str]:
    """The hosts a rollout's plan skipped because they could not be reached."""
    from fleet.domain.plan import UNREACHABLE
    from fleet.history.rollouts import start_data

    if rollout_id is None:
        return []
    plan = start_data(history, rollout_id).get("plan") or {}
    return [h for p in plan.get("pools") or [] for h, why in (p.get("skipped") or {}).items()
            if why == UNREACHABLE]


def waiting(steps: Any) -> list[dict[str, Any]]:
    """Hosts whose drain waits for their jobs: who waits for what, since when."""
    out = []
    for s in steps:
        w = (s.detail or {}).get("waiting_for")
        if s.state == "draining" and w:
            out.append({"host": s.host, "jobs": list(w.get("jobs") or []),
                        "waited_s": w.get("waited_s"), "since": s.detail.get("drain_since"),
                        "timed_out": bool(s.detail.get("drain_timed_out"))})
    return out


def waiting_lines(waiting: list[dict[str, Any]]) -> list[str]:
    from fleet.domain.drain import describe_jobs

    return [f"  {w['host']}: {'timed out on' if w['timed_out'] else 'waiting for'} "
            f"{describe_jobs(w['jobs'])} ({w['waited_s']} s)" for w in waiting]
