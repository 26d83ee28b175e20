"""Load a pyinfra inventory file without importing `pyinfra_cli`.

`pyinfra_cli` monkey-patches the stdlib for gevent at import, which must not happen as a side
effect of reading a file (tests, the history store and `fleet matrix` would all inherit it). The
file format is pyinfra's, so the same file works with the plain `pyinfra` CLI: every module-level
list of hosts, or `(hosts, data)` tuple, not starting with `_` is a group; a host is a name or a
`(name, data)` tuple; the file's stem is a group of every host; `group_data/<group>.py` beside the
inventory sets group data (its module globals, minus imported names, or exactly `__all__`).
"""

from __future__ import annotations

import ast
import runpy
from pathlib import Path
from typing import Any

from fleet.errors import BadInput


def _imported_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _module_vars(path: Path) -> dict[str, Any]:
    try:
        return runpy.run_path(str(path))
    except SyntaxError as exc:
        raise BadInput.single(f"Python syntax error: {exc.msg}", file=str(path),
                              line=exc.lineno) from exc
    except Exception as exc:
        raise BadInput.single(f"cannot load: {type(exc).__name__}: {exc}", file=str(path)) from exc


def _is_group(key: str, value: Any) -> bool:
    if key.startswith("_"):
        return False
    hosts = value[0] if isinstance(value, tuple) and len(value) == 2 else value
    return isinstance(hosts, list) and all(isinstance(h, str | tuple) for h in hosts)


def _group_data(directory: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    if not directory.is_dir():
        return out
    for file in sorted(directory.glob("*.py")):
        attrs = _module_vars(file)
        keys = attrs.get("__all__") or [k for k in attrs if k not in _imported_names(file)]
        out[file.stem] = {k: v for k, v in attrs.items() if k in keys and not k.startswith("__")}
    return out


def load_inventory_file(path: str | Path) -> Any:
    from pyinfra.api.inventory import Inventory

    p = Path(path)
    if not p.is_file():
        raise BadInput.single("no such inventory file", file=str(p))
    groups: dict[str, tuple[list[str], dict[str, Any]]] = {}
    host_data: dict[str, dict[str, Any]] = {}
    variables = _module_vars(p)  # first: it turns a syntax error into a located BadInput
    imported = _imported_names(p)
    for key, value in variables.items():
        if key in imported or not _is_group(key, value):
            continue
        hosts, data = value if isinstance(value, tuple) else (value, {})
        names = []
        for h in hosts:
            name, hdata = h if isinstance(h, tuple) else (h, {})
            host_data.setdefault(name, {}).update(hdata)
            names.append(name)
        groups[key] = (names, dict(data))
    if not host_data:
        raise BadInput.single("the inventory defines no hosts", file=str(p))
    extra = _group_data(p.parent / "group_data")
    for group, data in extra.items():
        if group in groups:
            groups[group] = (groups[group][0], {**data, **groups[group][1]})
    global_data = extra.get("all", {})
    groups.setdefault(p.stem, (list(host_data), {}))
    return Inventory(  # type: ignore[no-untyped-call]
        ([(n, d) for n, d in host_data.items()], global_data), **groups
    )
