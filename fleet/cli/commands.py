"""The command groups of `fleet <noun> <verb>`, in the order `--help` lists them."""

from __future__ import annotations

import importlib

import typer

# (group name, module under fleet.cli); each module exposes a typer app named `app`.
GROUPS: tuple[tuple[str, str], ...] = (
    ("matrix", "matrix_cmd"),
    ("history", "history_cmd"),
    ("facts", "facts_cmd"),
    ("logs", "logs_cmd"),
    ("lab", "lab_cmd"),
    ("bench", "bench_cmd"),
    ("rollout", "rollout"),
    ("hygiene", "hygiene_cmd"),
    ("quarantine", "quarantine_cmd"),
    ("bundle", "diagnose_cmd"),
    ("hosts", "hosts_cmd"),
)


# Modules with top-level commands (`fleet probe`); each exposes `register(app)`.
TOP_LEVEL: tuple[str, ...] = ("probe_cmd", "apply_cmd", "exec_cmd", "demo_cmd", "node_check_cmd",
                              "diagnose_cmd", "preflight_cmd")

# The top-level commands each of those modules registers (keep in step with their `register`):
# `fleet.cli.app.run` imports only the module of the command it runs (see `wanted`).
TOP_LEVEL_COMMANDS: dict[str, str] = {
    "probe": "probe_cmd", "check": "probe_cmd",
    "apply": "apply_cmd", "rollback": "apply_cmd",
    "exec": "exec_cmd",
    "demo": "demo_cmd",
    "node-check": "node_check_cmd",
    "diagnose": "diagnose_cmd",
    "preflight": "preflight_cmd",
}


def register_top_level(app: typer.Typer, only: str | None = None) -> None:
    modules = TOP_LEVEL if only is None else tuple(
        m for m in TOP_LEVEL if m == TOP_LEVEL_COMMANDS.get(only))
    for module in modules:
        importlib.import_module(f"fleet.cli.{module}").register(app)


def groups(only: str | None = None) -> list[tuple[str, typer.Typer]]:
    return [
        (name, importlib.import_module(f"fleet.cli.{module}").app) for name, module in GROUPS
        if only is None or name == only
    ]


def wanted(args: list[str]) -> str | None:
    """The command or group `args` runs, when it is one we know; None means every one (help,
    completion, a typo: typer then lists or rejects them all as usual)."""
    known = set(TOP_LEVEL_COMMANDS) | {name for name, _ in GROUPS}
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a == "--db":
            skip = True
        elif a.startswith("--db="):
            continue
        elif a.startswith("-"):
            return None  # --help, --version, completion flags: the whole app
        else:
            return a if a in known else None
    return None
