"""`--help` never cuts an option name: `--apply-quarantine`, not `--apply-quaran…`.

typer lays each options panel out as a rich table that fills the terminal; at 80 columns rich
shrinks every column, the option names' too, and ends them with "…". Here the help tables keep
their name and type columns whole (rich then narrows only the help text, which wraps), by
giving typer's help module a table that marks those columns `no_wrap` as it renders. The patch
is made when help is first formatted, so building the app (every command's start) loads
nothing more.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _whole_name_table() -> Any:
    from rich.table import Table
    from rich.text import Text

    class WholeNameTable(Table):
        """Every column but the last (the help text) keeps its cells on one line; the help
        text wraps, and a word too long for its column folds rather than ending in "…"."""

        def __rich_console__(self, console: Any, options: Any) -> Any:
            for column in self.columns[:-1]:
                column.no_wrap = True
            for column in self.columns:
                column.overflow = "fold"
                for cell in column._cells:  # typer's help texts carry their own "ellipsis"
                    for text in (cell, *getattr(cell, "renderables", ())):
                        if isinstance(text, Text):
                            text.overflow = "fold"
            yield from super().__rich_console__(console, options)

    return WholeNameTable


def _patch_rich_utils() -> None:
    from typer import rich_utils

    if not getattr(rich_utils, "_fleet_whole_names", False):
        setattr(rich_utils, "Table", _whole_name_table())  # noqa: B010
        rich_utils._fleet_whole_names = True  # type: ignore[attr-defined]


def keep_option_names_whole() -> None:
    """Make typer's help (commands and groups) keep option names whole."""
    from typer.core import TyperCommand, TyperGroup

    for cls in (TyperCommand, TyperGroup):
        original: Callable[..., Any] = cls.format_help
        if getattr(original, "_fleet_whole_names", False):
            continue

        def format_help(self: Any, ctx: Any, formatter: Any,
                        _original: Callable[..., Any] = original) -> Any:
            _patch_rich_utils()
            return _original(self, ctx, formatter)

        format_help._fleet_whole_names = True  # type: ignore[attr-defined]
        setattr(cls, "format_help", format_help)  # noqa: B010
