"""`fleet hosts`: the fleet view (what the history says of each host), and `fleet hosts trust`,
the one, explicit way a host's SSH key is accepted.

The view reads the history (and an inventory, with `-i`) only, never a host: see
`fleet.history.fleet_view` for what is read and `fleet.domain.fleet_view` for the rows.

Every connection checks host keys strictly, so a new or re-imaged host is refused until its key
is trusted here. The command reads the key each host offers (a key exchange, nothing sent
that authenticates), shows its fingerprint, writes it to the known_hosts file that host's
connections read and records in the history's event log who accepted which key.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Any

import typer

from fleet.cli.hosts_view import view
from fleet.cli.output import console, emit_json, stdout
from fleet.errors import BadInput, CouldNotComplete

app = typer.Typer(help="The fleet view (`fleet hosts`), and host identities: trust a host's "
                  "SSH key (first contact, re-image).", invoke_without_command=True)
app.callback(invoke_without_command=True)(view)


@app.command()
def trust(
    ctx: typer.Context,
    hosts: Annotated[list[str], typer.Argument(
        metavar="HOST...", help="Hosts to trust: inventory names, groups or globs.")],
    inventory: Annotated[Path, typer.Option("--inventory", "-i", envvar="FLEET_INVENTORY",
                                            help="pyinfra inventory file.")],
    fingerprint: Annotated[str | None, typer.Option(
        "--fingerprint", help="The key fingerprint you expect (SHA256:..., from the host's "
        "console or provisioning): anything else is refused. One HOST only.")] = None,
    replace: Annotated[bool, typer.Option(
        "--replace", help="Replace a different key on file (a re-imaged host).")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Show the keys and what would change; write and record nothing.")]
    = False,
    timeout: Annotated[float, typer.Option(help="Per-host connect timeout, seconds.")] = 10.0,
    json_out: Annotated[bool, typer.Option("--json", help="JSON on stdout.")] = False,
) -> None:
    """Accept the SSH host key each HOST offers now, after showing its fingerprint.

    Check the fingerprint against the host's own (`ssh-keygen -lf /etc/ssh/ssh_host_*.pub` on
    its console) or pass it with --fingerprint. A host whose key differs from the one on file is
    refused unless --replace. Exit 3 when a host could not be reached or was refused.
    """
    from datetime import UTC, datetime

    from fleet.cli.app import settings
    from fleet.remote.hostkeys import key_target, offered_key
    from fleet.remote.hostkeys import trust as trust_key
    from fleet.remote.session import load_inventory, select_hosts

    if fingerprint is not None and len(hosts) != 1:
        raise BadInput.single("--fingerprint checks one host: name exactly one HOST",
                              field="--fingerprint")
    if fingerprint is not None and not fingerprint.startswith("SHA256:"):
        raise BadInput.single(f"{fingerprint!r} is not a SHA256:... fingerprint",
                              field="--fingerprint")
    chosen = select_hosts(load_inventory(inventory), hosts, field="HOST")
    done: list[dict[str, Any]] = []
    refused: list[dict[str, str]] = []
    with ExitStack() as stack:
        history = None
        if not dry_run:  # opened first: a history that cannot be written stops the command
            from fleet.history import open_history

            history = stack.enter_context(open_history(settings(ctx).db))
        for h in chosen:
            target = key_target(h.name, h.data.dict())
            try:
                key = offered_key(target, timeout)
                result = trust_key(target, key, replace=replace, dry_run=dry_run,
                                   expect=fingerprint)
            except CouldNotComplete as exc:  # unreachable, or refused (KeyRefused)
                refused.append({"host": h.name, "error": str(exc)})
                console.print(f"{h.name}: {exc}", markup=False, style="red")
                continue
            if history is not None and result.action in ("added", "replaced"):
                _record(history, result, datetime.now(UTC))
            done.append(result.as_dict())
            stdout.print(f"{h.name} ({result.entry}): {result.action} {result.key_type} "
                          f"{result.fingerprint} in {result.known_hosts}"
                          + (f" (was {', '.join(result.previous)})" if result.previous else ""),
                          markup=False)
        if json_out:
            emit_json({"hosts": done, "refused": refused, "dry_run": dry_run})
        if refused:  # inside the history's block: a new one with nothing recorded goes again
            raise CouldNotComplete(f"{len(refused)} host(s) not trusted: "
                                   + ", ".join(r["host"] for r in refused))


def _record(history: Any, result: Any, now: Any) -> None:
    """Who accepted which key: an event per host, in the append-only log."""
    from fleet.history import os_actor, record_event

    verb = "replaced the key of" if result.action == "replaced" else "trusted"
    record_event(history, "hosts.trust", result.host,
                 f"{verb} {result.host} ({result.entry}): {result.key_type} "
                 f"{result.fingerprint}", data=result.as_dict(), actor=os_actor(), at=now)
