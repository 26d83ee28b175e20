"""What changes for each pool when one matrix replaces another: the golden release, component by
component, and whether each change is an upgrade, a downgrade or a branch switch.

Kinds: `upgrade` / `downgrade` (numeric version comparison), `branch_switch` (the driver, or the
branch-bound fabric manager, moves to another branch; `direction` says which way), `added` /
`removed` (a component managed on one side only), `changed` (values without an order: the module
flavor, the kernel constraint).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from fleet.domain.matrix.models import COMPONENTS, Matrix, Release
from fleet.domain.versions import compare, driver_branch

ChangeKind = Literal["upgrade", "downgrade", "branch_switch", "added", "removed", "changed"]


@dataclass(frozen=True)
class ComponentChange:
    component: str
    old: str | None
    new: str | None
    kind: ChangeKind
    direction: Literal["upgrade", "downgrade"] | None = None

    def as_dict(self) -> dict[str, object]:
        return {"component": self.component, "old": self.old, "new": self.new,
                "kind": self.kind, "direction": self.direction}


@dataclass(frozen=True)
class PoolDiff:
    pool: str
    old_release: str | None
    new_release: str | None
    changes: list[ComponentChange] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.changes) or self.old_release != self.new_release

    def as_dict(self) -> dict[str, object]:
        return {"pool": self.pool, "old_release": self.old_release,
                "new_release": self.new_release, "changed": self.changed,
                "changes": [c.as_dict() for c in self.changes]}


def _golden(matrix: Matrix, pool: str) -> Release | None:
    if pool not in matrix.pools:
        return None
    try:
        return matrix.golden_for(pool)
    except KeyError:
        return None


def diff_releases(old: Release | None, new: Release | None) -> list[ComponentChange]:
    """Component changes from `old` to `new` (either may be None: everything added/removed)."""
    old_v = old.versions() if old else {}
    new_v = new.versions() if new else {}
    out: list[ComponentChange] = []
    for component in COMPONENTS:
        a, b = old_v.get(component), new_v.get(component)
        if a == b:
            continue
        if a is None:
            out.append(ComponentChange(component, a, b, "added"))
        elif b is None:
            out.append(ComponentChange(component, a, b, "removed"))
        else:
            out.append(_versioned(component, a, b))
    if old and new and old.driver.flavor != new.driver.flavor:
        out.append(ComponentChange("driver_flavor", old.driver.flavor, new.driver.flavor,
                                   "changed"))
    ka = old.companions.kernel if old else None
    kb = new.companions.kernel if new else None
    if ka != kb:
        kind: ChangeKind = "added" if ka is None else "removed" if kb is None else "changed"
        out.append(ComponentChange("kernel", ka, kb, kind))
    return out


def _versioned(component: str, a: str, b: str) -> ComponentChange:
    order = compare(a, b)
    direction: Literal["upgrade", "downgrade"] | None = (
        "upgrade" if order < 0 else "downgrade" if order > 0 else None
    )
    if direction is None:  # same version written differently (12.4 vs 12.4.0)
        return ComponentChange(component, a, b, "changed")
    if component in ("driver", "fabric_manager") and _branch(a) != _branch(b):
        return ComponentChange(component, a, b, "branch_switch", direction)
    return ComponentChange(component, a, b, direction, direction)


def _branch(version: str) -> str:
    try:
        return driver_branch(version)
    except ValueError:
        return version.split(".", 1)[0]


def diff_matrices(old: Matrix, new: Matrix) -> list[PoolDiff]:
    """Per pool (every pool of either matrix, sorted), the golden release's changes."""
    pools = sorted(set(old.pools) | set(new.pools))
    out = []
    for pool in pools:
        a, b = _golden(old, pool), _golden(new, pool)
        out.append(PoolDiff(pool, a.name if a else None, b.name if b else None,
                            diff_releases(a, b)))
    return out
