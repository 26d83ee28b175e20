"""The one table renderer of the CLI: names are never cut.

rich's own tables squeeze every column to the console's width and end what does not fit with
"…", in a pipe (80 columns) as on a narrow terminal, so host, release and package names, PCI
ids and remediation commands came out cut. Here a table is printed one of four ways (`-o`):

- `table` (the default): on a terminal, the columns as they fit its width. Name columns (hosts,
  releases, versions, kinds) are never broken; prose columns (messages, remediation, reasons)
  wrap at spaces. When even that does not fit, each row is stacked as `header: value` lines.
  Off a terminal (a pipe, a file, a CI log) every row is one line, as wide as it is;
- `wide`: every row on one line, as wide as it is, on a terminal too;
- `tsv`: a header line, then one line per row, cells separated by tabs; no colour, no
  wrapping, no padding; tabs and newlines inside a cell become spaces (a titled table is
  preceded by a `# title` line, tables by an empty line);
- `json`: the command's `--json` document (the command handles it; never a table).

Cells are Rich markup strings, as in a rich `Table` (escape user text with `output.esc`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.table import Table
    from rich.text import Text


class Format(StrEnum):
    """The `-o/--output` choices of every command that prints a table."""

    table = "table"
    wide = "wide"
    tsv = "tsv"
    json = "json"


OutputOpt = Annotated[Format | None, typer.Option(
    "--output", "-o", case_sensitive=False, show_default=False,
    help="table (fits the terminal, never cuts a name), wide (one line per row), tsv (tab-"
    "separated with a header, for scripts) or json (as --json).")]


def wants_json(json_out: bool, output: Format | str | None) -> bool:
    """`--json` and `-o json` are the same request."""
    return json_out or output == Format.json or output == "json"


@dataclass
class _Column:
    header: str
    prose: bool
    justify: str = "left"


@dataclass
class Grid:
    """A table to print with `show`: columns, rows of markup cells, an optional title.

    A column is a name column unless `prose=True`: its cells are never broken."""

    headers: Sequence[str] = ()
    title: str | None = None
    prose: Sequence[str] = ()
    columns: list[_Column] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for h in self.headers:
            self.add_column(h, prose=h in self.prose)

    def add_column(self, header: str, *, prose: bool = False, justify: str = "left") -> None:
        self.columns.append(_Column(header, prose, justify))

    def add_row(self, *cells: object) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        self.rows.append(["" if c is None else str(c) for c in cells])

    def __len__(self) -> int:
        return len(self.rows)


def _text(cell: str) -> Text:
    from rich.text import Text

    return Text.from_markup(cell, emoji=False)


def plain(cell: str) -> str:
    """A markup cell as plain text on one line (tsv)."""
    text = _text(cell).plain
    return " ".join(text.replace("\t", " ").splitlines()) if ("\n" in text or "\t" in text) \
        else text


def _rich_table(grid: Grid, *, fold: bool) -> Table:
    from rich.table import Table

    t = Table(box=None)  # the title is a line of its own (`show`): rich would wrap it
    for c in grid.columns:
        t.add_column(c.header, no_wrap=not (fold and c.prose), overflow="fold",
                     justify=c.justify)  # type: ignore[arg-type]
    for row in grid.rows:
        t.add_row(*(_text(cell) for cell in row))
    return t


def renderable(grid: Grid) -> RenderableType:
    """`grid` as a rich renderable for a live display (names whole, prose wrapping)."""
    from rich.console import Group

    table = _rich_table(grid, fold=True)
    return Group(_text(grid.title), table) if grid.title else table


def _tsv(grid: Grid) -> str:
    lines = []
    if grid.title:
        lines.append(f"# {plain(grid.title)}")
    lines.append("\t".join(c.header for c in grid.columns))
    lines += ["\t".join(plain(cell) for cell in row) for row in grid.rows]
    return "\n".join(lines) + "\n"


def _widths(console: Console, grid: Grid) -> tuple[int, int]:
    """(the width of the table with every cell on one line, the narrowest width that keeps
    every name whole and wraps prose only at spaces)."""
    from rich.measure import Measurement

    natural = Measurement.get(console, console.options.update(width=1 << 20),
                              _rich_table(grid, fold=False)).maximum
    cells = 0
    least = 0
    for i, c in enumerate(grid.columns):
        texts = [_text(c.header)] + [_text(row[i]) for row in grid.rows]
        most = max(max((len(line) for line in t.plain.splitlines()), default=0) for t in texts)
        words = max(max((len(w) for w in t.plain.split()), default=0) for t in texts)
        cells += most
        least += words if c.prose else most
    return natural, natural - cells + least


def _one_line_each(console: Console, grid: Grid, width: int) -> None:
    """Print `grid` at `width`, past the console's own width (a pipe's 80 columns)."""
    from rich.segment import Segment, Segments

    lines = console.render_lines(_rich_table(grid, fold=False),
                                 console.options.update(width=width), pad=False)
    segments: list[Segment] = []
    for line in lines:  # no trailing padding: a pipe's lines end where their text does
        while line and not line[-1].control and not line[-1].text.strip():
            line = line[:-1]
        if line and not line[-1].control:
            last = line[-1]
            line = [*line[:-1], Segment(last.text.rstrip(), last.style)]
        segments += [*line, Segment.line()]
    console.print(Segments(segments), crop=False, end="")


def _stacked(console: Console, grid: Grid) -> None:
    from rich.text import Text

    pad = max(len(c.header) for c in grid.columns) + 1
    for n, row in enumerate(grid.rows):
        if n:
            console.print()
        for c, cell in zip(grid.columns, row, strict=True):
            if not cell:
                continue
            line = Text(f"{c.header}:".ljust(pad) + " ", style="bold")
            line.append_text(_text(cell))
            console.print(line, soft_wrap=True)


def _results(console: Console | None) -> Console:
    if console is not None:
        return console
    from fleet.cli.output import stdout

    return stdout


def show(grid: Grid, output: Format | str | None = None, console: Console | None = None) -> None:
    """Print `grid` on the results console (stdout) as `output` asks (see the module)."""
    fmt = Format(output or Format.table)
    console = _results(console)
    if fmt is Format.json:
        raise ValueError("json is the command's document, not a table")
    if fmt is Format.tsv:
        console.file.write(_tsv(grid))
        console.file.flush()
        return
    if not grid.columns:
        return
    if grid.title:
        console.print(_text(grid.title), style="italic", soft_wrap=True)
    natural, least = _widths(console, grid)
    if fmt is Format.wide or not console.is_terminal:
        _one_line_each(console, grid, max(natural, 1))
    elif natural <= console.width:
        console.print(_rich_table(grid, fold=False))
    elif least <= console.width:
        console.print(_rich_table(grid, fold=True))
    else:
        _stacked(console, grid)


def show_all(grids: Sequence[Grid], output: Format | str | None = None,
             console: Console | None = None) -> None:
    """Several tables of one command, an empty line apart."""
    console = _results(console)
    for i, g in enumerate(grids):
        if i and Format(output or Format.table) is Format.tsv:
            console.file.write("\n")
        elif i:
            console.print()
        show(g, output, console)


__all__ = ["Format", "Grid", "OutputOpt", "plain", "renderable", "show", "show_all",
           "wants_json"]
