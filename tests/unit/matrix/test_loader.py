"""The loader: file errors, line mapping, and never crashing on random or mutated input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.domain.matrix.loader import load_matrix, parse_matrix
from fleet.domain.matrix.models import Matrix
from fleet.errors import BadInput

from .conftest import EXAMPLE, TODAY
from .helpers import dump, example_data


def test_example_loads() -> None:
    loaded = load_matrix(EXAMPLE, TODAY)
    assert isinstance(loaded.matrix, Matrix)
    assert loaded.matrix.golden_for("h100").name == "r580-cuda13.0"
    assert loaded.matrix.golden_for("h100-canary").name == "r595-cuda13.2"
    assert loaded.matrix.pools["h100"].rollout.wave_sizes(40) == [1, 5, 8, 8, 8, 8, 2]


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(BadInput) as info:
        load_matrix(tmp_path / "nope.yaml")
    assert str(info.value).endswith("nope.yaml: no such file")


def test_directory_and_binary(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="is a directory"):
        load_matrix(tmp_path)
    binary = tmp_path / "m.yaml"
    binary.write_bytes(b"\xff\xfe\x00releases")
    with pytest.raises(BadInput, match="not UTF-8"):
        load_matrix(binary)


def test_all_errors_reported_together() -> None:
    data = example_data()
    data["releases"][0]["cuda"] = 12.1
    data["releases"][1]["driver"]["version"] = "580.95.05;reboot"
    data["pools"]["h100"]["rollout"]["wavez"] = [1]
    with pytest.raises(BadInput) as info:
        parse_matrix(dump(data), "m.yaml", TODAY)
    fields = [p.field for p in info.value.problems]
    assert fields == ["releases[0].cuda", "releases[1].driver.version",
                      "pools.h100.rollout.wavez"]
    assert all(p.line and p.file == "m.yaml" for p in info.value.problems)


def test_line_numbers_point_at_the_field() -> None:
    text = EXAMPLE.read_text().replace('cuda: "13.2.1"', "cuda: 13.0")
    with pytest.raises(BadInput) as info:
        parse_matrix(text, "example.yaml", TODAY)
    (problem,) = info.value.problems
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "cuda: 13.0" in t)
    assert (problem.line, problem.field) == (line, "releases[2].cuda")
    assert problem.message.startswith("quote it: YAML reads 13.0 as the number 13.0")


def test_float_trap_message() -> None:
    text = EXAMPLE.read_text().replace('cuda: "13.0.2"', "cuda: 12.10")
    with pytest.raises(BadInput) as info:
        parse_matrix(text, "m.yaml")
    assert "quote it: YAML reads 12.10 as the number 12.1" in str(info.value)


def test_aliases_that_explode_are_refused() -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefg", "bcdefgh", strict=True)
    )
    with pytest.raises(BadInput, match="too large"):
        parse_matrix(bomb)


def test_recursive_alias() -> None:
    with pytest.raises(BadInput):
        parse_matrix("releases: &r [*r]\n")


def test_python_tags_are_refused() -> None:
    with pytest.raises(BadInput, match="unsupported YAML tag|cannot read value"):
        parse_matrix("releases: !!python/object/apply:os.system [id]\n")


# --- property tests: random or mutated matrices never crash the loader --------------------------

def _outcome(text: str) -> None:
    try:
        result = parse_matrix(text, "m.yaml", TODAY)
    except BadInput as exc:
        assert exc.problems, "BadInput without problems"
        assert all(p.file == "m.yaml" for p in exc.problems)
        assert any(p.severity == "error" for p in exc.problems)
        for p in exc.problems:
            str(p)
    else:
        assert isinstance(result.matrix, Matrix)


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 2000), st.floats(allow_nan=False),
    st.text(max_size=12), st.sampled_from(["12.10", "550.54.15", "r570-cuda12.8", "H100",
                                           "20%", "open", "$(id)", "", "yes"]),
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated_examples(draw: st.DrawFn) -> str:
    data = example_data()
    for _ in range(draw(st.integers(1, 4))):
        paths = [p for p in _paths(data) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent: Any = data
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["delete", "scalar", "list", "dict", "rename", "dup"]))
        last = path[-1]
        if action == "delete":
            del parent[last]
        elif action == "scalar":
            parent[last] = draw(scalars)
        elif action == "list":
            parent[last] = [parent[last]]
        elif action == "dict":
            parent[last] = {"x": parent[last]}
        elif action == "rename" and isinstance(parent, dict):
            parent[str(last) + "x"] = parent.pop(last)
        elif action == "dup" and isinstance(parent, list):
            parent.append(parent[last])
    return dump(data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_examples())
def test_mutated_example_never_crashes(text: str) -> None:
    _outcome(text)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=300))
def test_random_text_never_crashes(text: str) -> None:
    _outcome(text)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_random_edits_of_the_source_never_crash(data: st.DataObject) -> None:
    text = EXAMPLE.read_text()
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(text)))
        j = data.draw(st.integers(i, min(len(text), i + 20)))
        text = text[:i] + data.draw(st.text(alphabet=" \n:-[]{}\"'#&*!%|>0123456789abc.",
                                            max_size=6)) + text[j:]
    _outcome(text)


@settings(max_examples=100, deadline=None)
@given(st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20))
def test_random_documents_never_crash(doc: Any) -> None:
    _outcome(yaml.safe_dump(doc))
