"""The root's options after the command too: `fleet history migrate --db fleet.db`.

click reads an option only at the level that declares it, so `--db` worked before the command
alone, and the hint the tool printed (`fleet history migrate --db PATH`) failed with "No such
option". Every command and group under the root gets a copy of the root's `--db` that sets the
same setting: the value nearest the end of the line wins (`fleet --db a check --db b` reads b);
`FLEET_DB` is read once, by the root. `--version` stays a root option: it is a question about
the tool, not part of a command.
"""

from __future__ import annotations

import copy
from typing import Any

GLOBAL = ("db",)
PANEL = "Global options"


def _set_from_command(ctx: Any, param: Any, value: Any) -> Any:
    if value is not None and not ctx.resilient_parsing:
        obj = ctx.find_root().obj
        if obj is not None:
            setattr(obj, param.name, value)
    return value


def _copy_of(option: Any) -> Any:
    dup = copy.copy(option)
    dup.default = None
    dup.envvar = None
    dup.show_default = False
    dup.show_envvar = False
    dup.expose_value = False
    dup.required = False
    dup.is_eager = False
    dup.callback = _set_from_command
    dup.help = f"{option.help or ''} The same as before the command.".strip()
    if hasattr(dup, "rich_help_panel"):
        dup.rich_help_panel = PANEL
    return dup


def add_global_options(root: Any) -> None:
    """Give every command and group under `root` the root's global options (click objects,
    as typer builds them)."""
    options = [p for p in root.params if p.name in GLOBAL]

    def walk(command: Any) -> None:
        for sub in (getattr(command, "commands", None) or {}).values():
            names = {p.name for p in sub.params}
            sub.params.extend(_copy_of(o) for o in options if o.name not in names)
            walk(sub)

    walk(root)
