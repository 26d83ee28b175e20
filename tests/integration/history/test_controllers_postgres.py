"""Several controllers on one PostgreSQL history, each a process in its own network namespace.

- 4 controllers race 100 times each for rollouts of overlapping pools: never two owners of a
  pool (event order per pool, and a file lock each owner holds while it runs), every
  attempt and every rollout event on record.
- A controller that hangs (SIGSTOP) is taken over with `fleet rollout resume --force` only once
  its heartbeat is stale; when it comes back it stops on its own, touching no host.
- `fleet rollback` of a pool under a rollout run by another controller is refused naming that
  controller; with --force it preempts the rollout, whose controller stops at its next step
  saying why. Meanwhile hygiene on a third controller records each host once and calls the
  hosts the rollout is moving in flight, not drifted.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import col, func, select

from fleet.history import open_history
from fleet.history.models import Event, GpuSample, Rollout, Snapshot

sys.path.insert(0, str(Path(__file__).parent))
from controllers import Machines, finish, wait_file, write_matrix  # noqa: E402

pytestmark = [pytest.mark.postgres]

POOLS = ["h100-canary", "h100", "a100", "l40s"]
OVERLAPPING = [["h100-canary", "h100"], ["h100", "a100"], ["a100", "l40s"],
               ["l40s", "h100-canary"], ["h100"], ["a100"]]


@pytest.fixture
def machines(pg_db: str) -> Iterator[Machines]:
    ms = Machines(4, pg_db)
    try:
        yield ms
    finally:
        ms.close()


def _events(db: str, **where: Any) -> list[Event]:
    with open_history(db) as h, h.read() as s:
        stmt = select(Event).order_by(col(Event.id))
        for k, v in where.items():
            stmt = stmt.where(getattr(Event, k) == v)
        return list(s.exec(stmt).all())


def _rollouts(db: str) -> list[Rollout]:
    with open_history(db) as h, h.read() as s:
        return list(s.exec(select(Rollout).order_by(col(Rollout.id))).all())


def test_four_controllers_race_for_overlapping_pools(machines: Machines, pg_db: str,
                                                     tmp_path: Path) -> None:
    matrix = write_matrix(tmp_path / "m.yaml")
    (tmp_path / "witness").mkdir()
    rounds = 100
    procs = []
    for i, mach in enumerate(machines.machines):
        out = tmp_path / f"race{i}.json"
        procs.append((mach.spawn({"mode": "race", "matrix": str(matrix), "rounds": rounds,
                                  "seed": 17, "pool_sets": OVERLAPPING, "all_pools": POOLS,
                                  "ready": str(tmp_path / f"ready{i}"),
                                  "go": str(tmp_path / "go"),
                                  "witness": str(tmp_path / "witness")}, out), out))
    for i, (p, _) in enumerate(procs):
        wait_file(tmp_path / f"ready{i}", p, timeout=120)
    t0 = time.perf_counter()
    (tmp_path / "go").touch()
    results = [finish(p, out, timeout=300) for p, out in procs]
    wall = time.perf_counter() - t0
    for r in results:
        assert "error" not in r, r.get("trace") or r
        assert r["violations"] == [], r["violations"]  # never two owners at the same moment

    won = {a["rollout"]: (r["controller"], a) for r in results for a in r["attempts"]
           if a["outcome"] == "won"}
    refused = [(r["controller"], a) for r in results for a in r["attempts"]
               if a["outcome"] == "refused"]
    assert len(won) + len(refused) == 4 * rounds
    rollouts = _rollouts(pg_db)
    assert {ro.id for ro in rollouts} == set(won)  # no phantom, none missing
    assert all(ro.status == "completed" and ro.lock_owner is None for ro in rollouts)

    # never two owners of a pool: on every pool, each rollout's end was written before the
    # next one's start (event ids come from one sequence, drawn inside the transactions; the
    # time stamps are taken before them, so they cannot tell)
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for e in _events(pg_db):
        if e.kind in ("rollout.start", "rollout.end"):
            rid = int(e.subject.split("/")[1])
            (first if e.kind == "rollout.start" else last)[rid] = e.id  # type: ignore[assignment]
    by_pool: dict[str, list[Rollout]] = defaultdict(list)
    for ro in rollouts:
        for p in ro.scope.split(","):
            by_pool[p].append(ro)
    for pool, ros in by_pool.items():
        ros.sort(key=lambda r: first[r.id])  # type: ignore[index]
        for a, b in zip(ros, ros[1:], strict=False):
            assert last[a.id] < first[b.id], f"{pool}: rollout {a.id} overlaps {b.id}"  # type: ignore[index]

    # contention happened, and each refusal named the holder: another controller, its start
    # and heartbeat, a rollout that did run on a shared pool
    others = 0
    for who, a in refused:
        h = a["holders"][0]
        assert h["rollout_id"] in won and set(h["pools"]) & set(a["pools"])
        assert h["owner"] and h["since"] and h["heartbeat"]
        assert f"controller {h['owner']} (pid {h['pid']})" in a["message"]
        assert "since " in a["message"] and "last heartbeat" in a["message"]
        others += h["owner"] != f"race@{who}"
    assert others >= 10 and len(won) >= 10, (others, len(won))

    # no event lost: every attempt, and every rollout's full story
    attempts = _events(pg_db, kind="race.attempt")
    assert sorted(e.subject for e in attempts) == sorted(
        f"{r['controller']}/{k}" for r in results for k in range(rounds))
    per: dict[str, list[str]] = defaultdict(list)
    for e in _events(pg_db):
        if e.subject.startswith("rollout/"):
            per[e.subject].append(e.kind)
    for rid, ro in ((ro.id, ro) for ro in rollouts):
        kinds = per[f"rollout/{rid}"]
        waves = len(ro.scope.split(","))
        assert kinds.count("rollout.start") == 1 and kinds.count("rollout.end") == 1
        assert kinds.count("rollout.wave") == 2 * waves, (rid, kinds)
    print(f"\nrace ({machines.mode}): 4 controllers x {rounds}: {len(won)} rollouts, "
          f"{len(refused)} refused ({others} by another controller), {wall:.1f} s")


def test_stale_owner_is_taken_over_and_stops_when_it_comes_back(
        machines: Machines, pg_db: str, tmp_path: Path) -> None:
    matrix = write_matrix(tmp_path / "m.yaml")
    marks = tmp_path / "marks"
    marks.mkdir()
    state = tmp_path / "sim.json"
    # Long enough that the two refusals below (each a CLI process: several seconds on a loaded
    # CI machine) happen while the holder's heartbeat is still live. At 6 s the CI run at
    # 324f603 saw the "early" forced resume start after the lock went stale: it took the
    # rollout over and finished it, and the third controller's start was then not refused.
    stale = 20.0
    a_out = tmp_path / "a.json"
    a = machines[0].spawn({"mode": "hold", "matrix": str(matrix), "sim": 12,
                           "sim_state": str(state), "pools": ["a100"], "stale_after_s": stale,
                           "stop_at": "wave1:apply:begin", "how": "sigstop",
                           "marks": str(marks)}, a_out)
    try:
        wait_file(marks / "stopped", a, timeout=120)
        rid = json.loads((marks / "stopped").read_text())["rollout"]
        stopped_at = time.monotonic()
        # live heartbeat: refused, even with --force, naming the holder
        early = machines[1].fleet("rollout", "resume", str(rid), "--force")
        if time.monotonic() - stopped_at < stale - 1:
            assert early.returncode == 3, early.stdout + early.stderr
            assert "being run by holder@ctl0" in early.stderr + early.stdout
        # a second start on the pool from a third controller: refused with who, since, beat
        other = machines[2].fleet("rollout", "start", "-m", str(matrix), "--sim", "12",
                                  "--sim-state", str(tmp_path / "c.json"), "-l", "a100")
        assert other.returncode == 3, other.stdout + other.stderr
        said = " ".join((other.stdout + other.stderr).split())
        assert f"rollout {rid} is running on a100: controller holder@ctl0" in said
        assert "since " in said and "last heartbeat" in said
        time.sleep(max(0.0, stale + 0.5 - (time.monotonic() - stopped_at)))
        taken = machines[1].fleet("rollout", "resume", str(rid), "--force", "--json")
        assert taken.returncode == 0, taken.stdout + taken.stderr
        before = state.read_bytes()
        os.kill(a.pid, signal.SIGCONT)  # the hung controller comes back
        got = finish(a, a_out)
    finally:
        if a.poll() is None:
            os.kill(a.pid, signal.SIGCONT)
            a.kill()
    assert "error" not in got, got
    assert got["outcome"] == "lost", got
    assert got["touches_after_stop"] == [], got  # stopped without touching a host
    assert "lost its lock" in got["message"] and "--force" in got["message"]
    assert state.read_bytes() == before  # nor saved its stale view of the fleet
    kinds = [e.kind for e in _events(pg_db, subject=f"rollout/{rid}")]
    assert "rollout.lock.takeover" in kinds and kinds[-1] == "rollout.lock.lost"
    take = next(e for e in _events(pg_db, kind="rollout.lock.takeover"))
    assert take.data["previous_owner"] == "holder@ctl0" and take.data["heartbeat_age_s"] > stale
    (ro,) = _rollouts(pg_db)
    assert ro.status == "completed" and ro.lock_owner is None


def test_forced_rollback_preempts_and_hygiene_sees_hosts_in_flight(
        machines: Machines, pg_db: str, tmp_path: Path) -> None:
    matrix = write_matrix(tmp_path / "m.yaml")
    marks = tmp_path / "marks"
    marks.mkdir()
    state = tmp_path / "sim.json"
    a_out = tmp_path / "a.json"
    a = machines[0].spawn({"mode": "hold", "matrix": str(matrix), "sim": 12,
                           "sim_state": str(state), "pools": ["a100"], "stale_after_s": 300,
                           "stop_at": "wave1:reboot:begin", "how": "wait",
                           "marks": str(marks)}, a_out)
    try:
        wait_file(marks / "stopped", a, timeout=120)
        rid = json.loads((marks / "stopped").read_text())["rollout"]
        # hygiene on controller 3 while the rollout holds a100 between pin and reboot
        hy = finish(machines[3].spawn({"mode": "hygiene", "matrix": str(matrix),
                                       "sim_state": str(state)}, tmp_path / "h.json"),
                    tmp_path / "h.json")
        assert "error" not in hy, hy
        # rollback from controller 2: without --force refused naming the holder, then forced
        rb = finish(machines[2].spawn({"mode": "rollback", "matrix": str(matrix),
                                       "sim_state": str(state), "pool": "a100",
                                       "reason": "Xid storm", "force": [False, True]},
                                      tmp_path / "r.json"), tmp_path / "r.json")
        assert "error" not in rb, rb
        no, yes = ({"hosts": run} for run in rb["runs"])
        (marks / "go").touch()
        got = finish(a, a_out)
    finally:
        (marks / "go").touch()
        if a.poll() is None:
            a.kill()
    moving = {h for h, (outcome, _) in yes["hosts"].items()}
    for h, (outcome, error) in no["hosts"].items():
        assert outcome == "refused", (h, outcome)
        assert f"rollout {rid} is running on a100: controller holder@ctl0" in error
        assert "last heartbeat" in error
    assert all(outcome in ("changed", "unchanged") for outcome, _ in yes["hosts"].values()), yes
    # the rollout's controller stopped at its next step and said why
    assert "error" not in got and got["outcome"] == "lost", got
    assert "rollback --force" in got["message"] and "Xid storm" in got["message"], got
    assert got["touches_after_stop"] == [], got
    kinds = [e.kind for e in _events(pg_db, subject=f"rollout/{rid}")]
    assert "rollout.preempt" in kinds and kinds[-1] == "rollout.lock.lost"
    assert [e.kind for e in _events(pg_db) if e.kind.startswith("rollback.force")] == \
        ["rollback.force"]
    (ro,) = _rollouts(pg_db)
    assert ro.status == "paused" and ro.lock_owner is None  # resume or abort it, by hand

    # hygiene: the hosts being moved were in flight, not drifted; one sample per GPU per probe
    assert set(hy["in_flight"]) == moving, hy
    assert all(f"rollout {rid} wave 1 (a100)" in v for v in hy["in_flight"].values())
    assert not set(hy["drifted"]) & moving
    assert hy["summary"]["in_flight"] == len(moving)
    with open_history(pg_db) as h, h.read() as s:
        hygiene_at = s.exec(select(Event.at).where(Event.kind == "hygiene.run")).one()
        snaps = s.exec(select(Snapshot).where(Snapshot.taken_at <= hygiene_at)).all()
        counts = dict(s.exec(select(GpuSample.snapshot_id, func.count())
                             .group_by(col(GpuSample.snapshot_id))).all())
    assert len(snaps) == hy["hosts"] and len({x.host_id for x in snaps}) == hy["hosts"]
    # each probe's GPUs once (a host between pin and reboot has no NVML: no samples)
    assert all(counts.get(x.id, 0) == len(x.facts.get("gpus") or []) for x in snaps)
    assert sum(counts.get(x.id, 0) for x in snaps) >= 8 * 5
