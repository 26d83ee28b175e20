"""Save and load a simulated fleet: its hosts' ground truth, faults, scheduler and clock.

A rehearsal that spans several commands (`fleet rollout start --sim`, then `resume`, `promote`
or `abort`) needs the simulated hosts to keep their state between processes, as real hosts do.
The file is JSON, written atomically (a temporary file renamed over the old one), so a process
killed while saving leaves the previous state whole.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

from fleet.domain.matrix.models import Matrix
from fleet.errors import BadInput
from fleet.sim.fleet import SimFleet
from fleet.sim.host import SimHost, profile_for
from fleet.sim.model import HostFaults, Latency, SimClock

FORMAT = 1


def fleet_state(fleet: SimFleet) -> dict[str, Any]:
    """The fleet as a JSON-able document (see `load_fleet`)."""
    hosts = []
    for h in fleet._hosts.values():
        hosts.append({
            "name": h.name, "index": h.index, "pool": h.pool, "model": h.profile.model,
            "gpu_count": h.gpu_count, "unit": h.unit, "rack": h.rack, "os_family": h.os_family,
            "initial": h.initial, "pkg": h.pkg, "loaded": h.loaded, "boots": h.boots,
            "boot_at": h.boot_at.isoformat(), "probes": h.probes, "probes_boot": h.probes_boot,
            "benches": h.benches, "ecc_agg": h.ecc_agg, "ecc_vol": h.ecc_vol,
            "faults": {k: (list(v) if isinstance(v, tuple) else v)
                       for k, v in h.faults.as_dict().items()},
            "hung": h.hung, "log": list(h.log), "booted_new": h.booted_new,
            **({"kernel_held": sorted(h.kernel_held)} if h.kernel_held else {}),
            **({"drift": {k: [v, held] for k, (v, held) in sorted(h.drift.items())}}
               if h.drift else {}),
        })
    sched: dict[str, Any] = {}
    if fleet._scheduler is not None:
        for name, node in fleet._scheduler._nodes.items():
            sched[name] = {"drained": node.drained, "reason": node.reason,
                           "jobs_end": node.jobs_end.isoformat() if node.jobs_end else None,
                           "job_id": node.job_id,
                           "drain_fails": node.drain_fails}
    clock = fleet.clock
    return {
        "format": FORMAT, "seed": fleet.seed,
        "now": clock().isoformat() if isinstance(clock, SimClock) else None,
        "canary_pools": sorted(fleet.canary_pools), "release_perf": fleet.release_perf,
        "latency": asdict(fleet.latency), "initial_drained": fleet._initial_drained,
        "scheduler": sched if fleet._scheduler is not None else None, "hosts": hosts,
    }


def save_fleet(fleet: SimFleet, path: str | Path, *, owner: str | None = None) -> None:
    """Write the fleet's state to `path` atomically; `owner` names what the state belongs to
    (`rollout/ID`: a later command finds out whether the file is that rollout's fleet or one
    left by an earlier run, see `state_owner`)."""
    p = Path(path)
    doc = fleet_state(fleet)
    if owner is not None:
        doc["owner"] = owner
    text = json.dumps(doc, separators=(",", ":"))
    fd, tmp = tempfile.mkstemp(prefix=p.name + ".", suffix=".tmp", dir=p.parent or ".")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def state_owner(path: str | Path) -> tuple[bool, str | None]:
    """(whether a readable state file is at `path`, the `owner` it was saved with)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return False, None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return False, None
    owner = doc.get("owner")
    return True, str(owner) if owner is not None else None


def load_fleet(path: str | Path, matrix: Matrix) -> SimFleet:
    """A fleet saved by `save_fleet`; releases come from `matrix`."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        raise BadInput.single("no such simulated fleet state", file=str(p)) from None
    except (OSError, ValueError) as e:
        raise BadInput.single(f"not a simulated fleet state: {e}", file=str(p)) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BadInput.single(f"not a simulated fleet state (format {FORMAT})", file=str(p))
    return fleet_from_state(doc, matrix)


def fleet_from_state(doc: dict[str, Any], matrix: Matrix) -> SimFleet:
    hosts = []
    for d in doc["hosts"]:
        h = SimHost(d["name"], int(d["index"]), d["pool"], profile_for(d["model"]),
                    int(d["gpu_count"]), d["unit"], d["rack"], d["os_family"], d["initial"],
                    datetime.fromisoformat(d["boot_at"]))
        h.pkg, h.loaded, h.boots = d["pkg"], d["loaded"], int(d["boots"])
        h.probes, h.probes_boot, h.benches = int(d["probes"]), int(d["probes_boot"]), int(
            d["benches"])
        faults = dict(d["faults"])
        faults["xid_after_upgrade"] = tuple(faults.get("xid_after_upgrade") or ())
        h.faults = HostFaults(**faults)
        # files written before the counters were kept: each probe added the fault's rate
        rate = h.faults.ecc_rising
        h.ecc_agg = int(d.get("ecc_agg", rate * h.probes))
        h.ecc_vol = int(d.get("ecc_vol", rate * h.probes_boot))
        h.hung, h.log = bool(d["hung"]), list(d["log"])
        h.booted_new = bool(d.get("booted_new", False))
        h.drift = {k: (v[0], bool(v[1])) for k, v in (d.get("drift") or {}).items()}
        h.kernel_held = frozenset(str(n) for n in d.get("kernel_held") or ())
        hosts.append(h)
    clock = SimClock(datetime.fromisoformat(doc["now"])) if doc.get("now") else None
    fleet = SimFleet(hosts, matrix.releases, seed=int(doc["seed"]), clock=clock,
                     pool_order=list(matrix.pools), canary_pools=doc["canary_pools"],
                     release_perf=doc["release_perf"], latency=Latency(**doc["latency"]),
                     drained=doc.get("initial_drained") or {})
    sched = doc.get("scheduler")
    if sched is not None:
        from fleet.sim.scheduler import SimScheduler, _Node

        s = fleet._scheduler = SimScheduler(fleet)
        s._nodes = {
            name: _Node(bool(n["drained"]), n["reason"],
                        datetime.fromisoformat(n["jobs_end"]) if n["jobs_end"] else None,
                        n.get("job_id"), drain_fails=bool(n["drain_fails"]))
            for name, n in sched.items()}
    return fleet
