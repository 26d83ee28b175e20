"""Per-GPU figures over the sampling window, from whichever captures are there."""

from __future__ import annotations

from dataclasses import dataclass, field

from fleet.domain.diagnose.model import Evidence, GpuProcess, GpuState


@dataclass
class GpuView:
    """One GPU: dmon's means over the window where dmon ran, else the `-q` snapshot."""

    index: int
    state: GpuState | None = None
    sm: float | None = None
    mem: float | None = None
    pclk: float | None = None
    pwr: float | None = None
    fb_mib: float | None = None
    samples: int = 0
    util_source: str | None = None
    processes: dict[int, str] = field(default_factory=dict)
    """pid -> command of the compute processes, from pmon and from `-q`'s process list."""

    @property
    def label(self) -> str:
        bus = self.state.bus_id if self.state and self.state.bus_id else None
        return f"GPU {self.index}" + (f" ({bus})" if bus else "")


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 1) if values else None


def gpu_views(ev: Evidence) -> dict[int, GpuView]:
    views: dict[int, GpuView] = {}
    if ev.smi is not None:
        for g in ev.smi.gpus:
            v = views.setdefault(g.index, GpuView(g.index))
            v.state = g
            if g.util_gpu is not None:
                v.sm, v.mem, v.util_source = float(g.util_gpu), _f(g.util_mem), "nvidia-smi -q"
            v.pclk = _f(g.clock_sm)
            v.pwr = g.power_draw_w
            v.fb_mib = _f(g.fb_used_mib)
            for proc in g.processes:
                if proc.compute:
                    v.processes[proc.pid] = proc.name
    if ev.dmon:
        by_gpu: dict[int, dict[str, list[float]]] = {}
        for s in ev.dmon:
            cols = by_gpu.setdefault(s.gpu, {})
            for k, val in s.values.items():
                cols.setdefault(k, []).append(val)
        for gpu, cols in by_gpu.items():
            v = views.setdefault(gpu, GpuView(gpu))
            v.samples = max((len(x) for x in cols.values()), default=0)
            if "sm" in cols:
                v.sm, v.util_source = _mean(cols["sm"]), f"dmon ({v.samples} samples)"
                v.mem = _mean(cols.get("mem", [])) if "mem" in cols else v.mem
            v.pclk = _mean(cols["pclk"]) if "pclk" in cols else v.pclk
            v.pwr = _mean(cols["pwr"]) if "pwr" in cols else v.pwr
            v.fb_mib = cols["fb"][-1] if "fb" in cols else v.fb_mib
    for p in ev.pmon or []:
        if "C" not in p.kind.upper() and p.kind != "-":
            continue  # graphics-only (a desktop's compositor): not work that can be slow
        views.setdefault(p.gpu, GpuView(p.gpu)).processes.setdefault(p.pid, p.command)
    return dict(sorted(views.items()))


def _f(value: int | None) -> float | None:
    return float(value) if value is not None else None


def all_processes(ev: Evidence) -> list[tuple[int, GpuProcess]]:
    """(gpu, process) for every GPU process any capture names."""
    out = []
    for gpu, v in gpu_views(ev).items():
        for pid, name in v.processes.items():
            out.append((gpu, GpuProcess(pid, name)))
    return out
