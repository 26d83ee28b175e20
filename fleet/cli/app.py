"""The `fleet` entry point: command groups, global options and the exit-code boundary."""

from __future__ import annotations

import gc
import logging
import os
import sys
import traceback
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from typer.core import TyperGroup

from fleet import __version__
from fleet.cli.output import console, emit_error, print_error, print_problems, start_command
from fleet.errors import BadInput, ExitCode, FleetError, Problem

HELP = (
    "Keep NVIDIA GPU hosts conformant: version matrix, staged rollouts with health gates, "
    "drift audits and one-command rollback.\n\n"
    "Exit codes: 0 ok, 1 problems found, 2 bad input or usage, 3 could not complete."
)


class Settings:
    """Global options shared by every command (kept on the typer context)."""

    def __init__(self, db: str) -> None:
        self.db = db


def _version(value: bool) -> None:
    if value:
        typer.echo(f"fleet {__version__}")
        raise typer.Exit()


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


def json_requested(args: list[str]) -> bool:
    """Whether the command line asks for `--json` or `-o json` (before a `--`: what follows is
    data, as in `fleet exec -- cmd --json`). Read from the arguments so that even a usage error,
    found before any command runs, answers with a JSON document."""
    for i, a in enumerate(args):
        if a == "--":
            return False
        if a in ("--json", "-ojson", "--output=json"):
            return True
        if a in ("-o", "--output") and args[i + 1:i + 2] == ["json"]:
            return True
    return False


def _usage_error_class() -> type[Exception]:
    """Base of click's usage errors: typer vendors click (`typer.TyperException`) since 0.2x;
    before that it is click's own `ClickException`."""
    base = getattr(typer, "TyperException", None)
    if base is None:  # pragma: no cover - older typer on plain click
        import importlib

        base = importlib.import_module("click").ClickException
    assert isinstance(base, type) and issubclass(base, Exception)
    return base


_UsageError = _usage_error_class()


def _usage_field(exc: Any) -> str | None:
    """The option or argument a usage error is about (`--limit`, `ID`)."""
    name = getattr(exc, "option_name", None)
    if isinstance(name, str) and name:
        return name
    param = getattr(exc, "param", None)
    if param is None:
        return None
    opts = [o for o in getattr(param, "opts", []) if isinstance(o, str) and o.startswith("-")]
    if opts:
        return max(opts, key=len)
    human = getattr(param, "human_readable_name", None)
    return str(human) if human else None


def _fail(code: ExitCode, message: str, json_out: bool, *, where: dict[str, object] | None = None,
          problems: list[Problem] | None = None, label: str = "error") -> NoReturn:
    """The one way a command ends in error: human text on stderr (never read as markup), the
    JSON error document on stdout with `--json`, and the exit code."""
    if problems:
        print_problems(problems)
    else:
        print_error(message, label)
    if json_out:
        emit_error(int(code), message, where, problems or ())
    sys.exit(int(code))


def run(argv: list[str] | None = None) -> None:
    """Console-script entry: the one place where errors become exit codes (docs/exit-codes.md).

    With `--json`, stdout holds exactly one JSON document whatever the exit code: the command's
    own, or `{"schema": 1, "error": {"code", "message", "where": {"file", "line", "field"}}}`.
    """
    _quiet_libraries()
    # a command imports many modules (pydantic, SQLAlchemy, pyinfra) and creates few cyclic
    # garbage objects: collecting the youngest generation every 50,000 allocations instead of
    # 700 saves about 70 ms of `fleet probe` and keeps memory bounded
    gc.set_threshold(50_000, *gc.get_threshold()[1:])
    from fleet.cli.pipes import guard_streams

    guard_streams()
    args = sys.argv[1:] if argv is None else list(argv)
    json_out = json_requested(args)
    start_command(json_out)
    try:
        # only the module of the command being run is imported: `fleet probe` no longer pays
        # for every command group's imports (about 0.3 s of its 2.3 s on 20 lab hosts)
        cli = build_app(wanted(args))
        code = cli(args=args, standalone_mode=False)
        # a normal return is None; `typer.Exit(n)` (as `--version` raises) returns n, and
        # typer turns Ctrl-C into 130
        if code == 130:
            raise KeyboardInterrupt
        if isinstance(code, int) and code != 0:
            _fail(ExitCode(code) if code in set(ExitCode) else ExitCode.INCOMPLETE,
                  f"exit {code}", json_out)
        sys.exit(int(ExitCode.OK))  # as click's standalone mode does: callers see SystemExit
    except FleetError as exc:
        problems = exc.problems if isinstance(exc, BadInput) else None
        _fail(exc.exit_code, str(exc), json_out, where=exc.where(), problems=problems)
    except typer.Abort:  # a confirmation answered no
        _fail(ExitCode.INCOMPLETE, "aborted: nothing was done", json_out)
    except _UsageError as exc:  # usage: unknown option, bad value, missing argument
        fmt = getattr(exc, "format_message", None)
        message = str(fmt() if callable(fmt) else exc)
        if json_out:
            if message:  # no_args_is_help: the help is on stderr already
                print_error(message)
            message = message or "usage: see --help"
            field = _usage_field(exc)
            emit_error(int(ExitCode.BAD_INPUT), message, {"field": field},
                       [Problem(None, None, field, message)])
        else:
            from typer import rich_utils

            rich_utils.rich_format_error(exc)  # type: ignore[arg-type]
        sys.exit(int(ExitCode.BAD_INPUT))
    except KeyboardInterrupt:
        _fail(ExitCode.INCOMPLETE, "interrupted", json_out, label="interrupted")
    except FileNotFoundError as exc:
        _fail(ExitCode.BAD_INPUT, str(exc), json_out, where={"file": exc.filename})
    except Exception as exc:  # a bug: say so plainly, never pretend it was bad input
        message = f"{type(exc).__name__}: {exc}"
        print_error(message, "internal error")
        if os.environ.get("FLEET_DEBUG"):
            traceback.print_exc()
        else:
            console.print("set FLEET_DEBUG=1 for the traceback", markup=False)
        if json_out:
            emit_error(int(ExitCode.INCOMPLETE), f"internal error: {message}")
        sys.exit(int(ExitCode.INCOMPLETE))
    finally:
        start_command(False)  # the next command in this process (tests) starts on stdout again
        # the interpreter's last collection walks every object the imports made (about 0.1 s);
        # nothing here needs it: files are closed and flushed by then, atexit handlers still run
        gc.freeze()


def settings(ctx: typer.Context) -> Settings:
    obj = ctx.find_root().obj
    assert isinstance(obj, Settings)
    return obj


def existing_file(path: Path) -> Path:
    if not path.is_file():
        raise BadInput.single("no such file", file=str(path))
    return path


def wanted(args: list[str]) -> str | None:
    from fleet.cli.commands import wanted as _wanted

    return _wanted(args)


class FleetGroup(TyperGroup):
    """The root `fleet` group: as typer builds it, every command gets its "Examples" help
    section (fleet.cli.examples), and the root's options are accepted after the command too
    (fleet.cli.global_options)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        from fleet.cli.examples import add_examples
        from fleet.cli.global_options import add_global_options

        add_examples(self)
        add_global_options(self)


def build_app(only: str | None = None) -> typer.Typer:
    """The `fleet` app with every command, or only the command or group `only` (what `run`
    needs: the other command modules are never imported). Each group lives in its own module
    so a broken one is easy to find."""
    from fleet.cli import commands
    from fleet.cli.examples import hide_flag_placeholders
    from fleet.cli.help_layout import keep_option_names_whole
    from fleet.cli.lazy import defer_typer_coercion

    hide_flag_placeholders()
    keep_option_names_whole()
    defer_typer_coercion()
    new = typer.Typer(name="fleet", help=HELP, no_args_is_help=True, cls=FleetGroup,
                      pretty_exceptions_enable=False, add_completion=True)
    new.callback()(main)
    commands.register_top_level(new, only)
    for name, sub in commands.groups(only):
        new.add_typer(sub, name=name)
    return new


_app: typer.Typer | None = None


def __getattr__(name: str) -> typer.Typer:
    """`fleet.cli.app.app`: every command, built on first use (tests, typer's runner)."""
    global _app
    if name == "app":
        if _app is None:
            _app = build_app()
        return _app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
