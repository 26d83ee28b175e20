"""`-l/--limit`: the one way to select hosts and pools, on every command that selects them.

As in pyinfra and Ansible, a value is a pool (an inventory group) or a glob on host names
(`'gpu-0*'`); repeat it to select more (a host is selected when any value matches it). `--pool`
and `--host`, older spellings, are kept as aliases: their values are limits too (`-p` is
`--pool` on every command that has one; `--partition` has no short flag). A value that selects
nothing is a typo and exit 2 naming it, even beside values that do select hosts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer

from fleet.errors import BadInput, Problem

if TYPE_CHECKING:  # the domain loads pydantic: imported where a command selects hosts
    from fleet.domain.ports import HostRef

LIMIT_HELP = ("A pool (inventory group) or a host-name glob ('gpu-0*'); repeatable, a host is "
              "selected when any value matches it. A value that matches nothing is refused.")

Limit = Annotated[list[str] | None, typer.Option("--limit", "-l", help=LIMIT_HELP,
                                                 metavar="POOL|GLOB", show_default=False)]
PoolAlias = Annotated[list[str] | None, typer.Option(
    "--pool", "-p", help="Alias of --limit (a pool name; kept for existing scripts).",
    metavar="POOL", show_default=False)]
HostAlias = Annotated[list[str] | None, typer.Option(
    "--host", help="Alias of --limit (a host name or glob; kept for existing scripts).",
    metavar="HOST", show_default=False)]


def given(limit: Sequence[str] | None, pool: Sequence[str] | None = None,
          host: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """Every selector on the command line as (option, value), `--limit` first."""
    return ([("--limit", v) for v in limit or ()] + [("--pool", v) for v in pool or ()]
            + [("--host", v) for v in host or ()])


def values(selectors: Sequence[tuple[str, str]]) -> list[str]:
    return list(dict.fromkeys(v for _, v in selectors))


def check(selectors: Sequence[tuple[str, str]], hosts: Sequence[HostRef]) -> None:
    """Refuse (exit 2) every selector that matches no host, naming the option it came with."""
    from fleet.domain.selection import limit_problem, unmatched

    bad = set(unmatched([v for _, v in selectors], hosts))
    problems = [Problem(None, None, option, limit_problem(v, hosts))
                for option, v in dict.fromkeys(selectors) if v in bad]
    if problems:
        raise BadInput(problems)


def choose(selectors: Sequence[tuple[str, str]], hosts: Sequence[HostRef]) -> list[HostRef]:
    """The hosts the selectors pick (all without any), after `check`."""
    from fleet.domain.selection import select

    check(selectors, hosts)
    return select(values(selectors), hosts)
