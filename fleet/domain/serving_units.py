"""How many GPUs (or MIG instances) a host serves on: the denominator of throughput per GPU (pure).

A host that runs MIG serves on its MIG instances, not on its GPUs: a GPU split in seven serves
seven models' worth of traffic, so per GPU it would read as seven times the throughput. From
the host's newest facts (a snapshot's `facts`):

    a GPU with MIG on counts its MIG devices; one whose device list could not be read makes
    the whole host unknown (never a guess);
    a GPU with MIG off (or unread: a GPU that serves whole) counts as one.

Without facts that list GPUs, the inventory's `gpu_count` is the count. Neither: unknown, and
the throughput of that host could not be measured (a guessed count would pass or fail a canary
on a number nobody read). No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

UnitKind = Literal["gpu", "mig"]


@dataclass(frozen=True)
class Units:
    """What a host's throughput is divided by, and where the count came from."""

    count: int
    kind: UnitKind  # "mig": at least one GPU counts MIG instances
    source: Literal["facts", "inventory"]

    def describe(self) -> str:
        what = "MIG instance" if self.kind == "mig" else "GPU"
        return f"{self.count} {what}{'s' if self.count != 1 else ''} ({self.source})"


def facts_gpus(gpus: Sequence[Any]) -> dict[str, Any]:
    """What `serving_units` reads of a probe's `HostFacts.gpus` (no full dump of the facts)."""
    return {"gpus": [{"index": g.index, "mig_mode_current": g.mig_mode_current,
                      "mig_devices": g.mig_devices} for g in gpus]}


def serving_units(gpu_count: int | None, facts: Mapping[str, Any] | None) -> Units | str:
    """The host's serving units, or why they are unknown."""
    gpus = facts.get("gpus") if isinstance(facts, Mapping) else None
    if isinstance(gpus, list) and gpus:
        count, mig = 0, False
        for i, g in enumerate(gpus):
            if not isinstance(g, Mapping):
                return f"GPU {i} of the newest facts is not readable"
            if g.get("mig_mode_current") is True:
                devices = g.get("mig_devices")
                if not isinstance(devices, list):
                    return (f"GPU {g.get('index', i)} runs MIG and its MIG instances could not "
                            "be read")
                count, mig = count + len(devices), True
            else:
                count += 1
        if count == 0:
            return "MIG is on and no MIG instance is configured"
        return Units(count, "mig" if mig else "gpu", "facts")
    if isinstance(gpu_count, int) and not isinstance(gpu_count, bool) and gpu_count > 0:
        return Units(gpu_count, "gpu", "inventory")
    return "GPU count unknown (no facts list its GPUs, no inventory gpu_count)"
