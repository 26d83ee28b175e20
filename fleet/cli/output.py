"""Where output goes: results on stdout, diagnostics on stderr, `--json` alone on stdout.

- `stdout` (also `out`): a command's results: its tables (through `fleet.cli.table.show`),
  verdicts and summaries, so `fleet check | grep` and `fleet history events > f` work as with
  kubectl or gh. With `--json` (or `-o json`) it writes on stderr instead, so the one JSON
  document stays alone on stdout whatever a command prints;
- `console`: diagnostics: errors, warnings, progress, notes on what was done where;
- `emit_json`: the JSON document.

The operator contract (docs/exit-codes.md) is kept here and in `fleet.cli.app.run`:

- every JSON document is an object with a `schema` version, emitted by `emit_json`, at most one
  per command: with `--json`, stdout holds exactly one document whatever the exit code (the
  command's own, or an error document written by `emit_error`);
- user-supplied text (paths, host and pool names, reasons, values, messages from files) is
  never read as Rich markup or emoji codes: pass it through `esc`, or print a `Text`. Emoji
  codes are off on both consoles (`:100:` in `m.yaml:100: ...` stays a line number);
- nor does it reach the terminal as control characters: both consoles are
  `fleet.cli.safe_console.SafeConsole`, which prints ESC and its kin as U+FFFD.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from datetime import date, datetime
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from fleet.errors import Problem

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from rich.console import Console

SCHEMA = 1
"""Version of every JSON document on stdout: bumped when a key changes meaning or goes away
(new keys are added without a bump)."""

class _LazyConsole:
    """A rich `Console` made on first use. Loading rich is ~20 ms of every command's start-up,
    and `fleet probe --json` (JSON on stdout, no spinner off a terminal) never needs it unless
    something goes wrong."""

    __slots__ = ("_options", "_console")

    def __init__(self, **options: Any) -> None:
        object.__setattr__(self, "_options", options)
        object.__setattr__(self, "_console", None)

    def _made(self) -> Console:
        made: Console | None = object.__getattribute__(self, "_console")
        if made is None:
            from fleet.cli.safe_console import SafeConsole

            made = SafeConsole(**object.__getattribute__(self, "_options"))
            object.__setattr__(self, "_console", made)
        return made

    def __getattr__(self, name: str) -> Any:
        return getattr(self._made(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._made(), name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._made(), name)

    # rich's Live (under Progress and a rollout's live table) enters its console with `with`,
    # and Python looks special methods up on the type, past `__getattr__`
    def __enter__(self) -> Console:
        return self._made().__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._made().__exit__(*exc)


    def _route(self, to_stderr: bool) -> None:
        """Write on stderr (True) or stdout, without making the console."""
        made = object.__getattribute__(self, "_console")
        if made is None:
            object.__getattribute__(self, "_options")["stderr"] = to_stderr
        else:
            made.stderr = to_stderr


console = cast("Console", _LazyConsole(stderr=True, highlight=False, emoji=False))
"""Diagnostics: errors, warnings, progress, where a file was written. Always stderr."""

stdout = cast("Console", _LazyConsole(highlight=False, soft_wrap=True, emoji=False))
"""Results: tables, verdicts, summaries. stdout, or stderr under `--json` (see the module)."""

out = stdout


class _Quiet:
    """`console.status`'s stand-in off a terminal: nothing to animate, nothing to load."""

    def __enter__(self) -> _Quiet:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, *args: Any, **kwargs: Any) -> None:
        return None


def working(text: str) -> AbstractContextManager[Any]:
    """A spinner with `text` on stderr while a long step runs, where stderr is a terminal;
    elsewhere (CI logs, pipes, `--json` scripts) nothing, as rich's own status prints there."""
    if not sys.stderr.isatty():
        return _Quiet()
    return console.status(text)


class _State:
    """What this process has written on stdout: one JSON document at most."""

    emitted = False


def esc(value: object) -> str:
    """`value` as text safe inside a Rich markup string: `[bold]`, `[/x]` print as written."""
    from rich.markup import escape

    return escape(str(value))


def _default(obj: Any) -> Any:
    if isinstance(obj, datetime | date):
        return obj.isoformat()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, set | frozenset):
        return sorted(obj)
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if hasattr(obj, "as_dict"):
        return obj.as_dict()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def emit_json(obj: Mapping[str, Any]) -> None:
    """Print the command's one JSON document on stdout: an object with `schema` first among
    sorted keys, so output is stable across runs."""
    if not isinstance(obj, Mapping):
        raise TypeError("a JSON document on stdout is an object (it carries `schema`)")
    doc = {**obj, "schema": SCHEMA}
    sys.stdout.write(json.dumps(doc, default=_default, sort_keys=True, indent=2) + "\n")
    sys.stdout.flush()
    _State.emitted = True


def start_command(json_out: bool = False) -> None:
    """A new command begins (`fleet.cli.app.run`; tests run several in one process): with
    `--json`, results text goes to stderr, beside the diagnostics."""
    _State.emitted = False
    cast(_LazyConsole, stdout)._route(json_out)


def result(text: str, *, markup: bool = True) -> None:
    """One line of a command's result on stdout (markup read unless `markup=False`)."""
    stdout.print(text, markup=markup, highlight=False, soft_wrap=True)


def emitted() -> bool:
    """Whether a JSON document is on stdout already."""
    return _State.emitted


def error_document(code: int, message: str, where: Mapping[str, object] | None = None,
                   problems: Iterable[Problem] = ()) -> dict[str, Any]:
    where = dict(where or {})
    err: dict[str, Any] = {
        "code": code, "message": message,
        "where": {"file": where.get("file"), "line": where.get("line"),
                  "field": where.get("field")},
    }
    listed = [p.as_dict() for p in problems]
    if not listed and code == 2:  # bad input or usage: scripts read `problems` for every one
        listed = [Problem(_str(where.get("file")), _int(where.get("line")),
                          _str(where.get("field")), message).as_dict()]
    if listed:
        err["problems"] = listed
    return {"error": err}


def _str(value: object) -> str | None:
    return None if value is None else str(value)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) else None


def emit_error(code: int, message: str, where: Mapping[str, object] | None = None,
               problems: Iterable[Problem] = ()) -> None:
    """The error document of `--json`, unless the command already printed its own document
    (stdout holds one document, never two)."""
    if not _State.emitted:
        emit_json(error_document(code, message, where, problems))


def print_error(message: str, label: str = "error", style: str = "red") -> None:
    """One `label: message` line on stderr; the message is printed as written."""
    from rich.text import Text

    console.print(Text.assemble((label, style), ": ", message), soft_wrap=True)


def print_problems(problems: Iterable[Problem]) -> None:
    for p in problems:
        if p.severity == "error":
            print_error(str(p))
        else:
            print_error(str(p), "warning", "yellow")
