"""The dcgmi diag level from the matrix and `--diag-level` reaches the real command line:
hygiene's benchmark parameters -> the SSH side's runner arguments (`fleet.remote.bench`) -> the
runner shipped to hosts (`fleet/bench/runner.py`, run here as a process) -> `dcgmi diag -r N -j`,
with a fake `dcgmi` (a GPU tool: the one thing faked) first on PATH that records its argv."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleet.domain.matrix.hygiene_settings import HygieneSettings
from fleet.jobs.hygiene_bench import _params
from fleet.remote.bench import RUNNER, synthetic_args

DATA = Path(__file__).resolve().parents[2] / "data" / "bench"

FAKE = """#!/bin/sh
printf '%s\\n' "$*" >> "$FAKE_DCGMI_LOG"
cat "$FAKE_DCGMI_DOC"
"""


@pytest.fixture
def fake_dcgmi(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "dcgmi"
    tool.write_text(FAKE)
    tool.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "FAKE_DCGMI_LOG": str(tmp_path / "argv.log"),
            "FAKE_DCGMI_DOC": str(DATA / "dcgm_pass.json")}


@pytest.mark.parametrize("level", [1, 2, 3, 4])
def test_the_level_reaches_dcgmi(fake_dcgmi: dict[str, str], level: int) -> None:
    params = _params({"repeats": 3}, 959, level)
    args = synthetic_args(params)
    assert args[args.index("--dcgm-level") + 1] == str(level)
    assert args[args.index("--repeats") + 1] == "959"
    p = subprocess.run([sys.executable, str(RUNNER), *args], env=fake_dcgmi,
                       capture_output=True, text=True, timeout=60, check=False)
    doc = json.loads(p.stdout)
    assert doc["source"] == "dcgm" and doc["details"]["level"] == level, doc
    assert doc["verdict"] == "pass" and p.returncode == 0
    assert Path(fake_dcgmi["FAKE_DCGMI_LOG"]).read_text() == f"diag -r {level} -j\n"


def test_runner_repeats_stay_within_what_the_ssh_side_accepts() -> None:
    """auto may ask a host for more samples than the runner may repeat: samples keep the count
    (the simulated fleet draws them), repeats are capped at 1000 (fleet.remote.bench)."""
    params = _params({}, 2500, 1)
    assert params["samples"] == 2500 and params["repeats"] == 1000
    assert "1000" in synthetic_args(params)


@pytest.mark.parametrize("bad", [0, 5, 2.5, "deep"])
def test_the_matrix_refuses_levels_outside_1_to_4(bad: object) -> None:
    with pytest.raises(ValueError, match="dcgm_diag_level"):
        HygieneSettings.model_validate({"dcgm_diag_level": bad})


def test_a_bad_level_in_a_matrix_file_names_file_line_and_field(tmp_path: Path) -> None:
    from fleet.domain.matrix.loader import load_matrix
    from fleet.errors import BadInput

    text = (Path(__file__).resolve().parents[3] / "matrices" / "example.yaml").read_text()
    path = tmp_path / "m.yaml"
    path.write_text(text + "\nhygiene:\n  dcgm_diag_level: 7\n  benchmark: {samples: lots}\n")
    with pytest.raises(BadInput) as err:
        load_matrix(path)
    problems = {p.field: p for p in err.value.problems}
    assert set(problems) >= {"hygiene.dcgm_diag_level", "hygiene.benchmark.samples"}, problems
    n = len(text.splitlines())
    assert problems["hygiene.dcgm_diag_level"].line == n + 3
    assert problems["hygiene.dcgm_diag_level"].file == str(path)
    assert "'auto' or a whole number" in problems["hygiene.benchmark.samples"].message
