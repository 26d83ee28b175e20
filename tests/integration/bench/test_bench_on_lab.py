"""Benchmarks on the lab end to end (issue 6 §6): the slow release's canary fails the judge
against a golden baseline, and two golden hosts pass.

The session lab's perf model runs r570-cuda12.8 at factor 0.75 (conftest `perf=`): its synthetic
throughput is a quarter lower and its model server a third slower, on the host, measured across a
real process and network boundary. h1 and h2 are both H100 hosts (same base throughput); every
test starts from both on the golden r570 (the module fixture pins it) and puts them back on it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[3]
MATRIX = str(ROOT / "matrices" / "example.yaml")
INVENTORY = str(ROOT / "inventories" / "lab.py")
GOLDEN, SLOW = "r580-cuda13.0", "r570-cuda12.8"
R580, R570 = "580.95.05", "570.133.20"
# the synthetic benchmark's run-level metrics: throughput (higher) and median latency (lower);
# a per-run p99 of ~75 sleeps is too jumpy on a shared CI machine to judge at 5%
SYNTHETIC_METRICS = ["--metric", "throughput:higher:5%", "--metric", "latency_ms_p50:lower:5%",
                     "--only"]
REPLAY_METRICS = ["--metric", "latency_ms:lower:10%:notails", "--metric", "errors:lower:5%",
                  "--only"]


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


def pin(env: dict[str, str], release: str, *hosts: str) -> None:
    args = [a for h in hosts for a in ("-l", h)]
    rc, doc = fleet(env, "apply", "-r", release, *args)
    assert rc == 0, doc
    assert {h["host"] for h in doc["hosts"]} == set(hosts), doc


def unpin_all(hosts) -> None:  # noqa: ANN001 - conftest.Host values
    """Back to the lab's fresh state (r570 installed, nothing pinned or held): the lab's own
    tests (tests/integration/lab) install other versions by hand and expect no holds."""
    from fleet.domain.pinning import PREFERENCES_PATH, UNATTENDED_PATH

    for h in hosts:
        h.sh(f"rm -f {PREFERENCES_PATH} {UNATTENDED_PATH}; held=$(apt-mark showhold); "
             '[ -z "$held" ] || apt-mark unhold $held >/dev/null')


@pytest.fixture(scope="module")
def env(lab_paths, hosts, tmp_path_factory) -> Iterator[dict[str, str]]:
    for h in hosts.values():
        wait_for_ssh(h)
    db = tmp_path_factory.mktemp("bench-history") / "fleet.db"
    e = {**os.environ, "FLEET_LAB_DIR": str(lab_paths.run), "FLEET_DB": str(db),
         "FLEET_MATRIX": MATRIX, "FLEET_INVENTORY": INVENTORY, "COLUMNS": "200"}
    pin(e, GOLDEN, "h1", "h2")
    yield e
    pin(e, GOLDEN, "h1", "h2")  # tidy: the other lab tests expect r570
    unpin_all(hosts.values())


def bench_side_by_side(env: dict[str, str], tmp: Path, suite_args: dict[str, list[str]]
                       ) -> dict[str, Path]:
    """`fleet bench run` on each host at the same time (same machine load), samples per host."""
    procs, out = {}, {}
    for host, extra in suite_args.items():
        out[host] = tmp / f"{host}.json"
        procs[host] = subprocess.Popen(
            [sys.executable, "-m", "fleet", "bench", "run", "-l", host, "--samples-out",
             str(out[host]), "--json", *extra],
            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for host, p in procs.items():
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, f"{host}: exit {p.returncode}\n{stdout}\n{stderr}"
        (res,) = json.loads(stdout)["hosts"]
        assert res["ok"] and res["host"] == host, res
    return out


def synthetic(env: dict[str, str], tmp: Path, *names: str) -> dict[str, Path]:
    args = ["--suite", "synthetic", "--source", "command", "--command", "fleet-lab-bench",
            "--repeats", "5"]
    return bench_side_by_side(env, tmp, {h: args for h in names})


def compare(env: dict[str, str], canary: Path, baseline: Path, metrics: list[str]
            ) -> tuple[int, dict]:
    return fleet(env, "bench", "compare", "--canary", str(canary), "--baseline", str(baseline),
                 *metrics)


def until_judged(measure: Callable[[], dict[str, Path]], env: dict[str, str],
                 metrics: list[str], want: str, never: str) -> tuple[int, dict]:
    """Measure h1 against h2 until the judge says `want`, at most three times.

    Side by side on a loaded 2-core CI machine (the unit suite runs next to the lab) the
    interval of one short run can straddle the allowance: an honest "inconclusive" (exit 3),
    and a rollout re-measures too. The opposite verdict `never` fails at once, and so do three
    inconclusive answers in a row.
    """
    verdicts = []
    for _ in range(3):
        files = measure()
        rc, doc = compare(env, files["h1"], files["h2"], metrics)
        verdicts.append((rc, doc["verdict"]))
        assert doc["verdict"] != never, (verdicts, doc)
        if doc["verdict"] == want:
            return rc, doc
    raise AssertionError(f"no {want!r} in three measurements: {verdicts}: {doc}")


def test_two_golden_hosts_pass_the_judge(env, hosts, tmp_path) -> None:
    assert hosts["h1"].nvml()["driver"] == R580 and hosts["h2"].nvml()["driver"] == R580
    rc, doc = until_judged(lambda: synthetic(env, tmp_path, "h1", "h2"), env,
                           SYNTHETIC_METRICS, want="pass", never="fail")
    assert rc == 0, doc
    assert {m["metric"] for m in doc["metrics"]} >= {"throughput", "latency_ms_p50"}


def test_slow_release_canary_fails_the_judge(env, hosts, tmp_path) -> None:
    pin(env, SLOW, "h1")  # a new driver branch: apply reboots h1 onto it
    try:
        hosts["h1"].close()
        assert hosts["h1"].nvml()["driver"] == R570
        files = synthetic(env, tmp_path, "h1", "h2")
        canary = json.loads(files["h1"].read_text())
        baseline = json.loads(files["h2"].read_text())
        ratio = (sorted(canary["throughput"])[2] / sorted(baseline["throughput"])[2])
        assert 0.65 < ratio < 0.85, ratio  # the lab's factor 0.75, measured on the host
        rc, doc = compare(env, files["h1"], files["h2"], SYNTHETIC_METRICS)
        assert (rc, doc["verdict"]) == (1, "fail"), doc
        verdicts = {m["metric"]: m["verdict"] for m in doc["metrics"]}
        assert verdicts["throughput"] == "fail", doc
    finally:
        pin(env, GOLDEN, "h1")
        hosts["h1"].close()
    assert hosts["h1"].nvml()["driver"] == R580


def _trace(path: Path, n: int = 150, rate: float = 75.0) -> Path:
    lines = [json.dumps({"fleet_trace": 1, "name": "lab-infer"})]
    lines += [json.dumps({"t": round(i / rate, 4), "method": "GET", "path": "/infer"})
              for i in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return path


def replay(env: dict[str, str], tmp: Path, lab_state, *names: str) -> dict[str, Path]:
    trace = _trace(tmp / "trace.jsonl")
    args = {h: ["--suite", "replay", "--trace", str(trace), "--warmup", "0.2",
                "--endpoint", f"http://{lab_state.host(h).address}:8000"] for h in names}
    return bench_side_by_side(env, tmp, args)


def test_replay_against_the_model_server_judges_the_slow_release(env, hosts, lab_state,
                                                                  tmp_path) -> None:
    rc, _ = until_judged(lambda: replay(env, tmp_path, lab_state, "h1", "h2"), env,
                         REPLAY_METRICS, want="pass", never="fail")
    assert rc == 0
    pin(env, SLOW, "h1")
    try:
        hosts["h1"].close()
        rc, doc = until_judged(lambda: replay(env, tmp_path, lab_state, "h1", "h2"), env,
                               REPLAY_METRICS, want="fail", never="pass")
        assert rc == 1
        lat = {m["metric"]: m for m in doc["metrics"]}["latency_ms"]
        assert lat["verdict"] == "fail", lat
    finally:
        pin(env, GOLDEN, "h1")
        hosts["h1"].close()
