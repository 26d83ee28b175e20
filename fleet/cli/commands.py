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
    ("rollout", "rollout_cmd"),
    ("hygiene", "hygiene_cmd"),
    ("quarantine", "quarantine_cmd"),
)


# Modules with top-level commands (`fleet probe`); each exposes `register(app)`.
TOP_LEVEL: tuple[str, ...] = ("probe_cmd", "apply_cmd", "exec_cmd")


def register_top_level(app: typer.Typer) -> None:
    for module in TOP_LEVEL:
        importlib.import_module(f"fleet.cli.{module}").register(app)


def groups() -> list[tuple[str, typer.Typer]]:
    return [
        (name, importlib.import_module(f"fleet.cli.{module}").app) for name, module in GROUPS
    ]
