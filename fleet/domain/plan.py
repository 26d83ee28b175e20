"""The rollout plan (pure): which hosts of which pool move to which release, in which waves.

From the matrix, the hosts (`HostRef`), what each runs now, their administrative state and the
quarantine list:

- target release per pool: its golden release (`policy.golden`), unless `targets` says otherwise;
- pools in order: canary pools first, then the matrix's order, then pools it does not list;
- excluded (listed in `skipped` with the reason): quarantined hosts, hosts known unreachable,
  hosts drained, cordoned or down by someone else (fleet never takes those over), and hosts
  already on the target;
- `max_unavailable` (a count, or a percentage of the pool rounded down, at least 1): hosts already
  out of service (quarantined, unreachable, drained or down by anyone but fleet) use it up first;
  a wave never holds more hosts than what is left of it. A pool with nothing left is `blocked`;
- waves follow the pool's `waves` list in Ansible `serial` grammar (a count, or a percentage of the
  hosts that move, rounded down but at least 1; the last value repeats), sized exactly like
  `wave_sizes` when every host is its own unit;
- hard units (`HostRef.unit`: hosts sharing an NVLink domain or a rack) move together: a unit is
  never split across waves. A wave takes whole units while it is below its size, so it may end up
  larger by less than one unit, or smaller by less than one unit when the next unit would exceed
  `max_unavailable`. A unit larger than the budget cannot move and is skipped with the reason.
- hosts drained by fleet itself (left by an interrupted run) are eligible and go first, so they
  are never held out of service while other waves use the budget.

Nothing here does I/O or reads a clock; the plan is JSON-serialisable (`as_dict`/`from_dict`) so
the engine can record it before it acts on it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleet.domain.matrix.models import Matrix, RolloutSettings, wave_sizes
from fleet.domain.ports import AdminState, HostRef

UNREACHABLE = "unreachable"
"""The reason a host known unreachable is skipped (it is out of service; what it runs is not
known, so it is never "already on" anything)."""


@dataclass
class Wave:
    index: int  # 1-based within its pool
    hosts: list[str]
    units: list[str] = field(default_factory=list)  # hard units moving in this wave

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.index, "hosts": list(self.hosts), "units": list(self.units)}


@dataclass
class PoolPlan:
    pool: str
    release: str
    waves: list[Wave] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # host -> why it does not move
    canary: bool = False
    max_unavailable: int = 1
    unavailable: list[str] = field(default_factory=list)  # out of service before we start
    blocked: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def hosts(self) -> list[str]:
        """The hosts that move, in wave order."""
        return [h for w in self.waves for h in w.hosts]

    @property
    def unreachable(self) -> list[str]:
        """Hosts skipped because they could not be reached: never counted as on the target."""
        return [h for h, why in self.skipped.items() if why == UNREACHABLE]

    @property
    def budget_left(self) -> int:
        return max(0, self.max_unavailable - len(self.unavailable))

    def as_dict(self) -> dict[str, Any]:
        return {
            "pool": self.pool, "release": self.release, "canary": self.canary,
            "max_unavailable": self.max_unavailable, "unavailable": list(self.unavailable),
            "blocked": self.blocked, "waves": [w.as_dict() for w in self.waves],
            "skipped": dict(self.skipped), "notes": list(self.notes),
        }


@dataclass
class RolloutPlan:
    pools: list[PoolPlan]
    unassigned: list[str] = field(default_factory=list)  # hosts in no pool: never moved

    def pool(self, name: str) -> PoolPlan:
        for p in self.pools:
            if p.pool == name:
                return p
        raise KeyError(name)

    @property
    def hosts(self) -> list[str]:
        return [h for p in self.pools for h in p.hosts]

    @property
    def unreachable(self) -> list[str]:
        """Hosts of every pool skipped because they could not be reached."""
        return [h for p in self.pools for h in p.unreachable]

    def as_dict(self) -> dict[str, Any]:
        return {"pools": [p.as_dict() for p in self.pools], "unassigned": list(self.unassigned)}

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RolloutPlan:
        pools = [
            PoolPlan(
                pool=p["pool"], release=p["release"], canary=bool(p.get("canary")),
                max_unavailable=int(p.get("max_unavailable", 1)),
                unavailable=list(p.get("unavailable") or []), blocked=p.get("blocked"),
                waves=[Wave(int(w["index"]), list(w["hosts"]), list(w.get("units") or []))
                       for w in p.get("waves") or []],
                skipped=dict(p.get("skipped") or {}), notes=list(p.get("notes") or []),
            )
            for p in data.get("pools") or []
        ]
        return cls(pools, list(data.get("unassigned") or []))


def serial_count(item: int | str, n_hosts: int) -> int:
    """One `serial` entry as a host count for `n_hosts` (Ansible semantics, at least 1)."""
    return wave_sizes([item], max(1, n_hosts))[0] if isinstance(item, str) else max(1, int(item))


def resolve_max_unavailable(settings: RolloutSettings, pool_size: int) -> int:
    """`max_unavailable` as a host count: a count as is, a percentage of the pool rounded down
    (but at least 1)."""
    return serial_count(settings.max_unavailable, pool_size)


def fit_drain_budget(candidates: Sequence[str], out_now: Collection[str],
                     max_unavailable: int,
                     units: Mapping[str, str | None] | None = None) -> tuple[list[str], list[str]]:
    """Which of a wave's `candidates` may be drained now without more than `max_unavailable`
    hosts of the pool out of service; returns (drain, hold back), both in `candidates` order.

    `out_now`: the pool's hosts out of service at this moment (drained or down by anyone, state
    unknown, quarantined), as the engine read them right before the drain. A candidate already
    out costs nothing; the others are taken in order, whole hard units at a time (`units`:
    host -> unit, a unit moves whole or not at all), while the total stays within the budget.
    """
    out = set(out_now)
    unit_of = dict(units or {})
    groups: dict[str, list[str]] = {}
    for h in candidates:
        groups.setdefault(f"unit:{u}" if (u := unit_of.get(h)) else f"host:{h}", []).append(h)
    taken: set[str] = set()
    for members in groups.values():
        new = [h for h in members if h not in out]
        if len(out) + len(new) <= max_unavailable:
            out.update(new)
            taken.update(members)
        elif not new:
            taken.update(members)
    return ([h for h in candidates if h in taken], [h for h in candidates if h not in taken])


def pool_order(matrix: Matrix, pools: Collection[str]) -> list[str]:
    """Canary pools first, then the matrix's order, then pools the matrix does not list."""
    listed = list(matrix.pools)
    rank = {p: i for i, p in enumerate(listed)}

    def key(p: str) -> tuple[bool, int, str]:
        s = matrix.pools.get(p)
        return (not (s is not None and s.canary), rank.get(p, len(listed)), p)

    return sorted(set(pools), key=key)


def _out_of_service(state: AdminState | None) -> str | None:
    """Why a host is already out of service by someone else's hand, or None."""
    if state is None:
        return None
    if state.state == "down":
        return "down" + (f" ({state.reason})" if state.reason else "")
    if state.state in ("drained", "draining") and not state.by_fleet:
        return f"{state.state} by someone else" + (f": {state.reason}" if state.reason else "")
    return None


def plan_rollout(
    matrix: Matrix,
    hosts: Sequence[HostRef],
    *,
    releases: Mapping[str, str | None] | None = None,
    admin: Mapping[str, AdminState] | None = None,
    quarantined: Mapping[str, str] | Collection[str] = (),
    unreachable: Collection[str] = (),
    pools: Collection[str] | None = None,
    targets: Mapping[str, str] | None = None,
) -> RolloutPlan:
    """The rollout plan (see the module doc).

    `releases`: host -> the release it runs now (None or absent: unknown, so it moves).
    `admin`: host -> its state in the workload manager (absent: available).
    `quarantined`: host names, or host -> reason. `unreachable`: hosts known unreachable now.
    `pools`: only these pools. `targets`: pool -> release, overriding the golden release.
    """
    releases = releases or {}
    admin = admin or {}
    quarantine = (dict(quarantined) if isinstance(quarantined, Mapping)
                  else dict.fromkeys(quarantined, ""))
    unreachable = set(unreachable)
    by_pool: dict[str, list[HostRef]] = {}
    unassigned: list[str] = []
    for ref in hosts:
        if not ref.pool:
            unassigned.append(ref.name)
        elif pools is None or ref.pool in pools:
            by_pool.setdefault(ref.pool, []).append(ref)
    plans = [
        _plan_pool(matrix, pool, by_pool[pool], releases, admin, quarantine, unreachable,
                   (targets or {}).get(pool))
        for pool in pool_order(matrix, by_pool)
    ]
    return RolloutPlan(plans, unassigned)


def _plan_pool(
    matrix: Matrix,
    pool: str,
    refs: list[HostRef],
    releases: Mapping[str, str | None],
    admin: Mapping[str, AdminState],
    quarantine: Mapping[str, str],
    unreachable: set[str],
    target: str | None,
) -> PoolPlan:
    settings = matrix.pools.get(pool)
    notes: list[str] = []
    if settings is None:
        notes.append("pool not in the matrix: default rollout settings")
    rollout = settings.rollout if settings else RolloutSettings()
    release = target or matrix.golden_name(pool)
    plan = PoolPlan(pool=pool, release=release, canary=bool(settings and settings.canary),
                    max_unavailable=resolve_max_unavailable(rollout, len(refs)), notes=notes)
    eligible: list[HostRef] = []
    for ref in refs:
        name = ref.name
        state = admin.get(name)
        why: str | None = None
        if name in quarantine:
            why = "quarantined" + (f": {quarantine[name]}" if quarantine[name] else "")
        elif name in unreachable:
            why = UNREACHABLE
        else:
            why = _out_of_service(state)
        if why is not None:
            plan.unavailable.append(name)
            plan.skipped[name] = why
        elif releases.get(name) == release:
            plan.skipped[name] = f"already on {release}"
        else:
            eligible.append(ref)
    if not eligible:
        return plan
    cap = plan.budget_left
    if cap <= 0:
        plan.blocked = (f"max_unavailable {plan.max_unavailable} is used up by "
                        f"{len(plan.unavailable)} host(s) already out of service")
        for ref in eligible:
            plan.skipped[ref.name] = "blocked: max_unavailable used up"
        return plan
    units = _units(eligible, admin)
    partial = sorted({ref.unit for ref in refs if ref.unit and ref.name in plan.skipped}
                     & {u for u, _ in units if u})
    if partial:
        notes.append("units moving without some of their hosts (see skipped): "
                     + ", ".join(partial))
    n = len(eligible)
    queue = list(units)
    k = 0
    capped: list[tuple[int, int]] = []  # (wave, the size its `waves` item asked for)
    while queue:
        asked = serial_count(rollout.waves[min(k, len(rollout.waves) - 1)], n)
        left = sum(len(members) for _, members in queue)
        want = min(asked, cap)
        hosts: list[str] = []
        names: list[str] = []
        while queue and len(hosts) < want:
            unit, members = queue[0]
            if len(hosts) + len(members) > cap:
                break
            queue.pop(0)
            hosts += members
            if unit:
                names.append(unit)
        if not hosts:  # the first unit alone exceeds the budget: it cannot move
            unit, members = queue.pop(0)
            for h in members:
                plan.skipped[h] = (f"unit {unit} has {len(members)} hosts, more than the "
                                   f"max_unavailable budget of {cap}")
            continue
        k += 1
        plan.waves.append(Wave(k, hosts, names))
        if asked > cap and left > cap:  # the cap, not the pool's last hosts, made it smaller
            capped.append((k, asked))
    notes += capped_notes(capped, cap, plan)
    return plan


def capped_notes(capped: Sequence[tuple[int, int]], cap: int, plan: PoolPlan) -> list[str]:
    """`wave 2 capped by max_unavailable from 5 to 2 host(s)`: a wave smaller than the pool's
    `waves` list asks for says so (consecutive waves cut alike in one line)."""
    why = f"max_unavailable {plan.max_unavailable}" + (
        f", {len(plan.unavailable)} host(s) already out of service" if plan.unavailable else "")
    runs: list[list[tuple[int, int]]] = []
    for wave, asked in capped:
        if runs and runs[-1][-1][0] == wave - 1 and runs[-1][-1][1] == asked:
            runs[-1].append((wave, asked))
        else:
            runs.append([(wave, asked)])
    out = []
    for run in runs:
        first, last, asked = run[0][0], run[-1][0], run[0][1]
        which = f"wave {first}" if first == last else f"waves {first}-{last}"
        each = "" if first == last else " each"
        out.append(f"{which} capped by {why}: from {asked} to {cap} host(s){each}")
    return out


def _units(eligible: list[HostRef], admin: Mapping[str, AdminState]) -> list[
        tuple[str | None, list[str]]]:
    """Eligible hosts grouped into hard units, in first-seen order; units holding a host that
    fleet itself left drained go first."""
    order: list[str] = []
    groups: dict[str, tuple[str | None, list[str]]] = {}
    for ref in eligible:
        key = f"unit:{ref.unit}" if ref.unit else f"host:{ref.name}"
        if key not in groups:
            groups[key] = (ref.unit or None, [])
            order.append(key)
        groups[key][1].append(ref.name)

    def ours(key: str) -> bool:
        return any((s := admin.get(h)) is not None and s.by_fleet
                   and s.state in ("drained", "draining") for h in groups[key][1])

    first = [k for k in order if ours(k)]
    return [groups[k] for k in first + [k for k in order if k not in first]]
