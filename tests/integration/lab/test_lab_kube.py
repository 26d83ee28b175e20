"""The session lab's real Kubernetes API server: one Ready Node per lab host, `kubeconfig` in the
status and the inventory, Node readiness following the lab host (NotReady while it is down), and
nothing of it outside the run dir.

Uses h4 (L40S), which the Kubernetes drain tests leave alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleet.lab import kube, lab

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[3]


def until(what: str, check, timeout: float = 60) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


def test_every_lab_host_is_a_ready_node(lab_paths, lab_state) -> None:  # noqa: ANN001
    st = lab.status(lab_paths)
    assert st["kubeconfig"] == lab_state.kubeconfig
    assert Path(st["kubeconfig"]).is_relative_to(lab_paths.run)  # never ~/.kube
    assert lab_state.kube_ready_s is not None and lab_state.kube_ready_s < 120
    api = kube.api_for(lab_state.kubeconfig)
    assert kube.node_names(api) == sorted(h.name for h in lab_state.hosts)
    until("every Node Ready", lambda: all(kube.node_ready(api, h.name) for h in lab_state.hosts))
    out = subprocess.run(
        [sys.executable, "-c", "import json, runpy; g = runpy.run_path('inventories/lab.py'); "
         "print(json.dumps([d for n, d in g['lab']]))"],
        env={**os.environ, "FLEET_LAB_DIR": str(lab_paths.run)}, cwd=ROOT, capture_output=True,
        text=True, timeout=30, check=True).stdout
    assert {d["kubeconfig"] for d in json.loads(out)} == {lab_state.kubeconfig}


def test_a_node_is_not_ready_while_its_host_is_down(lab_paths, lab_state) -> None:  # noqa: ANN001
    api = kube.api_for(lab_state.kubeconfig)
    until("h4 Ready", lambda: kube.node_ready(api, "h4"))
    lab.inject(lab_paths, "h4", ["reboot-hang"])
    try:
        lab.reboot(lab_paths, "h4", wait=False)
        until("h4 NotReady while down", lambda: not kube.node_ready(api, "h4"))
        time.sleep(1)  # it stays NotReady while the host stays down
        assert not kube.node_ready(api, "h4")
    finally:
        lab.reset(lab_paths, "h4")  # powers it on again
    until("h4 Ready once booted", lambda: kube.node_ready(api, "h4"), timeout=90)
