"""The command groups of `fleet <noun> <verb>`, in the order `--help` lists them."""

from __future__ import annotations

import typer


def groups() -> list[tuple[str, typer.Typer]]:
    from fleet.cli import matrix_cmd

    return [
        ("matrix", matrix_cmd.app),
    ]
