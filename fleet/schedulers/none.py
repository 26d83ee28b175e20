"""No workload manager: hosts run nothing fleet has to move, so a drain is a recorded no-op.

The state is kept in memory for the life of the object, so `state()` after `drain()` says
"drained by fleet" and the engine's bookkeeping reads the same as with a real scheduler. Nothing
survives the process: after a controller restart every host reads "available" again, which is
true (nothing was ever taken out of service).
"""

from __future__ import annotations

from fleet.domain.ports import AdminState, HostResult

MARKER = "fleet:"


class NoneScheduler:
    name = "none"

    def __init__(self, marker: str = MARKER) -> None:
        self.marker = marker
        self._drained: dict[str, str] = {}
        self.log: list[tuple[str, str, str | None]] = []  # (verb, host, reason)

    def state(self, host: str) -> AdminState:
        reason = self._drained.get(host)
        if reason is None:
            return AdminState("available")
        return AdminState("drained", reason, by_fleet=True)

    def idle(self, host: str) -> HostResult[bool]:
        """Idle unless fleet drained it: with no workload manager, the inventory says these
        hosts run nothing fleet has to move (the operator's word, not a reading)."""
        return HostResult(host, host not in self._drained)

    def drain(self, host: str, reason: str, *, wait_s: float = 0) -> HostResult[None]:
        changed = host not in self._drained
        self._drained[host] = f"{self.marker} {reason}".strip()
        self.log.append(("drain", host, reason))
        return HostResult(host, None, changed=changed)

    def undrain(self, host: str) -> HostResult[None]:
        changed = self._drained.pop(host, None) is not None
        self.log.append(("undrain", host, None))
        return HostResult(host, None, changed=changed)
