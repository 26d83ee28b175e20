"""Simulated rollouts on the command line (issue 30): they say where they write, a second
`rollout start --sim` goes on with the fleet in `--sim-state` (docs/rollouts.md) instead of
building a new one, and an abort that leaves a pool on two releases says so, with the
command that makes it whole, which works as printed."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from tests.conftest import ROOT, run_fleet

MATRIX = str(ROOT / "matrices" / "example.yaml")


def _in(folder: Path, *args: str):  # type: ignore[no-untyped-def]
    return run_fleet(*args, cwd=folder)


def test_a_second_start_goes_on_with_the_saved_fleet(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("pools: {l40s: {hosts: 2}}\n")
    r = _in(tmp_path, "rollout", "start", "-m", MATRIX, "--sim-spec", str(spec))
    assert r.returncode == 0, r.stderr
    state, db = tmp_path / "fleet.db.sim.json", tmp_path / "fleet.db"
    assert f"new, saved in {state}; history: {db}" in r.stderr
    assert state.is_file() and db.is_file()
    r = _in(tmp_path, "rollout", "start", "-m", MATRIX, "--sim-spec", str(spec), "--json")
    assert r.returncode == 0, r.stderr
    assert f"going on with the one saved in {state}" in r.stderr
    assert json.loads(r.stdout)["status"] == "nothing"  # both hosts moved by the first
    r = _in(tmp_path, "rollout", "start", "-m", MATRIX, "--sim-spec", str(spec))
    assert r.returncode == 0, r.stderr  # nothing recorded: no "rollout None" on stdout
    assert r.stdout.startswith("no rollout: nothing: every host is on its target"), r.stdout
    r = _in(tmp_path, "rollout", "start", "-m", MATRIX, "--sim", "5", "--dry")
    assert r.returncode == 0, r.stderr  # other options: another fleet, and it says why
    assert ("built in memory (rollout 1 saved one built with other --sim options); dry run: "
            "nothing is written") in r.stderr
    state.unlink()
    r = _in(tmp_path, "rollout", "start", "-m", MATRIX, "--sim-spec", str(spec), "--dry")
    assert "built in memory; dry run" in r.stderr  # nothing saved: nothing to say about it


def test_abort_of_a_paused_canary_names_the_split_and_how_to_make_it_whole(
        tmp_path: Path) -> None:
    """Three canaries, the target 4% slower: wave 1 is inconclusive (promoted), wave 2
    passes, wave 3 is inconclusive again; the abort rolls back wave 3 only."""
    spec = tmp_path / "spec.yaml"
    spec.write_text("pools: {h100-canary: {hosts: 3}}\nrelease_perf: {r595-cuda13.2: 0.96}\n")
    r = _in(tmp_path, "rollout", "start", "-m", MATRIX, "--sim-spec", str(spec))
    assert r.returncode == 3 and "paused" in r.stderr, r.stderr
    r = _in(tmp_path, "rollout", "promote", "1")
    assert r.returncode == 3 and "wave 3 (h100-canary) inconclusive" in r.stdout, r.stderr
    r = _in(tmp_path, "rollout", "abort", "1", "--json")
    assert r.returncode == 1, r.stderr
    [split] = json.loads(r.stdout)["split"]
    assert split["pool"] == "h100-canary" and split["target"] == "r595-cuda13.2"
    assert split["moved"] == ["h100-canary-00001", "h100-canary-00002"]
    assert split["others"] == {"r580-cuda13.0": ["h100-canary-00003"]}
    assert "pool h100-canary is split: 2 host(s) on r595-cuda13.2" in r.stderr
    assert "1 host(s) on r580-cuda13.0: h100-canary-00003" in r.stderr
    assert "to make it whole:" in r.stderr
    r = _in(tmp_path, "rollout", "status", "1", "--json")
    assert json.loads(r.stdout)["split"] == [split]
    [command] = [s["command"] for s in split["next"]]
    argv = shlex.split(command)
    assert argv[:3] == ["fleet", "rollout", "start"]
    r = _in(tmp_path, *argv[1:], "--json")  # as printed: the rest of the pool moves
    assert r.returncode in (0, 3), r.stderr  # completed, or paused on its gate again
    assert "going on with the one saved in" in r.stderr
    doc = json.loads(r.stdout)  # the two moved canaries are on the target already
    assert sum(doc["hosts"].values()) == 1, doc["hosts"]


def test_a_failed_host_is_named_with_its_error(tmp_path: Path) -> None:
    """`rollout start --json` names each failed host and the error its step recorded, so a
    script need not ask `rollout status --hosts`; a split pool's unmoved hosts read as such."""
    spec = tmp_path / "spec.yaml"
    spec.write_text("pools: {l40s: {hosts: 3}}\nfaults: {l40s-00002: {apply_fail: true}}\n")
    r = _in(tmp_path, "rollout", "start", "-m", MATRIX, "--sim-spec", str(spec), "--json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["status"] == "rolled_back", doc
    (failed,) = doc["failed_hosts"]
    assert (failed["host"], failed["state"]) == ("l40s-00002", "failed"), failed
    assert failed["why"].startswith("apply: apt-get install failed (exit 100)"), failed
    assert "1 host(s) not moved (as before the rollout): l40s-00003" in r.stderr, r.stderr
