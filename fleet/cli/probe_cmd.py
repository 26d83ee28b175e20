"""`fleet probe` and `fleet check`: host facts over SSH, and the findings they lead to."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from fleet.cli.output import emit_json, esc, stdout, working
from fleet.cli.selection import HostAlias, Limit, PoolAlias
from fleet.cli.table import Grid, OutputOpt, show, wants_json
from fleet.errors import BadInput, CouldNotComplete, ProblemsFound

if TYPE_CHECKING:
    from fleet.domain.matrix.models import Matrix
    from fleet.history import History

Inventory = Annotated[Path, typer.Option("--inventory", "-i", help="pyinfra inventory file.",
                                         envvar="FLEET_INVENTORY")]
MatrixOpt = Annotated[Path | None, typer.Option(
    "--matrix", "-m", help="Version matrix: judge release conformance against it.",
    envvar="FLEET_MATRIX")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]

_STYLE = {"fail": "red", "warn": "yellow", "ok": "green", "unknown": "red"}
_RANK = {"fail": 0, "warn": 1, "ok": 2}


def _findings_table(rows: list[dict[str, object]]) -> Grid:
    t = Grid(("host", "severity", "check", "gpu", "remediation", "message"),
             prose=("remediation", "message"))
    for r in rows:
        sev = str(r["severity"])
        t.add_row(esc(r["host"]), f"[{_STYLE.get(sev, '')}]{esc(sev)}[/]", esc(r["check"]),
                  esc(r.get("gpu") or ""), esc(r.get("remediation") or ""), esc(r["message"]))
    return t


def probe(
    ctx: typer.Context,
    inventory: Inventory,
    limit: Limit = None,
    pool: PoolAlias = None,
    matrix: MatrixOpt = None,
    frameworks: Annotated[bool, typer.Option(
        "--frameworks/--no-frameworks",
        help="Ask torch/onnxruntime on the host which devices they see (slower).")] = True,
    via: Annotated[Literal["ssh", "slurm"], typer.Option(
        "--via", help="ssh: from here to every host; slurm: one srun on the nodes of "
        "--partition (drained, down or busy nodes are reported, not probed).")] = "ssh",
    partition: Annotated[str | None, typer.Option(
        "--partition", help="Slurm partition to probe with --via slurm (its nodes that "
        "are in the inventory).")] = None,
    json_out: JsonFlag = False,
    output: OutputOpt = None,
) -> None:
    """Probe hosts in parallel over SSH (or with one srun) and record facts, counters and
    findings.

    The probe is shipped inline and run with the host's python3; nothing is installed. Exit 3
    when a host is unreachable or not probed (the others are still probed and recorded), 1 when
    a check fails.
    """
    from contextlib import ExitStack

    from fleet.cli.app import settings
    from fleet.jobs.probe import probe_inventory
    from fleet.remote.session import patch_gevent

    if via not in ("ssh", "slurm"):
        raise BadInput.single(f"unknown --via {via!r} (expected ssh or slurm)", field="--via")
    if (via == "slurm") != (partition is not None):
        raise BadInput.single("--via slurm and --partition go together", field="--partition")
    limit = [*(limit or []), *(pool or [])] or None  # --pool/-p: an alias of --limit
    patch_gevent()
    db = settings(ctx).db

    def load() -> Matrix | None:  # in a thread while the hosts connect (probe_inventory)
        from fleet.domain.matrix.loader import load_matrix

        return load_matrix(matrix, today=date.today()).matrix if matrix else None

    with ExitStack() as stack:
        stack.enter_context(working("probing hosts"))

        def history() -> History:
            from fleet.history import open_history

            return stack.enter_context(open_history(db))

        try:
            results = probe_inventory(inventory, limit, history, now=lambda: datetime.now(UTC),
                                      matrix=load, frameworks=frameworks,
                                      via="slurm" if partition else "ssh", partition=partition,
                                      history_file=db)
        except Exception as exc:
            if via == "slurm":
                from fleet.remote.srun_probe import SlurmInputError, SlurmUnavailable

                if isinstance(exc, SlurmInputError):
                    raise BadInput.single(str(exc), field="--partition") from exc
                if isinstance(exc, SlurmUnavailable):
                    raise CouldNotComplete(str(exc)) from exc
            raise
    if wants_json(json_out, output):
        emit_json({"hosts": [r.as_dict() for r in results]})
    else:
        t = Grid(("host", "pool", "reachable", "source", "driver", "gpus", "worst"),
                 prose=("reachable",))
        for r in results:
            # a host that was not probed has no findings: unknown, never "ok"
            worst = "unknown" if r.facts is None else min(
                (f.severity.value for f in r.findings), key=lambda s: _RANK.get(s, 3),
                default="ok")
            t.add_row(esc(r.host), esc(r.pool or ""),
                      "yes" if r.reachable else f"[red]no[/]: {esc(r.error)}",
                      r.facts.source if r.facts else "", esc(r.facts.versions.driver_library or "")
                      if r.facts else "", str(len(r.facts.gpus)) if r.facts else "",
                      f"[{_STYLE[worst]}]{worst}[/]")
        show(t, output)
    failed_probe = [r.host for r in results if r.facts is None]
    if failed_probe:
        raise CouldNotComplete(f"could not probe {len(failed_probe)} host(s): "
                               + ", ".join(failed_probe))
    from fleet.domain.checks import Severity

    failing = [r.host for r in results if any(f.severity is Severity.FAIL for f in r.findings)]
    if failing:
        raise ProblemsFound(f"failing checks on {', '.join(failing)}")


def check(
    ctx: typer.Context,
    limit: Limit = None,
    pool: PoolAlias = None,
    host: HostAlias = None,
    show_ok: Annotated[bool, typer.Option("--all", help="Also list ok findings.")] = False,
    json_out: JsonFlag = False,
    output: OutputOpt = None,
) -> None:
    """Findings of each host's latest probe, most severe first, with their remediation.

    Reads the history only (run `fleet probe` first). Exit 1 when any finding fails, 3 when a
    host's latest probe could not reach it or a host was never probed (nothing is known of it,
    so it is not fine); 2 when a --limit (or --pool, --host) value names nothing the history
    knows.
    """
    from fleet.cli.app import settings
    from fleet.cli.selection import choose, given
    from fleet.domain.ports import HostRef
    from fleet.history import findings_of, latest_snapshots, list_hosts, open_history

    rows: list[dict[str, object]] = []
    unreachable: list[str] = []
    probed: set[str] = set()
    selectors = given(limit, pool, host)
    with open_history(settings(ctx).db, create=False) as history:
        known_hosts = [HostRef(name=h.name, pool=h.pool) for h in list_hosts(history)]
        scope = [h.name for h in choose(selectors, known_hosts)]
        if not scope:
            raise CouldNotComplete("nothing to check: no host in the history yet (run `fleet "
                                   "probe -i INVENTORY` first)")
        for h, snap in latest_snapshots(history, hosts=scope if selectors else None):
            probed.add(h.name)
            if not snap.reachable or snap.source == "none" and "error" in (snap.facts or {}):
                unreachable.append(h.name)
            for f in findings_of(history, snap.id):  # type: ignore[arg-type]
                if f.severity == "ok" and not show_ok:
                    continue
                rows.append({"host": h.name, "pool": h.pool, "severity": f.severity,
                             "check": f.check_id, "gpu": f.gpu_index,
                             "remediation": f.remediation, "message": f.message,
                             "taken_at": snap.taken_at})
        out_of_service = _out_of_service(history, scope)
    rows.sort(key=lambda r: (_RANK.get(str(r["severity"]), 3), str(r["host"])))
    unprobed = [name for name in scope if name not in probed]
    if wants_json(json_out, output):
        emit_json({"findings": rows, "unreachable": unreachable, "unprobed": unprobed,
                   **out_of_service})
    elif rows:
        show(_findings_table(rows), output)
    elif not unreachable and not unprobed:
        stdout.print("[green]no findings[/green] in the latest probes")
    if not wants_json(json_out, output) and (out_of_service["quarantined"]
                                             or out_of_service["drained"]):
        stdout.print(f"[yellow]out of service[/yellow]: {len(out_of_service['quarantined'])} "
                     f"host(s) quarantined, {len(out_of_service['drained'])} drained "
                     "(`fleet hosts --quarantined`, `fleet hosts --drained`)", soft_wrap=True)
    lost = []
    if unreachable:
        lost.append(f"latest probe could not reach: {', '.join(unreachable)}")
    if unprobed:
        from fleet.domain.selection import known

        lost.append(f"never probed (run `fleet probe -i INVENTORY`): {known(unprobed)}")
    if lost:
        raise CouldNotComplete("; ".join(lost))
    if any(r["severity"] == "fail" for r in rows):
        raise ProblemsFound("failing findings")


def _out_of_service(history: Any, scope: list[str]) -> dict[str, list[str]]:
    """The hosts of `scope` quarantined and drained by the history's record: a clean probe
    does not put them back in service, so `check` says so beside its findings."""
    from fleet.domain.fleet_view import host_rows
    from fleet.history.fleet_view import read_fleet

    rows = host_rows(read_fleet(history, hosts=scope))
    return {"quarantined": [r.host for r in rows if r.quarantined],
            "drained": [r.host for r in rows if r.drained]}


def register(app: typer.Typer) -> None:
    app.command("probe")(probe)
    app.command("check")(check)
