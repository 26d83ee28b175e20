"""How a rollout reaches its hosts: a simulated fleet (built from checked `--sim*` options and
saved between commands) or an inventory over SSH with a scheduler adapter."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleet.errors import BadInput, Problem

if TYPE_CHECKING:  # pydantic models: imported by the commands that load a matrix
    from fleet.domain.matrix.models import Matrix


class Saving:
    """The simulated fleet or its scheduler, saving the fleet's state after each call that
    changes it, so a later command (resume, promote, abort) finds the hosts as they were."""

    # the scheduler's too: a pool that reboots through Slurm reboots in `reboot_nodes`, and a
    # kill before the next save lost that reboot (the resumed rollout's verify then found the
    # old kernel module loaded and rolled healthy hosts back)
    MUTATING = frozenset({"apply", "reboot", "probe", "benchmark", "drain", "undrain",
                          "reboot_nodes", "stop_jobs", "set_drained", "start_job"})

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
slow host. The one list: `rollout start --help` and the error for an unknown name print it."""


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


def sim_build(m: Matrix, sim: int | None, seed: int, sim_spec: Path | None,
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


def reuse_sim_state(path: Path, m: Matrix, build: dict[str, Any], db: str) -> str | None:
    """Whether a start goes on with the simulated fleet saved at `path` (docs/rollouts.md:
    hosts persist between commands) rather than build a new one: None to go on with it, else
    why a new one is built. It goes on when the fleet there was built from the same options
    (`--sim N --seed --sim-faults --sim-slow`, or the same `--sim-spec`), as the rollout that
    saved it recorded, or, with no such record, when it has as many hosts as asked for."""
    if not path.exists():
        return "none saved there yet"
    from fleet.sim import load_fleet
    from fleet.sim.state import state_owner

    _, stamp = state_owner(path)
    rid = _stamp_id(stamp)
    if rid is not None and ("://" in db or Path(db).exists()):
        from fleet.history import open_history
        from fleet.history.rollouts import start_data

        with open_history(db, create=False) as history:
            recorded = (start_data(history, rid).get("source") or {}).get("build")
        if recorded is not None:
            return None if recorded == build else (
                f"rollout {rid} saved one built with other --sim options")
    fleet = load_fleet(path, m)  # says why it cannot (unreadable, another matrix's pools)
    have = len(fleet.hosts())
    want = build.get("n")
    if want is None and build.get("spec_doc"):
        pools = (build["spec_doc"].get("pools") or {}).values()
        want = sum(int((p or {}).get("hosts") or 0) for p in pools) or None
    if want is not None and have != want:
        return f"the one saved there has {have} host(s), not {want}"
    return None


def say_where(db: str, source: dict[str, Any], *, dry: bool) -> None:
    """A simulated run writes files: say which, before it does (stderr)."""
    from fleet.cli.output import console

    where = db if "://" in db else str(Path(db).absolute())
    state = source["sim_state"]
    new = f" ({why})" if (why := source.get("new_because")) and Path(state).exists() else ""
    if dry:
        line = (f"simulated fleet: read from {state}" if source.get("reused")
                else f"simulated fleet: built in memory{new}") + "; dry run: nothing is written"
    elif source.get("reused"):
        line = f"simulated fleet: going on with the one saved in {state}; history: {where}"
    else:
        line = f"simulated fleet: new{new}, saved in {state}; history: {where}"
    console.print(line, markup=False, highlight=False, soft_wrap=True)


def wiring(m: Matrix, source: dict[str, Any], *, create: bool = False,
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
        reused = bool(source.get("reused"))  # a start that took over the fleet in the file
        rebuild = create and not reused
        if not create:
            exists, stamp = state_owner(path)
            earlier = _stamp_id(stamp)
            if exists and (stamp is None or earlier == rollout_id):
                pass  # this rollout's fleet (or a file saved before states were stamped)
            elif reused and exists and (earlier is None or rollout_id is None
                                        or earlier < rollout_id):
                pass  # killed before its first save: the fleet it took over, unchanged
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

        return Saving(fleet, save), Saving(sched, save), sim_sleep
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
