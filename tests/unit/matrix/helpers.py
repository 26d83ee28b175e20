"""Build matrices for tests by editing the example as data and dumping it back to YAML."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from fleet.domain.matrix.loader import LoadedMatrix, parse_matrix
from fleet.errors import BadInput, Problem

from .conftest import EXAMPLE, TODAY


def example_data() -> dict[str, Any]:
    return copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))


def dump(data: Any) -> str:
    # default_style='"' would quote keys too; plain dump quotes strings that look like numbers
    return yaml.safe_dump(data, sort_keys=False)


def problems_of(data: Any) -> list[Problem]:
    """Every problem (errors and warnings) the loader reports for `data`."""
    try:
        return parse_matrix(dump(data), "m.yaml", TODAY).warnings
    except BadInput as exc:
        return exc.problems


def load(data: Any) -> LoadedMatrix:
    return parse_matrix(dump(data), "m.yaml", TODAY)


def errors(data: Any) -> list[Problem]:
    return [p for p in problems_of(data) if p.severity == "error"]


def warnings(data: Any) -> list[Problem]:
    return [p for p in problems_of(data) if p.severity == "warning"]


def release(name: str, driver: str, cuda: str, flavor: str = "open") -> dict[str, Any]:
    return {"name": name, "driver": {"version": driver, "flavor": flavor}, "cuda": cuda}


def single(rel: dict[str, Any], gpu: str | None = None) -> dict[str, Any]:
    """A minimal matrix: one release, golden for one pool `p`."""
    pool: dict[str, Any] = {"gpu_model": gpu} if gpu else {}
    return {"releases": [rel], "policy": {"golden": {"default": rel["name"]}},
            "pools": {"p": pool}}
