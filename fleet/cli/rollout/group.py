"""The `fleet rollout` command group, shared by the modules that register its commands."""

from __future__ import annotations

import typer

app = typer.Typer(
    help="Staged rollouts: canary pools first, then waves, gated by health and benchmarks.",
    no_args_is_help=True,
)
