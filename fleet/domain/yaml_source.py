"""YAML with line numbers: parse a document and remember where every key and item came from.

Pydantic reports errors by `loc` (a path of keys and indexes); users need `file:line`. The reader
composes PyYAML's node tree with the safe loader and walks it itself, so that it can

* record the line of every mapping key and sequence item, keyed by a field path such as
  `releases[1].driver.version`;
* keep the source text of plain scalars, to explain that `cuda: 12.10` was read as the float 12.1;
* report duplicate keys (PyYAML silently keeps the last one) and recursive aliases;

and report every such problem, not only the first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from fleet.errors import Problem

_FAST: type[yaml.SafeLoader] | None = getattr(yaml, "CSafeLoader", None)
"""libyaml's parser where PyYAML was built with it (the wheels are): the same nodes, tags and
marks, about 10x faster than the pure-Python one. The matrix and the shipped data tables it is
checked against are ~2,000 nodes: about 40 ms of every command that loads a matrix. A document
libyaml refuses is parsed again by the pure-Python parser, whose error messages (tested, golden)
are the ones fleet reports."""

PathItem = str | int
Path = tuple[PathItem, ...]

MAX_NODES = 100_000
"""Alias expansion limit: a document that expands beyond this is refused (billion laughs)."""
MAX_DEPTH = 64
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MAP_TAG = "tag:yaml.org,2002:map"


def format_path(path: Path) -> str:
    """`("releases", 1, "driver", "version")` -> `releases[1].driver.version`."""
    out = ""
    for item in path:
        if isinstance(item, int) and not isinstance(item, bool):
            out += f"[{item}]"
        else:
            out += ("." if out else "") + str(item)
    return out


_LAST_PART = re.compile(r"(\.[^.\[\]]*|\[\d+\])$")


def parent_field(field_path: str) -> str | None:
    """The enclosing field path: `releases[1].driver` -> `releases[1]` -> `releases` -> ``."""
    if not field_path:
        return None
    trimmed = _LAST_PART.sub("", field_path)
    if trimmed == field_path:
        return ""
    return trimmed


@dataclass(frozen=True)
class Scalar:
    """Where a plain (unquoted) scalar came from and what YAML made of it."""

    text: str
    tag: str


@dataclass
class SourceMap:
    """Line numbers (1-based) and scalar texts by field path."""

    lines: dict[str, int] = field(default_factory=dict)
    scalars: dict[str, Scalar] = field(default_factory=dict)

    def line_of(self, field_path: str | None) -> int | None:
        """The line of a field, else of its nearest enclosing field that has one."""
        current = field_path
        while current is not None:
            if current in self.lines:
                return self.lines[current]
            current = parent_field(current)
        return None


@dataclass
class YamlDocument:
    data: Any
    source: SourceMap
    problems: list[Problem]


class _Walker:
    def __init__(self, loader: yaml.SafeLoader, file: str) -> None:
        self.loader = loader
        self.file = file
        self.source = SourceMap()
        self.problems: list[Problem] = []
        self.count = 0
        self.too_big = False

    def problem(self, node: Node, path: Path, message: str) -> None:
        self.problems.append(
            Problem(self.file, node.start_mark.line + 1, format_path(path) or None, message)
        )

    def walk(self, node: Node, path: Path, active: frozenset[int]) -> Any:
        self.count += 1
        if self.count > MAX_NODES or len(path) > MAX_DEPTH:
            if not self.too_big:
                self.too_big = True
                self.problem(node, path, "document too large or too deeply nested (aliases?)")
            return None
        if id(node) in active:
            self.problem(node, path, "recursive alias: a node contains itself")
            return None
        if isinstance(node, ScalarNode):
            return self.scalar(node, path)
        inner = active | {id(node)}
        if node.tag not in (_SEQ_TAG, _MAP_TAG, "tag:yaml.org,2002:omap"):
            self.problem(node, path, f"unsupported YAML tag {node.tag}")
            return None
        if isinstance(node, SequenceNode):
            items = []
            for i, child in enumerate(node.value):
                self.source.lines.setdefault(format_path((*path, i)), child.start_mark.line + 1)
                items.append(self.walk(child, (*path, i), inner))
            return items
        if isinstance(node, MappingNode):
            return self.mapping(node, path, inner)
        return None  # pragma: no cover - PyYAML has no other node kinds

    def construct(self, node: ScalarNode, path: Path) -> Any:
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            self.problem(node, path, f"cannot read value: {getattr(exc, 'problem', exc)}")
            return None

    def scalar(self, node: ScalarNode, path: Path) -> Any:
        value = self.construct(node, path)
        if not node.style:  # plain: None from PyYAML's parser, "" from libyaml's
            self.source.scalars[format_path(path)] = Scalar(node.value, node.tag)
        return value

    def mapping(self, node: MappingNode, path: Path, active: frozenset[int]) -> Any:
        out: dict[Any, Any] = {}
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                self.problem(key_node, path, "a mapping key must be a plain value, not a list/map")
                continue
            key = self.construct(key_node, path)
            if key == "<<" or key_node.tag == "tag:yaml.org,2002:merge":
                self.problem(key_node, path, "YAML merge keys (<<) are not supported")
                continue
            try:
                hash(key)
            except TypeError:
                self.problem(key_node, path, "unusable mapping key")
                continue
            line = key_node.start_mark.line + 1
            if key in seen:
                self.problem(
                    key_node, (*path, key),
                    f"duplicate key {key!r} (first defined on line {seen[key]}); "
                    "YAML would silently keep only the last one",
                )
                continue
            seen[key] = line
            self.source.lines[format_path((*path, key))] = line
            out[key] = self.walk(value_node, (*path, key), active)
        return out


def load_shipped(text: str) -> Any:
    """A YAML file fleet ships (its data tables), loaded plainly: with libyaml where present.
    Their rows are checked by their readers; no line numbers are needed for a file of ours."""
    return yaml.load(text, Loader=_FAST or yaml.SafeLoader)  # both are safe loaders


class _BoundedLoader(yaml.SafeLoader):  # type: ignore[misc]
    """PyYAML's safe loader with a nesting limit: its composer recurses once per level, so a
    deep enough document ends in RecursionError instead of a problem naming the line."""

    _depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self._depth >= MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(
                None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def read_yaml(text: str, file: str) -> YamlDocument:
    """Parse one YAML document; syntax errors become problems (data None), never exceptions."""
    if _FAST is not None:
        loader = _FAST(text)
        try:
            node = loader.get_single_node()
        except yaml.YAMLError:
            pass  # the pure-Python parser below says what is wrong
        else:
            return _walked(loader, node, file)
        finally:
            loader.dispose()
    try:
        loader = _BoundedLoader(text)
    except yaml.reader.ReaderError as exc:
        return YamlDocument(None, SourceMap(), [_reader_problem(exc, text, file)])
    try:
        try:
            node = loader.get_single_node()
        except yaml.reader.ReaderError as exc:
            return YamlDocument(None, SourceMap(), [_reader_problem(exc, text, file)])
        except yaml.MarkedYAMLError as exc:
            return YamlDocument(None, SourceMap(), [_syntax_problem(exc, file)])
        except yaml.YAMLError as exc:
            problem = Problem(file, None, None, f"YAML error: {exc}")
            return YamlDocument(None, SourceMap(), [problem])
        return _walked(loader, node, file)
    finally:
        loader.dispose()


def _walked(loader: yaml.SafeLoader, node: Node | None, file: str) -> YamlDocument:
    if node is None:
        return YamlDocument(None, SourceMap(), [])
    walker = _Walker(loader, file)
    walker.source.lines[""] = node.start_mark.line + 1
    data = walker.walk(node, (), frozenset())
    return YamlDocument(data, walker.source, walker.problems)


def _reader_problem(exc: yaml.reader.ReaderError, text: str, file: str) -> Problem:
    line = text[: exc.position].count("\n") + 1
    return Problem(file, line, None, f"not valid YAML text: character {exc.character!r} "
                   "is not allowed (control characters must not appear in YAML)")


def _syntax_problem(exc: yaml.MarkedYAMLError, file: str) -> Problem:
    mark = exc.problem_mark or exc.context_mark
    line = mark.line + 1 if mark is not None else None
    what = exc.problem or "invalid YAML"
    context = ""
    if exc.context:
        context = f" ({exc.context}"
        if exc.context_mark is not None and exc.context_mark is not mark:
            context += f" started on line {exc.context_mark.line + 1}"
        context += ")"
    return Problem(file, line, None, f"YAML syntax error: {what}{context}")
