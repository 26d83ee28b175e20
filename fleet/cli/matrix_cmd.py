"""`fleet matrix check|show|diff`: validate, display and compare version matrices."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fleet.cli.output import emit_json, error_document, esc, print_problems, stdout
from fleet.cli.table import Grid, OutputOpt, show_all, wants_json
from fleet.errors import BadInput, ExitCode, ProblemsFound

if TYPE_CHECKING:  # the matrix models load pydantic: imported by the commands that load one
    from fleet.domain.matrix.loader import LoadedMatrix
    from fleet.domain.matrix.models import Matrix

app = typer.Typer(
    help=(
        "Validate, show and compare version matrices (matrices/*.yaml).\n\n"
        "A matrix names releases (driver, CUDA, companions), the golden release per pool, "
        "allowed and blocked versions, rollback targets and rollout settings. Validation uses "
        "NVIDIA's CUDA/driver, branch lifecycle and GPU architecture tables shipped with fleet."
    ),
    no_args_is_help=True,
)

FileArg = Annotated[Path, typer.Argument(help="Matrix YAML file.", show_default=False)]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print one JSON document on stdout (stable keys).")
]


TodayOpt = Annotated[
    str | None,
    typer.Option("--today", metavar="YYYY-MM-DD", show_default=False,
                 help="Judge driver branch end of life on this date (default: today, UTC)."),
]


def _today() -> date:
    return datetime.now(UTC).date()


def _parse_today(value: str | None) -> date:
    if value is None:
        return _today()
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise BadInput.single(f"not a date: {value!r} (expected YYYY-MM-DD)",
                              field="--today") from None


def _load(path: Path, today: date | None = None) -> LoadedMatrix:
    """Load with today's date (UTC) so end-of-life warnings are current."""
    from fleet.domain.matrix.loader import load_matrix

    return load_matrix(path, today=today or _today())


@app.command("check")
def check(file: FileArg, json: JsonOpt = False, today: TodayOpt = None) -> None:
    """Validate a matrix: structure, references, and NVIDIA compatibility rules.

    Exit 0 when valid (warnings are printed), 2 when invalid: every error is printed as
    `file:line: field: message`. A release on a driver branch NVIDIA has ended is a warning
    naming the branch, its end and the supported replacements; with `policy.end_of_life:
    error` in the matrix it is an error and the exit code is 1.
    """
    from fleet.domain.matrix.lifecycle import end_of_life

    on = _parse_today(today)
    try:
        loaded = _load(file, on)
    except BadInput as exc:
        if json:  # the report, with the `error` every failing command's document has
            emit_json({**_check_report(str(file), exc.problems, valid=False),
                       **error_document(int(ExitCode.BAD_INPUT), str(exc), exc.where(),
                                        exc.problems)})
        raise
    m = loaded.matrix
    eol = end_of_life(m, on)
    strict = m.policy.end_of_life == "error" and bool(eol)
    eol_keys = {(f.field, f.message()) for f in eol}
    problems = [
        replace(p, severity="error") if strict and (p.field, p.message) in eol_keys else p
        for p in loaded.warnings
    ]
    lines = {(p.field, p.message): p.line for p in loaded.warnings}
    failure = (f"{file}: {len(eol)} release(s) on driver branches past end of life "
               "(policy.end_of_life: error)")
    if json:
        emit_json({
            **_check_report(str(file), problems, valid=True),
            "today": on.isoformat(),
            "end_of_life_policy": m.policy.end_of_life,
            "end_of_life": [{**f.as_dict(), "file": str(file),
                             "line": lines.get((f.field, f.message())),
                             "severity": "error" if strict else "warning"} for f in eol],
        })
        if strict:
            raise ProblemsFound(failure)
        return
    print_problems(problems)
    if strict:
        raise ProblemsFound(failure)
    stdout.print(
        f"[green]ok[/green]: {esc(file)}: {len(m.releases)} releases, {len(m.pools)} pools, "
        f"{len(loaded.warnings)} warning(s)"
    )


def _check_report(file: str, problems: list, valid: bool) -> dict[str, object]:  # type: ignore[type-arg]
    return {
        "file": file,
        "valid": valid,
        "errors": [p.as_dict() for p in problems if p.severity == "error"],
        "warnings": [p.as_dict() for p in problems if p.severity != "error"],
    }


@app.command("show")
def show(file: FileArg, json: JsonOpt = False, output: OutputOpt = None) -> None:
    """Show the releases and pools of a valid matrix (JSON: the full model)."""
    loaded = _load(file)
    if wants_json(json, output):
        emit_json(loaded.matrix.model_dump(mode="json"))
        return
    print_problems(loaded.warnings)
    show_all([_releases_table(loaded.matrix), _pools_table(loaded.matrix)], output)


def _roles(matrix: Matrix) -> dict[str, list[str]]:
    roles: dict[str, list[str]] = {r.name: [] for r in matrix.releases}
    roles.setdefault(matrix.policy.golden.default, []).append("golden (default)")
    for pool, name in matrix.policy.golden.pools.items():
        roles.setdefault(name, []).append(f"golden {pool}")
    for name in matrix.policy.allowed:
        roles.setdefault(name, []).append("allowed")
    for pool, name in matrix.policy.previous.items():
        roles.setdefault(name, []).append(f"previous {pool}")
    return roles


def _releases_table(matrix: Matrix) -> Grid:
    table = Grid(("release", "branch", "driver", "flavor", "cuda", "companions", "roles"),
                 title="Releases")
    roles = _roles(matrix)
    for rel in matrix.releases:
        comp = rel.companions.model_dump(exclude_none=True)
        table.add_row(*(esc(c) for c in (
            rel.name, f"R{rel.branch}", rel.driver.version, rel.driver.flavor, rel.cuda,
            "\n".join(f"{k} {v}" for k, v in comp.items()) or "-",
            "\n".join(roles.get(rel.name, [])) or "-",
        )))
    return table


def _pools_table(matrix: Matrix) -> Grid:
    table = Grid(("pool", "canary", "gpu", "golden", "previous", "waves", "max unavail.",
                  "bake"), title="Pools")
    for pool, s in matrix.pools.items():
        r = s.rollout
        table.add_row(*(esc(c) for c in (
            pool, "yes" if s.canary else "", s.gpu_model or "-", matrix.golden_name(pool),
            matrix.policy.previous.get(pool, "-"), ", ".join(str(w) for w in r.waves),
            str(r.max_unavailable), f"{r.bake_minutes} min",
        )))
    return table


@app.command("diff")
def diff(
    old: Annotated[Path, typer.Argument(help="The current matrix.", show_default=False)],
    new: Annotated[Path, typer.Argument(help="The proposed matrix.", show_default=False)],
    json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Per pool, how the golden release changes from OLD to NEW.

    For each component (driver, CUDA, fabric manager, DCGM, container toolkit, cuDNN,
    TensorRT, module flavor, kernel constraint): old and new value, and whether it is an
    upgrade, a downgrade, a branch switch, added or removed. Both files must be valid.
    """
    from fleet.domain.matrix.diff import diff_matrices

    problems: list = []  # type: ignore[type-arg]
    loaded: list[LoadedMatrix] = []
    for path in (old, new):
        try:
            loaded.append(_load(path))
        except BadInput as exc:
            problems += exc.problems
    if problems:
        raise BadInput(problems)
    pools = diff_matrices(loaded[0].matrix, loaded[1].matrix)
    if wants_json(json, output):
        emit_json({"old": str(old), "new": str(new), "pools": [p.as_dict() for p in pools]})
        return
    table = Grid(("pool", "golden", "component", "old", "new", "kind"),
                 title=esc(f"{old} -> {new}"))
    for p in pools:
        golden = f"{p.old_release or '-'} -> {p.new_release or '-'}"
        if not p.changes:
            table.add_row(esc(p.pool), esc(golden), "", "", "", "unchanged")
        for i, c in enumerate(p.changes):
            kind = c.kind + (f" ({c.direction})" if c.kind == "branch_switch" else "")
            table.add_row(*(esc(x) for x in (p.pool if i == 0 else "", golden if i == 0 else "",
                                             c.component, c.old or "-", c.new or "-", kind)))
    show_all([table], output)


__all__ = ["app", "ExitCode"]
