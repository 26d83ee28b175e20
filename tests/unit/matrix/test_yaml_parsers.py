"""libyaml's parser and PyYAML's pure-Python one give `read_yaml` the same document.

`read_yaml` parses with libyaml when PyYAML has it (10x faster) and falls back to the pure-Python
parser for a document libyaml refuses, whose messages fleet reports; the data, the line of every
path, the source text of plain scalars and the problems must not depend on which one ran.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import fleet.domain.yaml_source as yaml_source

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = sorted(p for d in ("matrices", "fleet/data", "tests/data/matrices")
                 for p in (ROOT / d).rglob("*.yaml"))
EDGE = {
    "float-trap": "cuda: 12.10\nname: r1\n", "quoted": 'a: "x"\nb: \'y\'\n',
    "control-char": 'a: "x\x07y"\n', "nul": "a: b\x00\n", "bom": "\ufeffa: 1\n",
    "tab-indent": "a:\n\tb: 1\n", "non-bmp": 'a: "\U0001f600"\n', "duplicate": "a: 1\na: 2\n",
    "two-documents": "a: 1\n---\nb: 2\n", "anchor": "x: &a {p: 1}\ny: *a\n",
    "merge": "x: &a {p: 1}\ny: {<<: *a, q: 2}\n", "empty": "", "unclosed": "a: {b: 1\nc: 2\n",
    "bad-indent": "a:\n  b: 1\n c: 2\n", "next-line": "a: b\x85c: d\n",
}


def _read(text: str, fast: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    with monkeypatch.context() as m:
        if not fast:
            m.setattr(yaml_source, "_FAST", None)
        doc = yaml_source.read_yaml(text, "f.yaml")
    return (doc.data, dict(doc.source.lines),
            {k: (v.text, v.tag) for k, v in doc.source.scalars.items()},
            [str(p) for p in doc.problems])


def test_libyaml_is_used() -> None:
    assert yaml.__with_libyaml__ and yaml_source._FAST is yaml.CSafeLoader


@pytest.mark.parametrize("text", [p.read_text() for p in SHIPPED] + list(EDGE.values()),
                         ids=[str(p.relative_to(ROOT)) for p in SHIPPED] + list(EDGE))
def test_both_parsers_give_the_same_document(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _read(text, True, monkeypatch) == _read(text, False, monkeypatch)


@pytest.mark.parametrize("path", [p for p in SHIPPED if "fleet/data" in p.as_posix()],
                         ids=lambda p: p.name)
def test_shipped_tables_load_as_safe_load_reads_them(path: Path) -> None:
    text = path.read_text()
    assert yaml_source.load_shipped(text) == yaml.safe_load(text)
