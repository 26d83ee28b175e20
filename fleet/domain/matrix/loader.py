"""Read a matrix file: YAML with line numbers, pydantic shapes, then the NVIDIA rules.

`load_matrix` returns the matrix with its warnings, or raises `BadInput` carrying every problem
of the file, each with file, line and field path (`releases[1].driver.version`).
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from fleet.domain.matrix import rules
from fleet.domain.matrix.models import Matrix
from fleet.domain.matrix.profiles import MigPartedFile
from fleet.domain.matrix.references import reference_problems
from fleet.domain.utf8 import decode_utf8
from fleet.domain.yaml_source import SourceMap, format_path, read_yaml
from fleet.errors import BadInput, Problem

_YAML_KIND = {
    "tag:yaml.org,2002:float": "the number",
    "tag:yaml.org,2002:int": "the number",
    "tag:yaml.org,2002:bool": "the boolean",
    "tag:yaml.org,2002:null": "null",
    "tag:yaml.org,2002:timestamp": "the date",
}


@dataclass(frozen=True)
class LoadedMatrix:
    """A valid matrix, the warnings found on the way, and where it came from."""

    matrix: Matrix
    warnings: list[Problem] = field(default_factory=list)
    path: str | None = None


def _reader_beside(matrix_path: str | Path) -> Callable[[str], str]:
    """Reads a file named relative to the matrix's folder (a profile's mig-parted layout)."""
    def read(relative: str) -> str:
        path = Path(matrix_path).parent / relative
        return decode_utf8(path.read_bytes(), str(path))
    return read


def load_matrix(path: str | Path, today: date | None = None) -> LoadedMatrix:
    """Load and validate a matrix file; `today` enables the end-of-life warnings."""
    name = str(path)
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise BadInput.single("no such file", file=name) from None
    except IsADirectoryError:
        raise BadInput.single("is a directory, not a matrix file", file=name) from None
    except OSError as exc:
        raise BadInput.single(f"cannot read: {exc.strerror or exc}", file=name) from None
    text = decode_utf8(raw, name)
    return parse_matrix(text, name, today, read_beside=_reader_beside(path))


def parse_matrix(text: str, file: str = "<matrix>", today: date | None = None,
                 read_beside: Callable[[str], str] | None = None) -> LoadedMatrix:
    """Validate matrix YAML given as text (see `load_matrix`); `read_beside` reads the files a
    matrix names relative to its folder (None: such a reference is an error)."""
    doc = read_yaml(text, file)
    problems = list(doc.problems)
    if doc.data is None and not problems:
        raise BadInput.single(
            "the file is empty; a matrix needs releases, policy and pools", file=file, line=1
        )
    if doc.data is not None and not isinstance(doc.data, dict):
        problems.append(Problem(file, 1, None, (
            "the top level must be a mapping with releases, policy and pools, "
            f"not {_kind(doc.data)}"
        )))
    matrix: Matrix | None = None
    if isinstance(doc.data, dict):
        try:
            matrix = Matrix.model_validate(doc.data)
        except ValidationError as exc:
            schema = _pydantic_problems(exc, doc.data, doc.source, file)
            problems += schema + _references_beside(schema, doc.data, doc.source, file)
    beside: dict[str, tuple[str, SourceMap]] = {}
    if matrix is not None:
        matrix, beside, found = read_mig_files(matrix, file, read_beside)
        problems += found
    if matrix is not None:
        problems += [_locate_beside(p, doc.source, file, beside)
                     for p in rules.check(matrix, today)]
    problems = _sorted(problems)
    if matrix is None or any(p.severity == "error" for p in problems):
        raise BadInput(problems)
    return LoadedMatrix(matrix, problems, file)


def _references_beside(schema: list[Problem], data: dict[str, Any], source: SourceMap,
                       file: str) -> list[Problem]:
    """The cross-section problems of a matrix the schema refused, reported with the schema's
    (every error of the file in one run), except where the schema already names that field or
    one around it."""
    refused = [p.field or "" for p in schema]

    def covered(field: str) -> bool:
        return any(field == f or field.startswith((f + ".", f + "[")) or not f
                   for f in refused)

    return [_locate(p, source, file) for p in reference_problems(data)
            if not covered(p.field or "")]


def _sorted(problems: list[Problem]) -> list[Problem]:
    unique = list(dict.fromkeys(problems))
    return sorted(unique, key=lambda p: (p.file or "", p.line or 0, p.field or "", p.message))


def read_mig_files(
    matrix: Matrix, file: str, read_beside: Callable[[str], str] | None
) -> tuple[Matrix | None, dict[str, tuple[str, SourceMap]], list[Problem]]:
    """Fill each profile's `mig.file` layout in from the file beside the matrix.

    Returns the matrix (None when a layout could not be read), the field prefix -> (layout file,
    its source map) of each file read (so rule problems name that file's lines), and problems."""
    problems: list[Problem] = []
    beside: dict[str, tuple[str, SourceMap]] = {}
    profiles = dict(matrix.profiles)
    for name, profile in matrix.profiles.items():
        mig = profile.mig
        if mig is None or mig.file is None:
            continue
        field = f"profiles.{name}.mig.file"
        if read_beside is None:
            problems.append(Problem(file, None, field, "a layout file needs the matrix read "
                                    "from a file (fleet matrix check FILE)"))
            continue
        path = str(Path(file).parent / mig.file)
        try:
            text = read_beside(mig.file)
        except BadInput as exc:  # not UTF-8: its line and column
            problems += exc.problems
            continue
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(Problem(file, None, field, f"cannot read {path}: "
                                    f"{getattr(exc, 'strerror', None) or exc}"))
            continue
        doc = read_yaml(text, path)
        problems += doc.problems
        if doc.problems:
            continue
        if not isinstance(doc.data, dict):
            problems.append(Problem(path, 1, None, "a mig-parted file is a mapping with "
                                    "version and mig-configs"))
            continue
        try:
            layout = MigPartedFile.model_validate(doc.data)
        except ValidationError as exc:
            problems += _pydantic_problems(exc, doc.data, doc.source, path)
            continue
        beside[f"profiles.{name}.mig.layout"] = (path, doc.source)
        profiles[name] = profile.model_copy(update={
            "mig": mig.model_copy(update={"layout": layout})})
    if any(p.severity == "error" for p in problems):
        return None, beside, problems
    return matrix.model_copy(update={"profiles": profiles}), beside, problems


def _locate_beside(problem: Problem, source: SourceMap, file: str,
                   beside: dict[str, tuple[str, SourceMap]]) -> Problem:
    """`_locate`, except that a field inside a layout read from its own file names that file."""
    for prefix, (path, layout_source) in beside.items():
        if problem.field is not None and problem.field.startswith(prefix + "."):
            inner = problem.field[len(prefix) + 1:]
            return Problem(path, layout_source.line_of(inner), inner, problem.message,
                           problem.severity)
    return _locate(problem, source, file)


def _locate(problem: Problem, source: SourceMap, file: str) -> Problem:
    return Problem(
        file, source.line_of(problem.field), problem.field, problem.message, problem.severity
    )


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, str):
        return "a string"
    return f"the value {value!r}"


def _pydantic_problems(
    exc: ValidationError, data: dict[str, Any], source: SourceMap, file: str
) -> list[Problem]:
    out = []
    for err in exc.errors(include_url=False):
        path = _data_path(err["loc"], data)
        field_path = format_path(path)
        line = source.line_of(field_path)
        out.append(Problem(file, line, field_path or None, _message(err, path, source)))
    return out


def _data_path(loc: tuple[Any, ...], data: Any) -> tuple[Any, ...]:
    """The part of a pydantic `loc` that names real places in the data (drops union tags)."""
    path: list[Any] = []
    current = data
    for item in loc:
        if item == "[key]":
            continue
        if isinstance(current, dict):
            path.append(item)
            if item not in current:
                break  # a missing or unknown key: the path ends here
            current = current[item]
        elif isinstance(current, list) and isinstance(item, int) and 0 <= item < len(current):
            path.append(item)
            current = current[item]
        else:
            break
    return tuple(path)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _message(err: Any, path: tuple[Any, ...], source: SourceMap) -> str:
    kind = err["type"]
    msg = str(err["msg"])
    last = path[-1] if path else None
    if kind == "missing":
        return f"required key {last!r} is missing"
    if kind == "extra_forbidden":
        return f"unknown key {last!r}{_suggestion(path)}"
    if kind in ("model_type", "dict_type"):
        return f"expected a mapping (key: value), got {_kind(err.get('input'))}"
    if kind == "list_type":
        return f"expected a list, got {_kind(err.get('input'))}"
    if kind == "value_error":
        return msg.removeprefix("Value error, ")
    if kind == "string_type":
        scalar = source.scalars.get(format_path(path))
        if scalar is not None and scalar.tag in _YAML_KIND:
            what = _YAML_KIND[scalar.tag]
            value = err.get("input")
            shown = (
                "" if what == "null"
                else " " + ("true" if value is True else "false" if value is False else str(value))
            )
            return f"quote it: YAML reads {scalar.text} as {what}{shown}; write \"{scalar.text}\""
    if "input" in err and kind.endswith(("_type", "_parsing")) or kind in ("literal_error",):
        return f"{msg} (got {_short(err['input'])})"
    return msg


def _suggestion(path: tuple[Any, ...]) -> str:
    allowed = _allowed_keys(path[:-1])
    if not allowed:
        return ""
    close = difflib.get_close_matches(str(path[-1]), allowed, n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (allowed: {', '.join(allowed)})"


def _allowed_keys(path: tuple[Any, ...]) -> list[str]:
    """Field names of the model at `path` in a Matrix, or [] when it is not a model."""
    tp: Any = Matrix
    for item in path:
        tp = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            info = tp.model_fields.get(str(item))
            if info is None:
                return []
            tp = info.annotation
        elif typing.get_origin(tp) is list:
            tp = typing.get_args(tp)[0]
        elif typing.get_origin(tp) is dict:
            tp = typing.get_args(tp)[1]
        else:
            return []
    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return list(tp.model_fields)
    return []


def _unwrap(tp: Any) -> Any:
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(members) != 1:
                return tp
            tp = members[0]
        else:
            return tp
