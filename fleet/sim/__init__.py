"""The simulated fleet: an in-process `Backend` and `Scheduler` (see `fleet.sim.fleet`)."""

from fleet.sim.fleet import SimFleet
from fleet.sim.host import SimHost
from fleet.sim.model import (
    EPOCH,
    PROFILES,
    FaultRates,
    FaultSpec,
    GpuProfile,
    HostFaults,
    Latency,
    PoolSpec,
    SimClock,
    SimSpec,
)
from fleet.sim.scheduler import SimScheduler
from fleet.sim.state import load_fleet, save_fleet

__all__ = [
    "EPOCH",
    "PROFILES",
    "FaultRates",
    "FaultSpec",
    "GpuProfile",
    "HostFaults",
    "Latency",
    "PoolSpec",
    "SimClock",
    "SimFleet",
    "SimHost",
    "SimScheduler",
    "SimSpec",
    "load_fleet",
    "save_fleet",
]
