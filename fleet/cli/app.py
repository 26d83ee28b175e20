"""The `fleet` entry point: command groups, global options and the exit-code boundary."""

from __future__ import annotations

import logging
import os
import sys
import traceback
from pathlib import Path
from typing import Annotated

import typer

from fleet import __version__
from fleet.cli.output import console, print_problems
from fleet.errors import BadInput, ExitCode, FleetError

app = typer.Typer(
    name="fleet",
    help=(
        "Keep NVIDIA GPU hosts conformant: version matrix, staged rollouts with health gates, "
        "drift audits and one-command rollback.\n\n"
        "Exit codes: 0 ok, 1 problems found, 2 bad input or usage, 3 could not complete."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
)


class Settings:
    """Global options shared by every command (kept on the typer context)."""

    def __init__(self, db: str) -> None:
        self.db = db


def _version(value: bool) -> None:
    if value:
        typer.echo(f"fleet {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    db: Annotated[
        str,
        typer.Option(
            "--db",
            envvar="FLEET_DB",
            help="History database: a SQLite path or any SQLAlchemy URL "
            "(postgresql+psycopg://user@host/db).",
        ),
    ] = "fleet.db",
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    ctx.obj = Settings(db=db)


def _quiet_libraries() -> None:
    """paramiko logs every failed handshake with a traceback; fleet reports those itself."""
    for name in ("paramiko", "pyinfra"):
        logger = logging.getLogger(name)
        logger.addHandler(logging.NullHandler())
        logger.propagate = False


def run(argv: list[str] | None = None) -> None:
    """Console-script entry: the one place where errors become exit codes."""
    _quiet_libraries()
    try:
        app(args=argv, standalone_mode=True)
    except FleetError as exc:
        if isinstance(exc, BadInput):
            print_problems(exc.problems)
        else:
            console.print(f"[red]error[/red]: {exc}", soft_wrap=True)
        sys.exit(int(exc.exit_code))
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/yellow]")
        sys.exit(int(ExitCode.INCOMPLETE))
    except FileNotFoundError as exc:
        console.print(f"[red]error[/red]: {exc}")
        sys.exit(int(ExitCode.BAD_INPUT))
    except Exception as exc:  # a bug: say so plainly, never pretend it was bad input
        console.print(f"[red]internal error[/red]: {type(exc).__name__}: {exc}")
        if os.environ.get("FLEET_DEBUG"):
            traceback.print_exc()
        else:
            console.print("set FLEET_DEBUG=1 for the traceback")
        sys.exit(int(ExitCode.INCOMPLETE))


def settings(ctx: typer.Context) -> Settings:
    obj = ctx.find_root().obj
    assert isinstance(obj, Settings)
    return obj


def existing_file(path: Path) -> Path:
    if not path.is_file():
        raise BadInput.single("no such file", file=str(path))
    return path


def _register() -> None:
    """Attach command groups; each lives in its own module so a broken one is easy to find."""
    from fleet.cli import commands

    commands.register_top_level(app)
    for name, sub in commands.groups():
        app.add_typer(sub, name=name)


_register()
