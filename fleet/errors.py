"""The exit-code contract and the errors that carry it.

Every command maps its outcome to one of four codes (documented in README and docs/exit-codes.md):

    0  OK          success, or everything conformant
    1  PROBLEMS    the job ran and found problems (failed checks, drift, a failed gate)
    2  BAD_INPUT   bad input or usage (invalid matrix, unknown flag, missing file)
    3  INCOMPLETE  could not complete (hosts unreachable, lock held, infrastructure error)

Code below the CLI raises `FleetError` subclasses; only `fleet.cli.app.run` turns them into exit
codes, so library callers get exceptions and never a `SystemExit`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    PROBLEMS = 1
    BAD_INPUT = 2
    INCOMPLETE = 3


@dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong with an input, located precisely enough to fix without guessing."""

    file: str | None
    line: int | None
    field: str | None
    message: str
    severity: str = "error"  # "error" or "warning"

    def __str__(self) -> str:
        """`file:line: field: message`; the parts that are unknown are left out (an option's
        problem reads `--db: message`, never a placeholder for a file that does not exist)."""
        parts = []
        if self.file:
            parts.append(self.file + (f":{self.line}" if self.line is not None else ""))
        elif self.line is not None:
            parts.append(f"line {self.line}")
        if self.field:
            parts.append(self.field)
        return ": ".join([*parts, self.message])

    def where(self) -> dict[str, object]:
        return {"file": self.file, "line": self.line, "field": self.field}

    def as_dict(self) -> dict[str, object]:
        return {
            "file": self.file,
            "line": self.line,
            "field": self.field,
            "message": self.message,
            "severity": self.severity,
        }


class FleetError(Exception):
    """Base of every error the CLI reports without a traceback.

    `file`, `line` and `field` say where the trouble is when that is known (the `where` of a
    `--json` error document); the message should name them too.
    """

    exit_code: ExitCode = ExitCode.INCOMPLETE

    def __init__(self, message: str = "", *, file: str | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        super().__init__(message)
        self.file, self.line, self.field = file, line, field

    def where(self) -> dict[str, object]:
        return {"file": self.file, "line": self.line, "field": self.field}


class BadInput(FleetError):
    """Invalid user input; carries every problem found, not only the first."""

    exit_code = ExitCode.BAD_INPUT

    def __init__(self, problems: Sequence[Problem] | str) -> None:
        if isinstance(problems, str):
            problems = [Problem(None, None, None, problems)]
        self.problems: list[Problem] = list(problems)
        first = self.problems[0] if self.problems else Problem(None, None, None, "")
        super().__init__("\n".join(str(p) for p in self.problems), file=first.file,
                         line=first.line, field=first.field)

    @classmethod
    def single(cls, message: str, file: str | None = None, line: int | None = None,
               field: str | None = None) -> BadInput:
        return cls([Problem(file, line, field, message)])


class CouldNotComplete(FleetError):
    """The job could not finish: unreachable hosts, a held lock, a broken database."""

    exit_code = ExitCode.INCOMPLETE


class ProblemsFound(FleetError):
    """The job ran to the end and found problems (drift, failed checks, a failed gate)."""

    exit_code = ExitCode.PROBLEMS


def errors_only(problems: Iterable[Problem]) -> list[Problem]:
    return [p for p in problems if p.severity == "error"]
