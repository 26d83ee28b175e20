"""`fleet rollout status|history`: what the history records of rollouts; reads only."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from fleet.cli.output import emit_json, esc
from fleet.cli.output import stdout as console
from fleet.cli.rollout.common import JsonFlag, no_rollout, step_reason
from fleet.cli.rollout.drive import waiting, waiting_lines
from fleet.cli.rollout.group import app
from fleet.cli.rollout.split import fleet_prefix, splits, warn_splits
from fleet.cli.table import Grid, OutputOpt, show, wants_json


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
    from fleet.history.rollouts import start_data

    recorded = (start_data(history, ro.id).get("plan") or {}).get("pools") or []
    doc["plan_notes"] = {p["pool"]: list(p.get("notes") or []) for p in recorded
                         if p.get("notes")}
    if hosts:
        index = {w.id: w.index for w in waves}
        doc["host_steps"] = [{**s.as_dict(), "wave": index.get(s.wave_id)} for s in steps]
    return doc


def _advice(history: Any, ro: Any, doc: dict[str, Any], db: str) -> dict[str, Any]:
    """Why the rollout stands where it stands, and the commands to type next."""
    from datetime import UTC, datetime

    from fleet.domain.rollout_advice import Seen, advise
    from fleet.history.rollouts import rollout_events, start_data

    kinds = ("rollout.pause", "rollout.end", "rollout.rollback", "rollout.abort")
    events = [(e.kind, e.message, dict(e.data or {})) for e in rollout_events(history, ro.id)
              if e.kind in kinds]
    stale = (start_data(history, ro.id).get("options") or {}).get("stale_after_s") or 300.0
    seen = Seen(ro.id, ro.status, events, lock_owner=ro.lock_owner,
                lock_heartbeat=ro.lock_heartbeat, stale_after_s=float(stale),
                stopped_pools=list(dict.fromkeys(
                    w["pool"] for w in doc["waves"] if w["status"] in ("failed", "rolled_back"))),
                pools=doc["pools"])
    return advise(seen, fleet=fleet_prefix(db), now=datetime.now(UTC)).as_dict()


def _hosts_grid(doc: dict[str, Any]) -> Any:
    grid = Grid(("host", "pool", "wave", "state", "from", "to", "why"), prose=("why",))
    for s in doc["host_steps"]:
        grid.add_row(esc(s["host"]), esc(s["pool"]), str(s["wave"] or ""), s["state"],
                     esc(s["from_release"] or "-"), esc(s["to_release"] or "-"),
                     esc(step_reason(s)))
    return grid


@app.command("status")
def status_cmd(ctx: typer.Context,
               rollout_id: Annotated[int | None, typer.Argument(metavar="[ID]")] = None,
               hosts: Annotated[bool, typer.Option("--hosts", help="Every host's step.")] = False,
               json_out: JsonFlag = False, output: OutputOpt = None) -> None:
    """A rollout's waves, host states and lock (the newest one by default), why it paused,
    failed or rolled back, and the commands to type next; --hosts adds every host's step
    (state, releases, and the reason where one was recorded)."""
    from fleet.cli.app import settings
    from fleet.history import open_history
    from fleet.history.rollouts import get_rollout, list_rollouts

    with open_history(settings(ctx).db, create=False) as history:
        ro = (get_rollout(history, rollout_id) if rollout_id is not None
              else next(iter(list_rollouts(history, limit=1)), None))
        if ro is None:
            raise no_rollout(history, rollout_id)
        doc = _rollout_doc(history, ro, hosts=hosts)
        doc.update(_advice(history, ro, doc, settings(ctx).db))
        doc["split"] = (splits(history, doc["id"], fleet=fleet_prefix(settings(ctx).db))
                        if ro.status in ("aborted", "rolled_back", "failed") else [])
    if wants_json(json_out, output):
        emit_json(doc)
        return
    console.print(f"rollout {doc['id']}: [bold]{doc['status']}[/bold] of "
                  + esc(f"{', '.join(doc['pools'])} to {doc['release']} (by {doc['started_by']})"))
    if doc["lock"]:
        console.print(f"  lock: {esc(doc['lock']['owner'])} pid {doc['lock']['pid']}, heartbeat "
                      f"{doc['lock']['heartbeat']}")
    t = Grid(("wave", "pool", "hosts", "status", "verdict", "host states"))
    for w in doc["waves"]:
        t.add_row(str(w["index"]), esc(w["pool"]), str(w["hosts"]), w["status"],
                  w["verdict"] or "",
                  ", ".join(f"{n} {s}" for s, n in w["states"].items()))
    show(t, output)
    for line in waiting_lines(doc["waiting"]):
        console.print(line, markup=False, highlight=False)
    for pool, notes in doc["plan_notes"].items():  # capped waves, units moving short
        for note in notes:
            console.print(f"  note: {pool}: {note}", markup=False, highlight=False,
                          soft_wrap=True)
    if hosts:
        show(_hosts_grid(doc), output)
    warn_splits(doc["split"])
    if doc["reason"]:
        console.print(f"why: {doc['reason']}", markup=False, highlight=False, soft_wrap=True)
    if doc["next"]:
        console.print("next:", markup=False)
        for step in doc["next"]:
            console.print(f"  $ {step['command']}    # {step['does']}", markup=False,
                          highlight=False, soft_wrap=True)


@app.command("history")
def history_cmd(ctx: typer.Context,
                last: Annotated[int, typer.Option(
                    "--last", "-n", min=1, help="How many, newest first.")] = 20,
                json_out: JsonFlag = False,
                old_limit: Annotated[int | None, typer.Option(
                    "--limit", min=1, hidden=True, help="Old spelling of --last.")] = None,
                output: OutputOpt = None) -> None:
    """Past and current rollouts, newest first."""
    from fleet.cli.app import settings
    from fleet.history import open_history
    from fleet.history.rollouts import list_rollouts, scope_pools

    with open_history(settings(ctx).db, create=False) as history:
        rows = list_rollouts(history, limit=old_limit or last)
    docs: list[dict[str, Any]] = [{"id": r.id, "status": r.status, "release": r.release,
             "pools": scope_pools(r.scope), "started_by": r.started_by,
             "started_at": r.started_at, "ended_at": r.ended_at} for r in rows]
    if wants_json(json_out, output):
        emit_json({"rollouts": docs})
        return
    t = Grid(("id", "status", "pools", "release", "started", "ended", "by"))
    for d in docs:
        t.add_row(str(d["id"]), d["status"], esc(", ".join(d["pools"])), esc(d["release"]),
                  d["started_at"].isoformat(timespec="seconds"),
                  d["ended_at"].isoformat(timespec="seconds") if d["ended_at"] else "",
                  d["started_by"])
    show(t, output)
