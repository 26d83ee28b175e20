"""Modules imported on first use, for CLI modules whose commands share a heavy module.

Building the typer app (`fleet --help`, every command's start) imports every command module it
lists, so a module-level `from fleet.lab import lab` would load the lab (and what it imports)
for `fleet probe --help` too. `lazy_module` stands in for the module at module level and imports
it when an attribute is first read, inside a command. Use it with a `TYPE_CHECKING` import of the
real module so mypy still checks every use:

    if TYPE_CHECKING:
        from fleet.lab import lab
    else:
        lab = lazy_module("fleet.lab.lab")

tests/unit/cli/test_startup.py fails when a heavy library is imported by building the app.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Any


class LazyModule:
    """Forwards attribute reads to the module `name`, importing it on the first one."""

    __slots__ = ("_name", "_module")

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        return getattr(module, attr)

    def __repr__(self) -> str:
        state = "imported" if self._module is not None else "not imported yet"
        return f"<lazy module {self._name!r} ({state})>"


def lazy_module(name: str) -> Any:
    """A stand-in for module `name` (typed Any: pair it with a TYPE_CHECKING import)."""
    return LazyModule(name)


_PATHS = (Path, Path | None)


def _literal_choices(annotation: Any) -> tuple[object, ...]:
    """The values of `Literal["a", "b"]` (options with fixed choices), () for other types."""
    from typing import Literal, get_args, get_origin

    return get_args(annotation) if get_origin(annotation) is Literal else ()


def defer_typer_coercion() -> None:
    """Let typer import pydantic only when a value needs it.

    typer (0.2x) coerces every parameter's value through a pydantic TypeAdapter, built on first
    use, and importing pydantic for it costs about 50 ms: `fleet probe --help` paid it for the
    root group's `--db` default and the unset `--help`/completion flags, and `fleet probe` its
    `-i` path before the first connection. Unset values (None) and a `str` value of a plain
    `str` parameter come out of typer's coercion unchanged, so these are answered here; a `str`
    value of a `Path` parameter goes through typer's own path checks given a `Path` (pydantic
    only made that `Path`); any other value is coerced by typer's own runtime parameter, exactly
    as before. With a typer that lacks these internals this does nothing (fleet only starts slower,
    and tests/unit/cli/test_startup.py says so).
    """
    from typer import _coercion, _param_types, core

    param_cls: Any = getattr(core, "_TyperParameter", None)
    base: Any = getattr(_coercion, "RuntimeParam", None)
    build: Any = getattr(_coercion, "build_runtime_param", None)
    check_path: Any = getattr(_param_types, "coerce_cli_path", None)
    if param_cls is None or base is None or build is None or "get_runtime_param" not in vars(
            param_cls) or getattr(param_cls, "_fleet_deferred", False):
        return

    class DeferredRuntimeParam(base):  # type: ignore[misc]
        """typer's RuntimeParam contract: `coerce` (inherited) answers None itself."""

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            info = self.parameter_info
            if getattr(info, "parser", None) is None:
                if self.annotation in (str, bool) and type(value) is self.annotation:
                    return value
                if type(value) is str and value in _literal_choices(self.annotation):
                    return value  # one of a Literal's choices: what typer would return
                if (self.annotation in _PATHS and type(value) is str and check_path is not None
                        and getattr(info, "path_type", None) in (None, Path)):
                    # typer's own checks (exists, readable, ...), minus the pydantic step
                    # that only turns the str into a Path
                    return check_path(Path(value), info, path_type=Path, param=param, ctx=ctx)
            real = build(param.type_descriptor)
            param._runtime_param = real  # from now on, typer's own
            return real._coerce_value(value, param=param, ctx=ctx)

    def get_runtime_param(self: Any) -> Any:
        if self._runtime_param is None:
            desc = self.type_descriptor
            if desc.file_annotation is not None:
                self._runtime_param = build(desc)
            else:
                self._runtime_param = DeferredRuntimeParam(
                    parameter_info=desc.parameter_info, annotation=desc.annotation)
        return self._runtime_param

    param_cls.get_runtime_param = get_runtime_param
    param_cls._fleet_deferred = True
