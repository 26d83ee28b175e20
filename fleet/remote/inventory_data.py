"""The shape of an inventory's groups and the types of the host data fleet reads (issue 28).

pyinfra takes a module-level list as a group of hosts, or a `(hosts, data)` tuple; anything else
in such a list makes it drop the whole group with a log warning (its hosts vanish from every
rollout), and a tuple of the wrong length or data that is not a dict crashes it later
(IndexError, "dictionary update sequence"). Host data that fleet reads (`unit`, `gpu_count`,
...) of the wrong type crashed the planner (`unhashable type: 'list'`). Each becomes a problem
naming the group or the host, the field and the line, before anything connects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fleet.errors import Problem


def _article(value: Any) -> str:
    name = type(value).__name__
    return f"an {name}" if name[:1] in "aeiou" else f"a {name}"


def _text(value: Any) -> str | None:
    return None if isinstance(value, str) else f"expected a text, got {_article(value)} {value!r}"


def _count(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return f"expected a whole number of GPUs, got {_article(value)} {value!r}"
    return None if value >= 0 else f"expected 0 or more GPUs, got {value!r}"


def _port(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
        return f"expected a port number (1 to 65535), got {value!r}"
    return None


def _seconds(value: Any) -> str | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < float("inf")
    return None if ok else f"expected seconds above 0, got {value!r}"


HOST_DATA: dict[str, Callable[[Any], str | None]] = {
    "unit": _text, "gpu_model": _text, "gpu_count": _count, "scheduler": _text,
    "slurm_conf": _text, "kubeconfig": _text, "ssh_port": _port, "command_timeout_s": _seconds,
}
"""The host data fleet itself reads, with its check (`pool` and `slurm_node` are names:
fleet.domain.names). `None` is accepted everywhere: the same as leaving the key out."""


def _entry_problem(entry: Any) -> str | None:
    if isinstance(entry, str):
        return None
    if (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str)
            and isinstance(entry[1], dict)):
        return None
    if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str):
        return f"host {entry[0]!r}: its data must be a dict, got {_article(entry[1])}"
    return f"{entry!r} is neither a host name nor a (name, data dict) pair"


def group_shape_problem(group: str, value: Any) -> str | None:
    """Why a module-level list or tuple `group` of an inventory file is not a valid group."""
    if not isinstance(value, list | tuple):
        return None  # not a group for pyinfra either
    hosts = value
    if isinstance(value, tuple):
        if len(value) != 2 or not isinstance(value[0], list | tuple):
            return (f"group {group!r}: a tuple must be (hosts, data), a list of hosts and a "
                    f"dict; got {len(value)} item(s)")
        if not isinstance(value[1], dict):
            return f"group {group!r}: (hosts, data): data must be a dict, got {_article(value[1])}"
        hosts = value[0]
    for i, entry in enumerate(hosts):
        why = _entry_problem(entry)
        if why:
            return (f"group {group!r}: item {i + 1}: {why} (pyinfra would drop the whole group; "
                    "name a helper list with a leading '_')")
    return None


def data_problems(inventory: Any, *, file: str | None, at: Callable[[str, int], int | None],
                  lines: Mapping[str, list[int]], data_files: Callable[[str], Path | None],
                  literal_lines: Callable[[Path], dict[str, list[int]]]) -> list[Problem]:
    """A problem for each value of `HOST_DATA` of the wrong type, at its source: the host's own
    entry in the inventory file, the group tuple that gave it, or the group data file."""
    out: set[Problem] = set()
    for host in inventory:
        own = inventory.get_host_data(host.name) or {}
        try:
            data = host.data.dict()
        except Exception as exc:  # noqa: BLE001 (never skipped unsaid)
            out.add(Problem(file, at(host.name, 0), None,
                            f"host {host.name!r}: its data cannot be read: {exc}"))
            continue
        for key, check in HOST_DATA.items():
            value = data.get(key)
            why = None if value is None else check(value)
            if why is None:
                continue
            if key in own:
                start = at(host.name, 0) or 0
                after = [n for n in lines.get(key, []) if n >= start]
                out.add(Problem(file, after[0] if after else at(host.name, 0), key,
                                f"host {host.name!r}: {why}"))
                continue
            group = _giving_group(inventory, host, key)
            data_file = data_files(group) if group else None
            if data_file is not None and key in literal_lines(data_file):
                out.add(Problem(str(data_file), literal_lines(data_file)[key][0], key,
                                f"group {group!r}: {why}"))
            else:  # a group tuple's data (one problem for the group, not one per host)
                out.add(Problem(file, at(group, 0) if group else None, key,
                                f"group {group!r}: {why}"))
    return sorted(out, key=lambda p: (p.file or "", p.line or 0, p.message))


def _giving_group(inventory: Any, host: Any, key: str) -> str | None:
    """The group whose data gave `host` its `key` (the last one wins, as in pyinfra)."""
    for group in reversed(list(host.groups or [])):
        if key in (inventory.get_group_data(group) or {}):
            return str(group)
    return "all" if key in (inventory.get_data() or {}) else None
