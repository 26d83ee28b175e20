"""`fleet exec`: one command on many hosts, output grouped by identical result."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fleet.cli.output import console, emit_json, esc, stdout
from fleet.cli.selection import Limit
from fleet.errors import BadInput, CouldNotComplete, ProblemsFound


def exec_(
    inventory: Annotated[Path, typer.Option("--inventory", "-i", envvar="FLEET_INVENTORY",
                                            help="pyinfra inventory file.")],
    command: Annotated[list[str], typer.Argument(metavar="COMMAND...",
                                                 help="The command, after `--`.")],
    limit: Limit = None,
    timeout: Annotated[float, typer.Option(help="Per-host command timeout, seconds.")] = 60.0,
    connect_timeout: Annotated[float, typer.Option(help="Per-host connect timeout.")] = 10.0,
    json_out: Annotated[bool, typer.Option("--json", help="JSON on stdout.")] = False,
) -> None:
    """Run an ad-hoc command on many hosts in parallel (fabric), for incident triage.

    Hosts that print the same thing are shown together. Exit 1 when a command exits non-zero on
    some host, 3 when a host could not be reached or timed out.
    """
    import shlex

    from fleet.remote.session import load_inventory, select_hosts
    from fleet.remote.ssh_exec import SshTarget, group_results, run_everywhere

    if not command:
        raise BadInput.single("give the command after `--`", field="COMMAND")
    line = command[0] if len(command) == 1 else shlex.join(command)
    hosts = select_hosts(load_inventory(inventory), limit)
    targets = [SshTarget.from_host_data(h.name, h.data.dict()) for h in hosts]
    with console.status(f"running on {len(targets)} host(s)"):
        results = run_everywhere(targets, line, timeout=timeout, connect_timeout=connect_timeout)
    groups = group_results(results)
    if json_out:
        emit_json({"command": line, "groups": [g.as_dict() for g in groups]})
    else:
        # headers and the hosts' output on one stream (the results), each output ended by a
        # newline: on two streams a pipe or file interleaves them by buffer, and a last line
        # without its newline ran into the next group's header
        for g in groups:
            head = f"[bold]{len(g.hosts)} host(s)[/bold]: {esc(', '.join(g.hosts))}"
            status = g.error or f"exit {g.exit_code}"
            stdout.print(f"{head}  [dim]({esc(status)})[/dim]", soft_wrap=True)
            for text in (g.stdout, g.stderr):
                if text:
                    stdout.out(text.rstrip("\n"), highlight=False)
    silent = [r.host for r in results if r.exit_code is None]
    if silent:
        raise CouldNotComplete(f"{len(silent)} host(s) did not answer: {', '.join(silent)}")
    if any(r.exit_code for r in results):
        raise ProblemsFound("the command failed on some hosts")


def register(app: typer.Typer) -> None:
    app.command("exec", context_settings={"allow_interspersed_args": False})(exec_)
