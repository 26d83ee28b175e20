"""Matrix rules for node profiles: MIG configs exist and fit the GPU
models they apply to (the sourced table in fleet/data/nvidia/mig_profiles.yaml)."""

from __future__ import annotations

from datetime import date

from fleet.domain.matrix.models import Matrix
from fleet.domain.matrix.profiles import MigDeviceGroup
from fleet.domain.mig_table import MigModel, layout_problems, models_for
from fleet.errors import Problem


def _error(field: str, message: str) -> Problem:
    return Problem(None, None, field, message, "error")


def _warning(field: str, message: str) -> Problem:
    return Problem(None, None, field, message, "warning")


def _pool_models(matrix: Matrix, profile: str) -> list[str | None]:
    """The GPU models of the pools that select `profile` (None: a pool naming no model)."""
    out: list[str | None] = []
    for settings in matrix.pools.values():
        chosen = settings.profile
        if chosen == profile:
            out.append(settings.gpu_model)
        elif isinstance(chosen, dict):
            out += [model for model, name in chosen.items() if name == profile]
    return out


def _group_models(group: MigDeviceGroup, pool_models: list[str | None]) -> tuple[list[MigModel],
                                                                                 str] | None:
    """The table rows a config entry applies to and how to name them; None: unknown model."""
    names = list(dict.fromkeys(group.filters() or [m for m in pool_models if m]))
    if not names:
        return None
    rows: list[MigModel] = []
    for name in names:
        found = models_for(name)
        if not found:
            return None
        rows += [r for r in found if r not in rows]
    return rows, " / ".join(names)


def mig_layouts_fit(matrix: Matrix, today: date | None) -> list[Problem]:
    out = []
    for name, profile in matrix.profiles.items():
        mig = profile.mig
        if mig is None or mig.layout is None:
            continue  # a file layout is checked after the loader reads it
        base = f"profiles.{name}.mig"
        groups = mig.groups()
        if groups is None:
            out.append(_error(f"{base}.config", f"no mig-configs entry {mig.config!r} (the "
                              f"layout has: {', '.join(sorted(mig.layout.mig_configs))})"))
            continue
        pool_models = _pool_models(matrix, name)
        for i, group in enumerate(groups):
            field = f"{base}.layout.mig-configs.{mig.config}[{i}]"
            if group.mig_devices and not group.mig_enabled:
                out.append(_error(f"{field}.mig-devices", "MIG devices with mig-enabled: false"))
            known = _group_models(group, pool_models)
            if known is None:
                rows: list[MigModel] = []
                what = "the GPU"
                if group.mig_devices:
                    out.append(_warning(field, "no known GPU model (device-filter, or the "
                                        "selecting pools' gpu_model): profiles checked by name "
                                        "only"))
            else:
                rows, what = known
            errors, warnings = layout_problems(group.mig_devices, rows, what)
            out += [_error(f"{field}.mig-devices", e) for e in errors]
            out += [_warning(f"{field}.mig-devices", w) for w in warnings]
    return out


PROFILE_RULES = (mig_layouts_fit,)  # pools naming defined profiles: matrix.references
