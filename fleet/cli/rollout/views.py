"""`fleet rollout status|history`: what the history records of rollouts; reads only."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from fleet.cli.output import console, emit_json, esc
from fleet.cli.rollout.common import JsonFlag, no_rollout
from fleet.cli.rollout.drive import waiting, waiting_lines
from fleet.cli.rollout.group import app


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
    doc["waiting"] = waiting(steps)
    if hosts:
        doc["host_steps"] = [s.as_dict() for s in steps]
    return doc


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
            raise no_rollout(history, rollout_id)
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
    for line in waiting_lines(doc["waiting"]):
        console.print(line, markup=False, highlight=False)


@app.command("history")
def history_cmd(ctx: typer.Context,
                last: Annotated[int, typer.Option(
                    "--last", "-n", min=1, help="How many, newest first.")] = 20,
                json_out: JsonFlag = False,
                old_limit: Annotated[int | None, typer.Option(
                    "--limit", min=1, hidden=True, help="Old spelling of --last.")] = None,
                ) -> None:
    """Past and current rollouts, newest first."""
    from fleet.cli.app import settings
    from fleet.history import open_history
    from fleet.history.rollouts import list_rollouts, scope_pools

    with open_history(settings(ctx).db, create=False) as history:
        rows = list_rollouts(history, limit=old_limit or last)
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
