"""`fleet rollout start` with a pool's live gate on: with a Prometheus that does not answer
(test_live_gate.py: with none at all), the gate could not measure and the rollout pauses
(exit 3), saying why; `--prometheus` with a password in it is refused (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import ROOT, run_fleet
from tests.unit.prometheus.realprom import free_port

GATES = "gates: {health: true, benchmark: true, replay: true, max_retries: 1}"


def _matrix(tmp_path: Path) -> Path:
    text = (ROOT / "matrices" / "example.yaml").read_text()
    assert text.count(GATES) == 1  # the canary pool's
    live = GATES[:-1] + ", live: {enabled: true, family: vllm, host_label: host}}"
    path = tmp_path / "live.yaml"
    path.write_text(text.replace(GATES, live))
    return path


def _start(tmp_path: Path, *extra: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return run_fleet("--db", str(tmp_path / "f.db"), "rollout", "start", "-m",
                     str(_matrix(tmp_path)), "--sim-spec", str(_spec(tmp_path)), "--json",
                     *extra, cwd=tmp_path, env={"FLEET_PROMETHEUS_URL": "", **(env or {})})


def _spec(tmp_path: Path) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text("pools: {h100-canary: {hosts: 2}}\n")
    return spec


def test_an_unreachable_prometheus_pauses_the_rollout(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    r = _start(tmp_path, "--prometheus", url, env={"FLEET_PROMETHEUS_TOKEN": "tok-S3CRET"})
    assert r.returncode == 3, r.stderr
    doc = json.loads(r.stdout)
    assert doc["status"] == "paused" and f"Prometheus at {url} unreachable" in doc["reason"]
    assert doc["source"]["prometheus"] == url  # recorded: resume asks the same server
    assert "tok-S3CRET" not in r.stdout + r.stderr


def test_a_password_in_the_url_is_refused(tmp_path: Path) -> None:
    r = _start(tmp_path, "--prometheus", "http://fleet:hunter22@prom:9090")
    assert r.returncode == 2
    assert "--prometheus: a user or password in the URL" in r.stderr
    assert "hunter22" not in r.stderr + r.stdout
