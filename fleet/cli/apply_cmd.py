"""`fleet apply` and `fleet rollback`: pin a release onto hosts, verified."""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fleet.cli.output import console, emit_json, esc, stdout
from fleet.cli.selection import HostAlias, Limit, PoolAlias
from fleet.cli.table import Grid, OutputOpt, show, wants_json
from fleet.errors import BadInput, CouldNotComplete, ProblemsFound

if TYPE_CHECKING:
    from fleet.history import History

Inventory = Annotated[Path, typer.Option("--inventory", "-i", envvar="FLEET_INVENTORY",
                                         help="pyinfra inventory file.")]
MatrixOpt = Annotated[Path, typer.Option("--matrix", "-m", envvar="FLEET_MATRIX",
                                         help="Version matrix (matrices/*.yaml).")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]
Force = Annotated[bool, typer.Option(
    "--force", help="Pin hosts of a pool that an unfinished rollout covers (recorded): the "
    "rollout is paused and its controller, wherever it runs, stops at its next step.")]

SchedulerOpt = Annotated[str | None, typer.Option(
    "--scheduler", help="Drain hosts through none, slurm or kubernetes before they change "
    "(default: the inventory's `scheduler` host data, else none).")]
NoDrain = Annotated[bool, typer.Option(
    "--no-drain", help="Change hosts without draining them first: running jobs may die in the "
    "reboot. Recorded in the event log with the reason.")]
Serial = Annotated[int, typer.Option(
    "--serial", min=0, max=100000,
    help="At most this many hosts drained and changed at a time (0: all at once).")]

_STYLE = {"changed": "green", "unchanged": "dim", "would_change": "cyan", "failed": "red",
          "unreachable": "red", "refused": "yellow"}


def _now() -> datetime:
    return datetime.now(UTC)


def _read_only_history(db: str) -> AbstractContextManager[History | None]:
    """The history a dry run reads (active rollouts, known-good releases), never created: no
    history file yet means nothing is known (None)."""
    from fleet.history import open_history

    if "://" not in db and not Path(db).exists():
        return nullcontext(None)
    return open_history(db, create=False)


def _summary(r: Any) -> str:
    """The changes column: package changes as before; a dry run counts every kind; the node
    settings the pool's profile wants changed (issue 23)."""
    node = r.node.plan if r.node is not None else None
    steps = [f"{len(node.steps)} node setting(s)"] if node is not None and node.steps else []
    if r.node is not None and r.node.boot_state in ("missing", "stale", "obsolete"):
        steps.append(f"boot unit ({r.node.boot_state})")
    if r.change is None or r.outcome != "would_change":
        return ", ".join([*(str(c) for c in r.changes), *steps]) or "-"
    c = r.change
    parts = [f"{n} {what}" for n, what in ((len(c.packages), "package(s)"),
                                           (len(c.holds), "hold(s)"),
                                           (len(c.files), "pin file(s)")) if n]
    reboot = c.reboot or (node is not None and node.reboot)
    return ", ".join(parts + steps + (["reboot"] if reboot else [])) or "-"


def _report(results: list, json_out: bool, extra: dict | None = None,  # type: ignore[type-arg]
            *, dry: bool = False, output: str | None = None) -> None:
    if wants_json(json_out, output):
        emit_json({**(extra or {}), "hosts": [r.as_dict() for r in results]})
        return
    t = Grid(("host", "pool", "from", "to", "outcome", "changes", "note"),
             prose=("changes", "note"))
    for r in results:
        style = _STYLE.get(r.outcome, "")
        note = r.error or ("reboot" if r.rebooted else "")
        if not r.error and r.node is not None and r.outcome == "unchanged":
            note = (f"node state as profile {r.node.profile}" if not r.node.plan.unknown
                    else f"node state: {len(r.node.plan.unknown)} value(s) unread, left alone")
        if r.left_drained:
            note += " (left drained)"
        t.add_row(esc(r.host), esc(r.pool or ""), esc(r.from_release or "?"), esc(r.to_release),
                  f"[{style}]{r.outcome}[/]", esc(_summary(r)), esc(note))
    show(t, output)
    if dry:
        _print_dry(results)


def _print_dry(results: list) -> None:  # type: ignore[type-arg]
    """Each changing host's package, hold and pin-file changes, one per line."""
    for r in results:
        if r.change is None or r.outcome != "would_change":
            continue
        drain = f", drained through {r.drain_through} first" if r.drain_through else ""
        stdout.print(f"\n{r.host}: {r.from_release or 'unknown release'} -> "
                      f"{r.to_release}{drain}", markup=False, highlight=False)
        for line in [*r.change.lines(), *(r.node.lines() if r.node is not None else [])]:
            stdout.print(f"  {line}", markup=False, highlight=False)
    stdout.print("\ndry run: nothing was changed, drained or recorded", markup=False)


def _exit(results: list, *, dry: bool = False) -> None:  # type: ignore[type-arg]
    """Exit by outcome (docs/exit-codes.md). A dry run that could not read a host (unreachable,
    or its packages unreadable) is incomplete: it never says a host it could not read has
    nothing to change."""
    unreachable = [r.host for r in results if r.outcome == "unreachable"]
    failed = [r.host for r in results if r.outcome in ("failed", "refused")]
    if dry:
        unread = unreachable + [r.host for r in results if r.outcome == "failed"]
        refused = [r.host for r in results if r.outcome == "refused"]
        if unread:
            raise CouldNotComplete(f"dry run: could not read {', '.join(unread)}; what would "
                                   "change there is unknown")
        if refused:
            raise ProblemsFound(f"dry run: would be refused: {', '.join(refused)}")
        return
    if unreachable:
        raise CouldNotComplete(f"unreachable: {', '.join(unreachable)}"
                               + (f"; failed: {', '.join(failed)}" if failed else ""))
    if failed:
        raise ProblemsFound(f"failed or refused: {', '.join(failed)}")


def apply(
    ctx: typer.Context,
    release: Annotated[str, typer.Option("--release", "-r", help="Release name in the matrix.")],
    inventory: Inventory,
    matrix: MatrixOpt,
    limit: Limit = None,
    dry: Annotated[bool, typer.Option(
        "--dry", help="Show each host's package, hold and pin-file changes, the node-state "
        "commands its pool's profile needs, and whether it would drain and reboot; reads the "
        "hosts over SSH, changes and records nothing.")] = False,
    force: Force = False,
    scheduler: SchedulerOpt = None,
    no_drain: NoDrain = False,
    serial: Serial = 10,
    reason: Annotated[str | None, typer.Option(
        "--reason", help="Why (recorded; required with --no-drain).")] = None,
    json_out: JsonFlag = False,
    output: OutputOpt = None,
) -> None:
    """Pin a release onto hosts: exact packages, apt pin or dnf versionlock, held, verified.

    Hosts that change are first drained through the workload manager and waited for until no
    job runs on them (the pool's `rollout.drain` timeout; a host whose jobs outlive it is left
    unchanged), at most --serial at a time, and undrained once verified.

    Reboots hosts whose kernel module changed, then puts the node state right where the pool
    selects a profile (persistence, compute mode, power limit, clocks, MIG; ECC with a drained,
    gated reboot; a boot unit reapplies what a reboot forgets; firmware is never flashed), then
    probes them: a host counts as moved only when the driver agrees three ways and no health
    check fails. A second identical run changes nothing. Exit 1 when a host failed or was
    refused, 3 when one was unreachable.
    """
    from fleet.cli.app import settings
    from fleet.domain.matrix.loader import load_matrix
    from fleet.history import open_history, os_actor
    from fleet.jobs.apply import pin_hosts
    from fleet.remote.backend import SshBackend
    from fleet.remote.session import patch_gevent
    from fleet.schedulers import scheduler_for

    patch_gevent()
    m = load_matrix(matrix, today=date.today()).matrix
    try:
        rel = m.release(release)
    except KeyError:
        raise BadInput.single(f"no release {release!r} in the matrix", file=str(matrix),
                              field="--release") from None
    if no_drain and not (reason or "").strip():
        raise BadInput.single("--no-drain needs --reason (it is recorded)", field="--reason")
    backend = SshBackend(inventory, limit)
    refs = backend.hosts()
    targets = {h.name: rel for h in refs}
    sched = scheduler_for(scheduler, refs)
    db = settings(ctx).db
    opened = _read_only_history(db) if dry else open_history(db)
    with opened as history, console.status("planning" if dry else "applying") as status:
        results = pin_hosts(backend, history, m, targets, now=_now, dry=dry, actor=os_actor(),
                            force=force, reason=reason, scheduler=sched, drain=not no_drain,
                            serial=serial,
                            on_progress=lambda h, what: status.update(esc(f"{what}: {h}")))
    _report(results, json_out, {"release": release, "dry": dry}, dry=dry, output=output)
    _exit(results, dry=dry)


def rollback(
    ctx: typer.Context,
    inventory: Inventory,
    matrix: MatrixOpt,
    reason: Annotated[str, typer.Option("--reason", help="Why: recorded with who ran it.")],
    limit: Limit = None,
    pool: PoolAlias = None,
    host: HostAlias = None,
    to: Annotated[str, typer.Option(
        "--to", help="'previous' (each host's last known-good release from the history, else "
        "the matrix's previous for its pool) or a release name.")] = "previous",
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
    = False,
    force: Force = False,
    scheduler: SchedulerOpt = None,
    no_drain: NoDrain = False,
    serial: Serial = 0,
    dry: Annotated[bool, typer.Option(
        "--dry", help="Show each host's target and its package, hold and pin-file changes; "
        "reads the hosts over SSH and the history, changes and records nothing (no "
        "confirmation asked).")] = False,
    json_out: JsonFlag = False,
    output: OutputOpt = None,
) -> None:
    """Put the hosts -l selects (pools, host globs) back on their last known-good release,
    verified (incident path).

    No benchmark gates on this path. Hosts are drained first and waited for until their jobs
    end (the pool's `rollout.drain` timeout); `--no-drain` skips that, recorded with the reason.
    Unreachable hosts are reported and the rest proceed; the command then exits 3. Who ran it
    and why go into the history.
    """
    from fleet.cli.app import settings
    from fleet.cli.selection import choose, given, values
    from fleet.domain.matrix.loader import load_matrix
    from fleet.domain.selection import release_problem
    from fleet.history import open_history, os_actor, record_event
    from fleet.jobs.apply import pin_hosts
    from fleet.remote.backend import SshBackend
    from fleet.remote.session import patch_gevent
    from fleet.schedulers import scheduler_for

    selectors = given(limit, pool, host)
    if not selectors:  # never the whole inventory by omission
        raise BadInput.single("say what to roll back: -l POOL or -l HOST-GLOB (repeatable)",
                              field="--limit")
    if not reason.strip():
        raise BadInput.single("--reason must say why", field="--reason")
    patch_gevent()
    m = load_matrix(matrix, today=date.today()).matrix
    if to != "previous" and (why := release_problem(to, m)) is not None:
        raise BadInput.single(why, file=str(matrix), field="--to")
    backend = SshBackend(inventory)
    refs = choose(selectors, backend.hosts())
    sched = scheduler_for(scheduler, refs)
    actor = os_actor()
    db = settings(ctx).db
    with _read_only_history(db) if dry else open_history(db) as history:
        targets, sources, missing = {}, {}, []
        for r in refs:
            if to == "previous":
                rel, source = _previous(history, m, r.name, r.pool)
            else:
                try:
                    rel, source = m.release(to), "--to"
                except KeyError:
                    raise BadInput.single(f"no release {to!r} in the matrix",
                                          file=str(matrix), field="--to") from None
            if rel is None:
                missing.append(r.name)
            else:
                targets[r.name], sources[r.name] = rel, source
        if missing:
            raise BadInput.single("no known-good release for " + ", ".join(missing)
                                  + " (no history, no policy.previous for the pool); use --to",
                                  field="--to")
        plan = ", ".join(sorted({f"{t.name}" for t in targets.values()}))
        console.print(f"{'would roll' if dry else 'rolling'} back {len(targets)} host(s) to "
                      f"{plan} ({reason})", markup=False)
        if not yes and not dry:
            if not sys.stdin.isatty():
                raise BadInput.single("no terminal to confirm on: pass --yes", field="--yes")
            typer.confirm("proceed?", abort=True)
        if not dry:
            assert history is not None
            record_event(history, "rollback", ",".join(values(selectors)), reason,
                         {"targets": {h: r.name for h, r in targets.items()},
                          "sources": sources}, actor=actor, at=_now())
        with console.status("planning" if dry else "rolling back") as status:
            results = pin_hosts(backend, history, m, targets, now=_now, kind="rollback",
                                dry=dry, force=force, reason=reason, actor=actor,
                                scheduler=sched, drain=not no_drain, serial=serial,
                                on_progress=lambda h, what: status.update(esc(f"{what}: {h}")))
    _report(results, json_out, {"reason": reason, "actor": actor, "sources": sources, "dry": dry},
            dry=dry, output=output)
    _exit(results, dry=dry)


def _previous(history: History | None, m: Any, host: str,
              pool: str | None) -> tuple[Any, str]:
    """A host's last known-good release; with no history file (a dry run), the matrix's."""
    from fleet.jobs.apply import previous_known_good

    if history is not None:
        return previous_known_good(history, m, host, pool)
    prev = m.previous_for(pool) if pool is not None else None
    return (prev, "matrix") if prev is not None else (None, "none")


def register(app: typer.Typer) -> None:
    app.command("apply")(apply)
    app.command("rollback")(rollback)
