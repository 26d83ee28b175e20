"""What the docs say of the tool is what it does (issue 30, docs that disagreed): the cron
example mails only a failed run, `bench run` has the replay options benchmarks.md names, the
sim fault names of `--help` and of the error are one list, `matrix check` exits 1 with
`end_of_life: error` as exit-codes.md now says."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from fleet.cli.rollout.wiring import RATE_NAMES
from fleet.remote import bench

Fleet = Callable[..., tuple[int, str, str]]  # the fleet_run fixture (conftest.py)
ROOT = Path(__file__).resolve().parents[3]
CRON = ROOT / "contrib" / "cron" / "fleet-hygiene"


def _cron_command() -> str:
    [line] = [ln for ln in CRON.read_text().splitlines()
              if ln.strip() and not ln.startswith("#") and "=" not in ln.split()[0]]
    return line.split(None, 6)[6]  # after minute hour day month weekday user


@pytest.mark.parametrize(("rc", "mailed"), [(0, False), (1, True), (3, True)])
def test_cron_line_prints_only_when_the_run_fails(tmp_path: Path, rc: int, mailed: bool) -> None:
    """cron mails whatever the line prints: a clean run (which prints its summary) must print
    nothing, a failed one its exit code and output."""
    command = _cron_command()
    assert "%" not in command  # cron turns % into a newline
    stub = tmp_path / "fleet"
    stub.write_text(f"#!/bin/sh\necho 'hygiene summary: 3 hosts'\nexit {rc}\n")
    stub.chmod(0o755)
    log = tmp_path / "hygiene.log"
    command = command.replace("/usr/local/bin/fleet", str(stub)).replace(
        "/var/lib/fleet/hygiene.log", str(log))
    out = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, timeout=10)
    printed = out.stdout + out.stderr
    assert "hygiene summary" in log.read_text()
    if mailed:
        assert f"exited {rc}" in printed and "hygiene summary: 3 hosts" in printed
    else:
        assert printed == ""


def test_bench_run_has_the_replay_options_the_docs_name(fleet_run: Fleet) -> None:
    doc = (ROOT / "docs" / "benchmarks.md").read_text()
    code, out, err = fleet_run("bench", "run", "--help")
    for option in ("--max-connections", "--timeout"):
        assert option in doc and option in out + err
    args = bench.replay_args({"command": "true", "timeout": 5, "max_connections": 8})
    assert args[args.index("--timeout") + 1] == "5.0"
    assert args[args.index("--max-connections") + 1] == "8"
    with pytest.raises(ValueError, match="max_connections"):
        bench.replay_args({"command": "true", "max_connections": 2.5})


def test_bench_run_max_connections_out_of_range_is_bad_input(fleet_run: Fleet,
                                                             tmp_path: Path) -> None:
    code, out, _ = fleet_run("bench", "run", "-i", str(tmp_path / "inv.py"), "--suite", "replay",
                             "--max-connections", "0", "--json")
    assert code == 2 and json.loads(out)["error"]["where"]["field"] == "--max-connections"


def test_sim_fault_names_are_one_list(fleet_run: Fleet, tmp_path: Path) -> None:
    code, out, err = fleet_run("rollout", "start", "--help")
    help_text = re.sub(r"[\s│]+", " ", out + err)
    code, out, _ = fleet_run("--db", str(tmp_path / "h.db"), "rollout", "start", "-r",
                             "r595-cuda13.2", "-m", str(ROOT / "matrices" / "example.yaml"),
                             "--sim", "4", "--sim-faults", "pigeons=0.1", "--json")
    assert code == 2
    message = json.loads(out)["error"]["message"]
    listed = re.search(r"faults: ([a-z_, ]+)\)", message)
    assert listed is not None and tuple(listed.group(1).split(", ")) == RATE_NAMES
    assert "(" + ", ".join(RATE_NAMES) + ")" in help_text


def test_matrix_check_exits_1_with_end_of_life_error(fleet_run: Fleet, tmp_path: Path) -> None:
    """exit-codes.md: `matrix check` exits 1 on an ended branch under `end_of_life: error`."""
    text = (ROOT / "matrices" / "example.yaml").read_text()
    doc = (ROOT / "docs" / "exit-codes.md").read_text()
    row = next(ln for ln in doc.splitlines() if ln.startswith("| `matrix check"))
    assert "end_of_life: error" in row
    m = tmp_path / "m.yaml"
    m.write_text(text.replace("policy:\n", "policy:\n  end_of_life: error\n", 1))
    code, out, _ = fleet_run("matrix", "check", str(m), "--today", "2031-01-01", "--json")
    assert code == 1 and json.loads(out)["end_of_life"], out


def test_cron_mail_is_documented_as_it_works() -> None:
    text = (ROOT / "docs" / "hygiene.md").read_text()
    assert "exit 1 mails the output" not in text and "A clean\n  week mails nothing" in text
    assert os.access(CRON, os.R_OK)
