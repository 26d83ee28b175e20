"""Driver branch lifecycle of a matrix's releases: end of life, with supported replacements.

Pure: `today` is a parameter (the CLI passes the current UTC date, tests a fixed one). The
findings are structured (`EolFinding`) so `fleet matrix check --json` can carry the branch, its
end date and the replacements; `branch_lifecycle` turns them into warnings for the loader. A
matrix's `policy.end_of_life: error` makes `matrix check` exit 1 on them (the matrix stays
valid: exit 2 is for a file that is wrong, not for a fact that aged).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from fleet.domain import nvidia_data
from fleet.domain.matrix.models import Matrix
from fleet.domain.versions import branch_label
from fleet.errors import Problem


@dataclass(frozen=True)
class Replacement:
    branch: str
    designation: str
    eol: str  # "YYYY-MM"

    def text(self) -> str:
        kind = nvidia_data.DESIGNATION_NAMES[self.designation]
        return f"R{self.branch} ({kind}, until {nvidia_data.month_name(self.eol)})"

    def as_dict(self) -> dict[str, object]:
        return {"branch": self.branch, "designation": self.designation, "eol": self.eol}


@dataclass(frozen=True)
class EolFinding:
    """A release whose driver branch is past end of life on `today`."""

    release: str
    field: str  # "releases[1].driver.version"
    branch: str
    designation: str | None
    eol: str | None  # "YYYY-MM" when NVIDIA states the month
    eol_listed: str | None  # "YYYY-MM" of the page listing it as ended (month unstated)
    eol_text: str  # "February 2026" / "by August 2025 (month not stated)"
    source: str  # the page and edition the end of life comes from
    source_url: str | None
    replacements: tuple[Replacement, ...]

    def message(self) -> str:
        data = nvidia_data.load()
        info = data.branch(self.branch)
        label = info.label() if info else branch_label(self.branch)
        repl = ", ".join(r.text() for r in self.replacements) or "none known to fleet"
        return (f"release {self.release!r}: driver branch {label} reached end of life "
                f"{'in ' if self.eol else ''}{self.eol_text} (NVIDIA: {self.source}); supported "
                f"replacements today: {repl}")

    def as_dict(self) -> dict[str, object]:
        return {
            "release": self.release, "field": self.field, "branch": self.branch,
            "designation": self.designation, "eol": self.eol, "eol_listed": self.eol_listed,
            "eol_text": self.eol_text, "source": self.source, "source_url": self.source_url,
            "message": self.message(),
            "replacements": [r.as_dict() for r in self.replacements],
        }


def end_of_life(matrix: Matrix, today: date) -> list[EolFinding]:
    """Every release on a branch NVIDIA states is past end of life on `today`."""
    data = nvidia_data.load()
    replacements = tuple(
        Replacement(b.branch, b.designation, b.eol)
        for b in data.supported_branches(today)
        if b.designation is not None and b.eol is not None
    )
    out = []
    for i, rel in enumerate(matrix.releases):
        info = data.branch(rel.branch)
        if info is None or not info.past_eol(today):
            continue
        out.append(EolFinding(
            release=rel.name, field=f"releases[{i}].driver.version", branch=info.branch,
            designation=info.designation, eol=info.eol, eol_listed=info.eol_listed,
            eol_text=info.eol_text(), source=data.cite(info.source),
            source_url=data.sources[info.source].url,
            replacements=replacements,
        ))
    return out


def unverified_lifecycle(matrix: Matrix) -> list[Problem]:
    """Releases whose branch end of life fleet cannot state from NVIDIA's pages."""
    data = nvidia_data.load()
    out = []
    for i, rel in enumerate(matrix.releases):
        info = data.branch(rel.branch)
        field = f"releases[{i}].driver.version"
        if info is None:
            out.append(Problem(None, None, field, (
                f"release {rel.name!r}: driver branch {branch_label(rel.branch)} is not in "
                "NVIDIA's branch table shipped with fleet; end of life not checked"), "warning"))
        elif "eol" in info.unverified:
            out.append(Problem(None, None, field, (
                f"release {rel.name!r}: no stored NVIDIA page states the end of life of "
                f"{info.label()} (unverified: {info.note or 'no source'}); end of life not "
                "checked"), "warning"))
    return out


def branch_lifecycle(matrix: Matrix, today: date | None) -> list[Problem]:
    """Warn on a branch past end of life or with an unverified lifecycle, and on a New
    Feature Branch chosen as golden."""
    data = nvidia_data.load()
    out = []
    if today is not None:
        out += [Problem(None, None, f.field, f.message(), "warning")
                for f in end_of_life(matrix, today)]
        out += unverified_lifecycle(matrix)
    golden: dict[str, str] = {}
    golden.setdefault(matrix.policy.golden.default, "policy.golden.default")
    for pool, name in matrix.policy.golden.pools.items():
        golden.setdefault(name, f"policy.golden.pools.{pool}")
    names = {rel.name: rel for rel in reversed(matrix.releases)}
    for name, field in golden.items():
        rel = names.get(name)
        info = data.branch(rel.branch) if rel is not None else None
        if rel is not None and info is not None and info.designation == "NFB":
            out.append(Problem(None, None, field, (
                f"golden release {name!r} is on {branch_label(rel.branch)}, a New Feature "
                "Branch: short-lived, prefer a Production or Long Term Support branch"),
                "warning"))
    return out
