"""`fleet rollout status N` says why a rollout stopped and what to type next (issue 30), and
`--hosts` prints every host's step (it printed the same as without it)."""

from __future__ import annotations

import json
import shlex
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from fleet.domain.rollout_advice import Seen, advise
from fleet.jobs import demo as D
from tests.unit.cli.test_operator_contract import fleet

NOW = datetime(2025, 10, 1, 12, 0, tzinfo=UTC)


def test_a_rolled_back_rollout_says_why_and_what_next(
        demo_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = fleet(capsys, "--db", str(demo_db), "rollout", "status", "1")
    said = out + err
    assert code == 0
    assert "why: benchmark gate: synthetic: fail" in said
    commands = [line.split("$ ", 1)[1].split("    #")[0] for line in said.splitlines()
                if line.strip().startswith("$ ")]
    assert f"fleet --db {shlex.quote(str(demo_db))} rollout status 1 --hosts" in commands
    assert any(c.endswith("check -l h100-canary") for c in commands)
    for command in commands:  # each works as printed
        argv = shlex.split(command)
        assert argv[0] == "fleet"
        code, _, err = fleet(capsys, *argv[1:])
        assert code == 0, (command, err)
    code, out, _ = fleet(capsys, "--db", str(demo_db), "rollout", "status", "1", "--json")
    doc = json.loads(out)
    assert doc["reason"].startswith("benchmark gate:") and doc["next"][0]["command"]


def test_hosts_prints_every_hosts_step(demo_db: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    _, plain, plain_err = fleet(capsys, "--db", str(demo_db), "rollout", "status", "1")
    code, out, err = fleet(capsys, "--db", str(demo_db), "rollout", "status", "1", "--hosts")
    assert code == 0 and out + err != plain + plain_err
    canary = [line for line in out.splitlines() if line.split()[:1] == ["h100-canary-00001"]]
    assert len(canary) == 1
    assert "rolled_back" in canary[0] and "benchmark gate" in canary[0]
    assert sum(line.split()[:1] != [] and line.split()[0].startswith(tuple(D.POOLS))
               for line in out.splitlines()) == sum(D.POOLS.values())


def _paused(reason: str, message: str) -> Seen:
    return Seen(4, "paused", [("rollout.pause", message, {"wave": 2, "reason": reason})])


def test_paused_inconclusive_offers_promote_and_abort() -> None:
    a = advise(_paused("replay: inconclusive: n=20", "wave 2 (h100) inconclusive: ..."),
               fleet="fleet", now=NOW)
    assert a.reason == "wave 2 inconclusive: replay: inconclusive: n=20"
    verbs = [shlex.split(c)[2] for c, _ in a.next]
    assert verbs[:2] == ["promote", "abort"] and all(" 4" in c for c, _ in a.next)


def test_paused_on_a_drain_offers_keep_waiting() -> None:
    a = advise(_paused("drain timeout", "wave 2 (h100): drain timed out on gpu-01 (job 7)"),
               fleet="fleet --db x.db", now=NOW)
    assert a.reason is not None and "drain timed out on gpu-01" in a.reason
    assert [c for c, _ in a.next] == ["fleet --db x.db rollout keep-waiting 4",
                                      "fleet --db x.db rollout abort 4"]


def test_a_running_rollout_whose_controller_stopped_says_resume() -> None:
    seen = Seen(5, "running", [], lock_owner="ops@host", stale_after_s=300,
                lock_heartbeat=NOW - timedelta(hours=1))
    a = advise(seen, fleet="fleet", now=NOW)
    assert a.reason is not None and "controller stopped" in a.reason
    assert a.next[0][0] == "fleet rollout resume 5 --force"
    live = Seen(5, "running", [], lock_owner="ops@host", lock_heartbeat=NOW)
    assert "at work" in str(advise(live, fleet="fleet", now=NOW).reason)
