"""A stopped rollout that leaves a pool on two releases says so: which hosts are on which
release, and the commands that make the pool whole (`rollout abort`, `rollout status`)."""

from __future__ import annotations

from typing import Any

from fleet.cli.output import console, esc


def fleet_prefix(db: str) -> str:
    """`fleet`, with the `--db` this command was given: a printed command must work as
    printed."""
    import shlex

    return "fleet" if db == "fleet.db" else f"fleet --db {shlex.quote(db)}"


def splits(history: Any, rollout_id: int, *, fleet: str) -> list[dict[str, Any]]:
    """Each split pool as a document: hosts per release and the commands to make it whole."""
    from fleet.domain.rollout_advice import make_whole, split_pools
    from fleet.history.rollouts import get_rollout, load_steps, start_data

    ro = get_rollout(history, rollout_id)
    if ro is None:
        return []
    source = start_data(history, rollout_id).get("source") or {}
    return [{**s.as_dict(), "next": [{"command": c, "does": d} for c, d in make_whole(
                s, fleet=fleet, source=source, matrix=ro.matrix_path)]}
            for s in split_pools(load_steps(history, rollout_id))]


def warn_splits(docs: list[dict[str, Any]]) -> None:
    from fleet.domain.rollout_advice import NOT_MOVED

    for d in docs:
        console.print("[yellow]warning[/yellow]: " + esc(
            f"pool {d['pool']} is split: {len(d['moved'])} host(s) on {d['target']}: "
            f"{', '.join(d['moved'])}"), highlight=False, soft_wrap=True)
        for release, hosts in d["others"].items():
            where = release if release == NOT_MOVED else f"on {release}"
            console.print(f"  {len(hosts)} host(s) {where}: {', '.join(hosts)}",
                          markup=False, highlight=False, soft_wrap=True)
        console.print("  to make it whole:", markup=False)
        for step in d["next"]:
            console.print(f"  $ {step['command']}    # {step['does']}", markup=False,
                          highlight=False, soft_wrap=True)
