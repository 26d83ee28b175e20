"""The weekly hygiene job on the lab end to end (issue 8 §5), through the real SSH backend
(`fleet.remote.backend.SshBackend`) and the `none` scheduler: a host drifted by hand and a GPU
whose corrected ECC grows week after week are both found.

Every test starts from all three lab hosts pinned on the golden r570 (the module fixture; h1's
pool golden is the candidate r580, so h1 is conformant but behind its golden) and a kernel log
with no Xid left over from the lab's other tests (each host is reset and rebooted first).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.lab import lab
from fleet.lab.repo import apt_version

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[3]
MATRIX = ROOT / "matrices" / "example.yaml"
INVENTORY = ROOT / "inventories" / "lab.py"
GOLDEN = "r580-cuda13.0"
WEEK = dt.timedelta(weeks=1)


def fleet(env: dict[str, str], *args: str) -> tuple[int, dict]:
    r = subprocess.run([sys.executable, "-m", "fleet", *args, "--json"], env=env,
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert "Traceback" not in r.stderr, r.stderr
    try:
        return r.returncode, json.loads(r.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"exit {r.returncode}, no JSON: {r.stdout}\n{r.stderr}") from None


def wait_for_ssh(host, timeout: float = 30) -> None:  # noqa: ANN001 - conftest.Host
    deadline = time.monotonic() + timeout
    while True:
        try:
            host.sh("true", timeout=5)
            return
        except Exception:  # noqa: BLE001 - booting
            host.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def unpin_all(hosts) -> None:  # noqa: ANN001 - conftest.Host values
    """Back to the lab's fresh state (r570 installed, nothing pinned or held): the lab's own
    tests (tests/integration/lab) install other versions by hand and expect no holds."""
    from fleet.domain.pinning import PREFERENCES_PATH, UNATTENDED_PATH

    for h in hosts:
        h.sh(f"rm -f {PREFERENCES_PATH} {UNATTENDED_PATH}; held=$(apt-mark showhold); "
             '[ -z "$held" ] || apt-mark unhold $held >/dev/null')


@pytest.fixture(scope="module")
def env(lab_paths, lab_state, hosts, tmp_path_factory) -> Iterator[dict[str, str]]:
    for spec in lab_state.hosts:
        lab.reset(lab_paths, spec.name)
    for h in hosts.values():
        wait_for_ssh(h)
        h.reboot_and_wait()  # the Xids and AER lines of earlier tests' faults are gone
    e = {**os.environ, "FLEET_LAB_DIR": str(lab_paths.run),
         "FLEET_DB": str(tmp_path_factory.mktemp("hygiene-cli") / "fleet.db"),
         "FLEET_MATRIX": str(MATRIX), "FLEET_INVENTORY": str(INVENTORY), "COLUMNS": "200"}
    rc, doc = fleet(e, "apply", "-r", GOLDEN)
    assert rc == 0, doc
    old = os.environ.get("FLEET_LAB_DIR")
    os.environ["FLEET_LAB_DIR"] = str(lab_paths.run)  # inventories/lab.py reads it
    try:
        yield e
    finally:
        unpin_all(hosts.values())
        if old is None:
            os.environ.pop("FLEET_LAB_DIR", None)
        else:
            os.environ["FLEET_LAB_DIR"] = old


@pytest.fixture(scope="module")
def audit_matrix(tmp_path_factory) -> Path:
    """The example matrix without its kernel constraints: lab hosts run the CI machine's own
    kernel (namespaces share it), whatever its version, and that is not what these tests judge."""
    text = "".join(line for line in MATRIX.read_text().splitlines(keepends=True)
                   if not line.strip().startswith("kernel:"))
    path = tmp_path_factory.mktemp("hygiene-matrix") / "example-any-kernel.yaml"
    path.write_text(text)
    return path


def hygiene(history, now: dt.datetime, matrix_path: Path, **kw):  # noqa: ANN001, ANN201
    from fleet.cli.hygiene_cmd import make_scheduler
    from fleet.domain.matrix.loader import load_matrix
    from fleet.jobs.hygiene import run_hygiene
    from fleet.remote.backend import SshBackend

    matrix = load_matrix(matrix_path).matrix
    return run_hygiene(SshBackend(INVENTORY), make_scheduler("none"), history, matrix, now=now,
                       benchmark=False, **kw)


@pytest.fixture
def history(tmp_path):  # noqa: ANN201
    from fleet.history import open_history

    with open_history(str(tmp_path / "fleet.db")) as h:
        yield h


def test_host_drifted_by_hand_is_found(env, hosts, history, audit_matrix) -> None:
    now = dt.datetime.now(dt.UTC)
    report = hygiene(history, now, audit_matrix)
    assert not report.non_conformant, [d.as_dict() for d in report.non_conformant]
    # by hand on h3: another version of a companion, and the driver no longer held
    old = apt_version("1.17.5")  # r550's container toolkit; r570 wants 1.17.5
    hosts["h3"].sh("apt-mark unhold nvidia-driver-580-open >/dev/null && apt-get update -qq && "
                   "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --allow-downgrades "
                   f"--allow-change-held-packages nvidia-container-toolkit={old} >/dev/null",
                   timeout=120)
    try:
        report = hygiene(history, now + dt.timedelta(hours=1), audit_matrix)
        drifted = {d.host: d for d in report.non_conformant}
        assert set(drifted) == {"h3"}, [d.as_dict() for d in report.non_conformant]
        text = "; ".join(str(x) for x in drifted["h3"].differences)
        assert "container_toolkit" in text or "nvidia-container-toolkit" in text, text
        assert "1.17.5" in text and "1.18.0" in text, text
        assert "held" in text or "hold" in text, text
        assert int(report.exit_code) == 1 and any(p.startswith("h3:") for p in report.problems())
    finally:
        rc, doc = fleet(env, "apply", "-r", GOLDEN, "-l", "a100")
        assert rc == 0 and [h["outcome"] for h in doc["hosts"]] == ["changed"], doc
    report = hygiene(history, now + dt.timedelta(hours=2), audit_matrix)
    assert not report.non_conformant, [d.as_dict() for d in report.non_conformant]


def test_gpu_with_growing_corrected_ecc_is_found(env, lab_paths, history,
                                                 audit_matrix) -> None:
    """Five weekly runs (`now` a week apart); between them GPU 0 of h2 gains 150, 300, 600, then
    1,200 corrected errors (the lab bumps the fake NVML's aggregate and volatile counters)."""
    start = dt.datetime.now(dt.UTC) - 4 * WEEK
    try:
        first = hygiene(history, start, audit_matrix)
        assert not first.trends.flagged(), [g.as_dict() for g in first.trends.flagged()]
        for week, count in enumerate((150, 300, 600, 1200), start=1):
            lab.inject(lab_paths, "h2", [f"ecc-corrected:gpu=0,count={count}"])
            report = hygiene(history, start + week * WEEK, audit_matrix)
    finally:
        lab.reset(lab_paths, "h2")
    flagged = {(g.host, g.gpu_index): g for g in report.trends.flagged()}
    assert set(flagged) == {("h2", 0)}, "; ".join(
        f"{g.label}: weekly {g.ecc_corrected_weekly}, flags {[f.kind for f in g.flags]}"
        for g in report.trends.gpus if g.host == "h2" or g.flags)
    gpu = flagged[("h2", 0)]
    assert [round(v) for v in gpu.ecc_corrected_weekly[-3:]] == [300, 600, 1200], gpu.as_dict()
    kinds = {f.kind for f in gpu.flags}
    assert "ecc_corrected_rising" in kinds and "ecc_corrected_rate" in kinds, kinds
    # a one-host pool is under the breaker's floor: the proposal waits for a human
    (proposal,) = report.quarantine.proposals
    assert proposal.host == "h2" and proposal.decision != "quarantine", proposal.as_dict()
    assert int(report.exit_code) == 1
    assert not report.non_conformant, [d.as_dict() for d in report.non_conformant]
