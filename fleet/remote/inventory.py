"""Load a pyinfra inventory with pyinfra's own code, then check the names in it.

The inventory is read by `pyinfra_cli.inventory.make_inventory_from_files`, the function the
`pyinfra` CLI calls, so `fleet` and `pyinfra INVENTORY debug-inventory` see the same hosts, groups
and data: an inventory file (every module-level list of hosts or `(hosts, data)` tuple not
starting with `_` is a group, the file's stem is a group of every host), a comma-separated host
list (`@local,gpu-01`), pyinfra connectors (`@local`, `@ssh/host`), `group_data/<group>.py` at the
project root (the working directory) and beside the inventory (the latter wins), and pyinfra's
precedence (host data, then group data files over a group tuple's data, then `all`).

`pyinfra_cli/__init__.py` monkey-patches the stdlib for gevent, which must not happen as a side
effect of reading a file (tests, the history store and `fleet matrix` would all inherit it), so
`pyinfra_cli.inventory` is imported without running it (its own imports patch nothing).

Then every name that reaches hosts and tools is checked against fleet.domain.names (host names,
group names, `pool` and `slurm_node` host data), a host listed twice with different data and an
`ssh_strict_host_key_checking` other than "yes" (fleet.remote.hostkeys) are refused: all
problems at once, each with the file and, where the name is a literal in it, the line, before
anything connects anywhere.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import sys
import types
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from fleet.domain.names import CONNECTOR_NAME_RE, name_problem
from fleet.domain.secrets import scrub, secret_values, shown
from fleet.domain.utf8 import decode_utf8
from fleet.errors import BadInput, Problem
from fleet.remote.inventory_data import data_problems, group_shape_problem

# Host data whose value is a name that reaches a tool: the pool (limits, history, labels) and the
# Slurm node name (`srun -w`, `scontrol`).
_NAME_DATA = {"pool": "pool", "slurm_node": "node"}


def _cli_inventory() -> types.ModuleType:
    """`pyinfra_cli.inventory`, without running `pyinfra_cli/__init__.py` (gevent patching)."""
    name = "pyinfra_cli.inventory"
    if name in sys.modules:
        return sys.modules[name]
    if "pyinfra_cli" in sys.modules:
        return importlib.import_module(name)
    spec = importlib.util.find_spec("pyinfra_cli")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("pyinfra_cli is not installed")
    stub = types.ModuleType("pyinfra_cli")
    stub.__path__ = list(spec.submodule_search_locations)
    sys.modules["pyinfra_cli"] = stub
    try:
        return importlib.import_module(name)
    finally:  # a later plain `import pyinfra_cli` still runs the real package (and patches)
        if sys.modules.get("pyinfra_cli") is stub:
            del sys.modules["pyinfra_cli"]


@contextmanager
def memoised_entry_points(module: types.ModuleType) -> Iterator[None]:
    """`module.entry_points` answering each query once, from one scan, while the block runs.

    pyinfra looks up its connector entry points at least twice per inventory (and once more per
    `@connector` host), gevent its plugins about 25 times in 5 groups while patching: each a
    scan of every installed distribution's metadata (several ms). Nothing is installed
    meanwhile, so the answers cannot change: every distribution is read once and each query
    selects from that (`entry_points(**params)` is the same selection of the same scan).
    """
    scan = getattr(module, "entry_points")  # noqa: B009 (a module attribute)
    seen: dict[tuple[tuple[str, Any], ...], Any] = {}
    everything: list[Any] = []

    def entry_points(**params: Any) -> Any:
        key = tuple(sorted(params.items()))
        if key not in seen:
            if not everything:
                everything.append(scan())
            seen[key] = everything[0].select(**params) if params else everything[0]
        return seen[key]

    setattr(module, "entry_points", entry_points)  # noqa: B010
    try:
        yield
    finally:
        setattr(module, "entry_points", scan)  # noqa: B010


Occurrence = tuple[str, dict[str, Any]]  # (group, host data as the group lists it)


class Listings(dict[str, list[Occurrence]]):
    """Each host's entries as the inventory file's groups list them, and the groups of the
    wrong shape (group name, why), which pyinfra was told to skip."""

    def __init__(self) -> None:
        super().__init__()
        self.bad_groups: list[tuple[str, str]] = []


@contextmanager
def _capture_host_entries(cli: types.ModuleType) -> Iterator[Listings]:
    """Every `(host, data)` entry of the inventory file's groups, as pyinfra read them.

    pyinfra merges a host listed twice into one, later data winning silently; this keeps each
    listing so conflicting ones can be refused. It wraps the function that executes the file
    rather than executing the file a second time, and pyinfra's test of what is a group: a
    group of the wrong shape (fleet.remote.inventory_data) is recorded and skipped, so that
    pyinfra neither crashes on it nor drops it unsaid, and the other problems are still found.
    """
    seen = Listings()
    original = getattr(cli, "_get_groups_from_filename")  # noqa: B009 (a module attribute)
    is_group = getattr(cli, "_is_inventory_group")  # noqa: B009

    def capture(filename: str) -> dict[str, Any]:
        groups: dict[str, Any] = original(filename)
        for group, value in groups.items():
            hosts = value[0] if isinstance(value, tuple) else value
            for entry in hosts:
                name, data = entry if isinstance(entry, tuple) else (entry, {})
                if isinstance(name, str) and isinstance(data, dict):
                    seen.setdefault(name, []).append((group, dict(data)))
        return groups

    def checked_group(key: str, value: Any) -> bool:
        why = None if key.startswith("_") else group_shape_problem(key, value)
        if why:
            seen.bad_groups.append((key, why))
            return False
        return bool(is_group(key, value))

    setattr(cli, "_get_groups_from_filename", capture)  # noqa: B010
    setattr(cli, "_is_inventory_group", checked_group)  # noqa: B010
    try:
        yield seen
    finally:
        setattr(cli, "_get_groups_from_filename", original)  # noqa: B010
        setattr(cli, "_is_inventory_group", is_group)  # noqa: B010


@contextmanager
def _cwd_on_path(cwd: str) -> Iterator[None]:
    """As the pyinfra CLI does: an inventory may import helper modules from the project root."""
    added = cwd not in sys.path
    if added:
        sys.path.append(cwd)
    try:
        yield
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def _error_line(exc: BaseException, filename: str) -> int | None:
    """The line of `filename` where `exc` was raised (the innermost frame in that file)."""
    if isinstance(exc, SyntaxError) and exc.filename == filename:
        return exc.lineno
    line = None
    tb = exc.__traceback__ or getattr(exc, "_traceback", None)
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _load_error(exc: BaseException, source: str, is_file: bool) -> BadInput:
    from pyinfra.api.exceptions import PyinfraError

    inner: BaseException = getattr(exc, "exception", None) or exc  # UnexpectedExternalError
    filename = getattr(exc, "filename", None) if inner is not exc else None
    if isinstance(inner, UnicodeDecodeError):
        return _not_utf8(inner, filename if isinstance(filename, str) else None, source, is_file)
    if isinstance(inner, SyntaxError):
        return BadInput.single(f"Python syntax error: {inner.msg}",
                               file=inner.filename or source, line=inner.lineno)
    if not isinstance(filename, str):
        filename = source if is_file else None
    line = _error_line(inner, filename) if filename else None
    if isinstance(inner, PyinfraError):
        message = f"pyinfra cannot read it: {inner}"
    elif isinstance(inner, SystemExit):
        message = f"cannot load: it called exit({inner.code!r})"
    else:
        message = f"cannot load: {type(inner).__name__}: {inner}"
    return BadInput.single(message, file=filename, line=line,
                           field=None if filename else "--inventory")


def _not_utf8(exc: UnicodeDecodeError, filename: str | None, source: str,
              is_file: bool) -> BadInput:
    """Which file is not UTF-8 (the inventory or one of its group data files: the one whose
    bytes the decoder had), with the line and column of the first bad byte."""
    candidates = [filename] if filename else []
    if is_file:
        candidates.append(source)
        folders = [Path.cwd() / "group_data", Path(source).parent / "group_data"]
        candidates += [str(f) for d in folders if d.is_dir() for f in sorted(d.glob("*.py"))]
    data = bytes(exc.object)
    for name in candidates:
        try:
            if Path(name).read_bytes().startswith(data):
                decode_utf8(Path(name).read_bytes(), name)
        except BadInput as bad:
            return bad
        except OSError:
            continue
    where = candidates[0] if candidates else None
    try:
        decode_utf8(data, where, field=None if where else "--inventory")
    except BadInput as bad:
        return bad
    return BadInput.single(f"not UTF-8 text: {exc.reason}", file=where)


def _literal_lines(path: Path | None) -> dict[str, list[int]]:
    """Lines where each string literal, or each assigned name, appears in a Python file."""
    if path is None:
        return {}
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return {}
    lines: dict[str, list[int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            lines.setdefault(node.value, []).append(node.lineno)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            lines.setdefault(node.id, []).append(node.lineno)
    for found in lines.values():
        found.sort()
    return lines


def _group_data_file(group: str, folders: list[Path]) -> Path | None:
    for folder in reversed(folders):  # the inventory's own folder wins, as in pyinfra
        candidate = folder / f"{group}.py"
        if candidate.is_file():
            return candidate
    return None


def _differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """`key value vs value` for each key whose values differ; a secret-looking key's values
    (passwords, passphrases, tokens, keys) are masked, at any depth."""
    out = []
    for key in sorted(set(a) & set(b)):
        try:
            same = bool(a[key] == b[key])
        except Exception:
            same = False
        if not same:
            out.append(f"{key} {shown(key, a[key])} vs {shown(key, b[key])}")
    return out


def check_inventory(inventory: Any, *, file: Path | None, source: str,
                    listings: Mapping[str, list[Occurrence]],
                    group_data_folders: list[Path]) -> list[Problem]:
    """Every problem with the names, the groups' shapes and the host data's types in a loaded
    inventory (empty: it is fine)."""
    lines = _literal_lines(file)
    where_file = str(file) if file else None
    field = None if file else "--inventory"

    def at(text: str, nth: int = 0) -> int | None:
        found = lines.get(text) or []
        return found[min(nth, len(found) - 1)] if found else None

    problems: list[Problem] = [
        Problem(where_file, at(group), None, why)
        for group, why in getattr(listings, "bad_groups", [])]
    problems += data_problems(
        inventory, file=where_file, at=at, lines=lines,
        data_files=lambda g: _group_data_file(g, group_data_folders), literal_lines=_literal_lines)
    for host in inventory:
        problem = name_problem("host", host.name)
        if problem:
            problems.append(Problem(where_file, at(host.name), field, f"refusing {problem}"))
    for name, seen in listings.items():
        first_group, first = seen[0]
        for group, data in seen[1:]:
            diff = _differences(first, data)
            if diff:
                problems.append(Problem(
                    where_file, at(name, len(seen) - 1), field,
                    f"host {name!r} is listed in {first_group} and in {group} with different "
                    f"data ({'; '.join(diff)}): give it one set of data"))
                break
    stem = file.name.rsplit(".", 1)[0] if file else None
    for group in sorted(set(inventory.groups) | set(inventory.group_data)):
        if group.startswith("@") and CONNECTOR_NAME_RE.fullmatch(group):
            continue  # a group a pyinfra connector attaches (@local)
        problem = name_problem("group", group)
        if problem is None:
            continue
        data_file = _group_data_file(group, group_data_folders)
        if data_file is not None and group not in lines:
            problems.append(Problem(str(data_file), None, None,
                                    f"refusing {problem}, from this group data file's name"))
        elif group == stem:
            problems.append(Problem(where_file, None, None,
                                    f"refusing {problem}, from the inventory file's name"))
        else:
            problems.append(Problem(where_file, at(group), field, f"refusing {problem}"))
    for host in inventory:
        try:
            data = host.data.dict()
        except Exception:  # noqa: BLE001 (reported by data_problems)
            continue
        strict = data.get("ssh_strict_host_key_checking")
        if strict is not None and strict != "yes":
            text = strict if isinstance(strict, str) else ""
            problems.append(Problem(
                where_file, at(text) if text else None, "ssh_strict_host_key_checking",
                f"host {host.name!r}: refusing {strict!r}: fleet checks host keys strictly "
                "(\"yes\", the default); trust a new host's key with "
                "`fleet hosts trust -i INVENTORY HOST`"))
        for key, kind in _NAME_DATA.items():
            value = data.get(key)
            if value is None:
                continue
            problem = name_problem(kind, value)  # type: ignore[arg-type]
            if problem:
                text = value if isinstance(value, str) else ""
                problems.append(Problem(where_file, at(text) if text else None, key,
                                        f"host {host.name!r}: refusing {problem}"))
    if not problems and len(inventory) == 0:
        problems.append(Problem(where_file, None, field,
                                f"the inventory {source!r} defines no hosts"))
    secrets = _secrets(inventory, listings)
    problems = [replace(p, message=scrub(p.message, secrets)) for p in problems]
    return sorted(set(problems), key=lambda p: (p.file or "", p.line or 0, p.message))


def _secrets(inventory: Any, listings: Mapping[str, list[Occurrence]]) -> set[str]:
    """Every secret-looking value of the inventory's data: never printed in a message."""
    found = {s for seen in listings.values() for _g, data in seen for s in secret_values(data)}
    for host in inventory:
        try:
            found.update(secret_values(host.data.dict()))
        except Exception:  # noqa: BLE001, S112 (reported by data_problems)
            continue
    return found


def load_inventory_file(path: str | Path) -> Any:
    """A `pyinfra.api.Inventory` exactly as the `pyinfra` CLI reads `path` from the working
    directory: an inventory file, or a comma-separated host list (`@local,gpu-01`).

    Raises BadInput (every problem, with file and line) for a missing file, a file that fails to
    load (its exception and line), an invalid name or a host listed twice with different data.
    """
    from pyinfra.api.state import State
    from pyinfra.context import ctx_state

    source = str(path)
    p = Path(source)
    is_file = p.is_file()
    if not is_file and ("," not in source and "@" not in source):
        what = "is a directory, not an inventory file" if p.is_dir() else "no such inventory file"
        raise BadInput.single(what, file=source)
    if not is_file:  # a host list: pyinfra takes every item as a host name (and "" crashes it)
        bad = [name_problem("host", n) for n in source.split(",")]
        if any(bad):
            raise BadInput([Problem(None, None, "--inventory", f"refusing {b}") for b in bad if b])
    cli = _cli_inventory()
    util = sys.modules["pyinfra_cli.util"]
    cwd = os.getcwd()
    cached = set(util.PYTHON_CODES)
    state = State()  # exec_file records the file it runs on the current state
    try:
        with _cwd_on_path(cwd), ctx_state.use(state), _capture_host_entries(cli) as listings, \
                memoised_entry_points(sys.modules["pyinfra.api.connectors"]):
            inventory = cli.make_inventory_from_files(source, cwd=cwd)
    except (Exception, SystemExit) as exc:
        raise _load_error(exc, source, is_file) from exc
    finally:  # pyinfra caches compiled files by name: a later load must see edits
        for stale in set(util.PYTHON_CODES) - cached:
            util.PYTHON_CODES.pop(stale, None)
    folders = [Path(cwd) / "group_data"]
    if is_file:
        folders.append(p.parent.resolve() / "group_data")
    problems = check_inventory(inventory, file=p if is_file else None, source=source,
                               listings=listings, group_data_folders=folders)
    if problems:
        raise BadInput(problems)
    return inventory
