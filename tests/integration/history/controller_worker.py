"""One controller process for test_controllers_postgres.py (run inside its own namespace).

    python controller_worker.py '{"mode": ..., "db": URL, "out": FILE, ...}'

Modes: `race` (start rollouts on random overlapping pools, `rounds` times), `hold` (start one
rollout and stop itself at a checkpoint: SIGSTOP, or wait for a file), `rollback` (pin a pool
back, as `fleet rollback` does), `hygiene` (the weekly audit). The result is JSON in `out`.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import signal
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fleet.domain.matrix.loader import load_matrix
from fleet.history import open_history, record_event
from fleet.history.rollouts import LockHeld, LockLost, get_rollout
from fleet.jobs.rollout import RolloutEngine, RolloutOptions
from fleet.jobs.rollout.fence import TOUCH

NAME = os.environ.get("FLEET_CONTROLLER", "?")


def wall() -> datetime:
    return datetime.now(UTC)


class Logged:
    """A backend or scheduler that notes every host call that reached it."""

    def __init__(self, target: Any, log: list[list[Any]]) -> None:
        self._t, self._log = target, log

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._t, name)
        if name not in TOUCH or not callable(attr):
            return attr

        def call(*a: Any, **k: Any) -> Any:
            self._log.append([name, repr(a[0])[:200] if a else ""])
            return attr(*a, **k)
        return call


class Witness:
    """While a controller owns a rollout's pools it holds a file lock on each: a second owner
    of a pool at the same moment finds the lock taken (a check apart from the history)."""

    def __init__(self, history: Any, wdir: Path, who: str, violations: list[str]) -> None:
        self.history, self.wdir, self.who, self.violations = history, wdir, who, violations
        self.held: list[Any] = []
        self.engine: Any = None

    def checkpoint(self, label: str) -> None:
        if label == "created":  # committed: we own the pools from here
            ro = get_rollout(self.history, self.engine.rid)
            for p in ro.scope.split(","):
                f = open(self.wdir / f"{p}.lock", "w")  # noqa: SIM115
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    self.violations.append(f"{self.who}: rollout {ro.id} owns {p} while "
                                           "another controller holds its witness")
                self.held.append(f)
        elif label == "end:pre":  # before the write that frees the pools
            self.drop()

    def drop(self) -> None:
        for f in self.held:
            f.close()
        self.held.clear()


def race(cfg: dict[str, Any], history: Any, m: Any) -> dict[str, Any]:
    from fleet.sim import Latency, SimClock, SimFleet

    rng = random.Random(f"{cfg['seed']}/{NAME}")
    wdir = Path(cfg["witness"])
    attempts: list[dict[str, Any]] = []
    violations: list[str] = []
    Path(cfg["ready"]).touch()  # imported and connected: the race starts when all are
    while not Path(cfg["go"]).exists():
        time.sleep(0.005)
    t0 = time.perf_counter()
    for k in range(cfg["rounds"]):
        pools = rng.choice(cfg["pool_sets"])
        clock = SimClock()
        fleet = SimFleet.build(m, None, k, pools=dict.fromkeys(cfg["all_pools"], 2),
                               clock=clock, latency=Latency.zero())
        witness = Witness(history, wdir, f"{NAME} round {k}", violations)
        eng = RolloutEngine(fleet, fleet.scheduler(), history, m, now=wall, sleep=clock.advance,
                            actor="race", options=RolloutOptions(),
                            checkpoint=witness.checkpoint)
        witness.engine = eng
        at = time.time()
        try:
            res = eng.start(matrix_path=cfg["matrix"], pools=pools,
                            releases=fleet.releases_by_host(), unreachable=[])
            outcome = {"round": k, "pools": pools, "outcome": "won", "rollout": res.rollout_id,
                       "status": res.status, "t": [at, time.time()]}
        except LockHeld as e:
            outcome = {"round": k, "pools": pools, "outcome": "refused", "message": str(e),
                       "holders": [h.as_dict() for h in e.holders]}
        finally:
            witness.drop()
        record_event(history, "race.attempt", f"{NAME}/{k}", outcome["outcome"],
                     {"controller": NAME, "round": k, "rollout": outcome.get("rollout")},
                     actor=NAME)
        attempts.append(outcome)
    return {"attempts": attempts, "violations": violations,
            "seconds": round(time.perf_counter() - t0, 2)}


def hold(cfg: dict[str, Any], history: Any, m: Any) -> dict[str, Any]:
    """Start a rollout on a saved simulated fleet (resumable by the CLI) and stop at a label."""
    from fleet.cli.rollout.wiring import sim_build, wiring

    made: list[Any] = []
    build = sim_build(m, cfg["sim"], 0, None, None, None)
    source = {"source": "sim", "sim_state": cfg["sim_state"], "build": build}
    backend, sched, sleep = wiring(m, source, create=True, build=build,
                                   owner=lambda: made[0].rid if made else None)
    touches: list[list[Any]] = []
    mark = Path(cfg["marks"])
    stop_index: list[int] = []

    def checkpoint(label: str) -> None:
        if label != cfg["stop_at"] or stop_index:
            return
        stop_index.append(len(touches))
        (mark / "stopped").write_text(json.dumps({"rollout": made[0].rid, "label": label}))
        if cfg.get("how") == "sigstop":
            os.kill(os.getpid(), signal.SIGSTOP)  # a hung machine; SIGCONT brings it back
        else:
            while not (mark / "go").exists():
                time.sleep(0.02)

    eng = RolloutEngine(Logged(backend, touches), Logged(sched, touches), history, m,
                        now=wall, sleep=sleep, actor="holder",
                        options=RolloutOptions(stale_after_s=cfg["stale_after_s"]),
                        checkpoint=checkpoint)
    made.append(eng)
    fleet = backend._target
    out: dict[str, Any] = {}
    try:
        res = eng.start(matrix_path=cfg["matrix"], pools=cfg["pools"],
                        releases=fleet.releases_by_host(), unreachable=[],
                        start_data={"source": source, "options": {
                            "stale_after_s": cfg["stale_after_s"]}})
        out = {"outcome": "finished", "status": res.status}
    except LockLost as e:
        out = {"outcome": "lost", "message": str(e)}
    after = touches[stop_index[0]:] if stop_index else []
    return {**out, "rollout": eng.rid, "owner": eng.owner, "pid": eng.pid,
            "touches_before_stop": stop_index[0] if stop_index else None,
            "touches_after_stop": after}


def rollback(cfg: dict[str, Any], history: Any, m: Any) -> dict[str, Any]:
    from fleet.jobs.apply import pin_hosts
    from fleet.sim import load_fleet

    fleet = load_fleet(Path(cfg["sim_state"]), m)  # this controller's own view of the hosts
    names = [r.name for r in fleet.hosts() if r.pool == cfg["pool"]]
    rel = m.previous_for(cfg["pool"])
    out = []
    for force in cfg["force"]:  # e.g. [false, true]: refused, then forced
        results = pin_hosts(fleet, history, m, dict.fromkeys(names, rel), now=wall,
                            kind="rollback", reason=cfg["reason"], actor=NAME, force=force,
                            scheduler=fleet.scheduler(), sleep=lambda s: None)
        out.append({r.host: [r.outcome, r.error] for r in results})
    return {"runs": out}


def hygiene(cfg: dict[str, Any], history: Any, m: Any) -> dict[str, Any]:
    from fleet.jobs.hygiene import run_hygiene
    from fleet.sim import load_fleet

    fleet = load_fleet(Path(cfg["sim_state"]), m)
    report = run_hygiene(fleet, fleet.scheduler(), history, m, now=wall(), benchmark=False,
                         actor=NAME)
    return {"in_flight": {d.host: d.in_flight for d in report.in_flight},
            "drifted": [d.host for d in report.non_conformant],
            "summary": report.summary()["drift"], "hosts": len(report.hosts),
            "gpus": {r.name: r.gpu_count for r in fleet.hosts()}}


def main() -> None:
    cfg = json.loads(sys.argv[1])
    m = load_matrix(Path(cfg["matrix"]), today=datetime.now(UTC).date()).matrix
    try:
        with open_history(cfg["db"]) as history:
            result = {"race": race, "hold": hold, "rollback": rollback,
                      "hygiene": hygiene}[cfg["mode"]](cfg, history, m)
    except Exception as e:  # reported to the test, which fails with it
        result = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}
    result["controller"] = NAME
    Path(cfg["out"]).write_text(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
