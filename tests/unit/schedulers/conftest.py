"""Fakes of scontrol, squeue and kubectl (tests/data/schedulers/bin) behind the real runner."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from fleet.schedulers.runner import Runner, subprocess_runner

DATA = Path(__file__).resolve().parents[2] / "data" / "schedulers"
BIN = DATA / "bin"


class FakeCluster:
    """The fakes' state file, and a runner that finds the fakes first on PATH."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.runner: Runner = subprocess_runner(env={
            **os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "FLEET_FAKE_STATE": str(path)})

    def read(self) -> dict[str, Any]:
        return json.loads(self.path.read_text())

    def write(self, state: dict[str, Any]) -> None:
        self.path.write_text(json.dumps(state))

    def slurm_node(self, name: str) -> dict[str, Any]:
        return self.read()["slurm"]["nodes"][name]

    def k8s_node(self, name: str) -> dict[str, Any]:
        return self.read()["k8s"]["nodes"][name]

    def log(self) -> list[list[str]]:
        return self.read().get("log", [])


@pytest.fixture
def cluster(tmp_path: Path) -> FakeCluster:
    c = FakeCluster(tmp_path / "state.json")
    c.write({"slurm": {"nodes": {}}, "k8s": {"nodes": {}, "pods": {}}, "log": []})
    return c


@pytest.fixture
def node_json() -> dict[str, Any]:
    return json.loads((DATA / "kubectl_get_node.json").read_text())


def k8s_node(sample: dict[str, Any], name: str, **changes: Any) -> dict[str, Any]:
    node = copy.deepcopy(sample)
    node["metadata"]["name"] = name
    node["metadata"]["labels"]["kubernetes.io/hostname"] = name
    for key, value in changes.items():
        if key == "unschedulable":
            node["spec"]["unschedulable"] = value
        elif key == "annotations":
            node["metadata"]["annotations"].update(value)
        elif key == "labels":
            node["metadata"]["labels"].update(value)
        elif key == "ready":
            for c in node["status"]["conditions"]:
                if c["type"] == "Ready":
                    c["status"] = "True" if value else "Unknown"
                    c["reason"] = "KubeletReady" if value else "NodeStatusUnknown"
    return node
