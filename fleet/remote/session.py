"""One pyinfra run against an inventory: load, connect, gather facts, apply operations.

This is the only module that drives pyinfra's engine. Callers get plain per-host results keyed by
host name, with unreachable hosts reported as such rather than raised, so a job can do the rest
and say which hosts it could not reach.

gevent: pyinfra only enforces per-command timeouts over SSH when the stdlib is monkey-patched.
CLI commands that reach hosts call `patch_gevent()` first thing; nothing here patches as a side
effect, so tests and commands that never touch hosts keep the plain stdlib.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleet.errors import BadInput, Problem

if TYPE_CHECKING:
    from fleet.domain.ports import HostRef

_patched = False


def patch_gevent() -> None:
    global _patched
    if not _patched:
        from importlib import metadata

        from gevent import monkey

        from fleet.remote.inventory import memoised_entry_points

        with memoised_entry_points(metadata):  # ~25 scans of every distribution: ~50 ms
            monkey.patch_all()
        _patched = True


@dataclass
class HostOutcome:
    """What one host did in a phase: reached or not, changed or not, and why it failed."""

    name: str
    reachable: bool = True
    ok: bool = True
    changed: bool = False
    error: str | None = None
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)


class _ErrorCollector(logging.Handler):
    """pyinfra reports connect and fact errors through its logger; keep them per host."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def load_inventory(path: str | Path) -> Any:
    """A pyinfra inventory, read as the plain `pyinfra` CLI reads it (a file, or a comma-separated
    host list), its names checked (fleet.remote.inventory)."""
    from fleet.remote.inventory import load_inventory_file

    return load_inventory_file(path)


def host_ref(host: Any) -> HostRef:
    """What a limit is matched against: the name, the inventory groups and the `pool` of the
    host's data (a pool given as data is selectable like a group)."""
    from fleet.domain.ports import HostRef

    data = host.data.dict() if hasattr(host.data, "dict") else dict(host.data or {})
    pool = data.get("pool")
    return HostRef(name=host.name, pool=str(pool) if pool else None,
                   groups=tuple(sorted(set(getattr(host, "groups", None) or []))))


def select_hosts(inventory: Any, limit: Sequence[str] | None, *,
                 field: str = "--limit") -> list[Any]:
    """Hosts in a group (or pool) named in `limit`, or whose name matches a glob in it; all when
    empty. Every value must select a host: a typo beside valid names is refused (BadInput
    naming `field`), never silently dropped."""
    hosts = list(inventory)
    if not limit:
        return hosts  # without importing the selection rules (and through them the models)
    from fleet.domain.selection import limit_matches, limit_problems

    refs = [host_ref(h) for h in hosts]
    wrong = limit_problems(limit, refs)
    if wrong:
        raise BadInput([Problem(None, None, field, why) for why in wrong])
    return [h for h, ref in zip(hosts, refs, strict=True)
            if any(limit_matches(lim, ref) for lim in limit)]


@dataclass
class Connected:
    state: Any
    hosts: list[Any]
    unreachable: dict[str, str]

    @property
    def active(self) -> list[Any]:
        return [h for h in self.hosts if h.name not in self.unreachable]


@contextmanager
def connected(inventory: Any, hosts: Iterable[Any], *, parallel: int = 0,
              connect_timeout: int = 10) -> Iterator[Connected]:
    """Connect to `hosts` in parallel; yield the state with the unreachable ones listed."""
    from pyinfra.api.config import Config
    from pyinfra.api.connect import connect_all, disconnect_all
    from pyinfra.api.exceptions import PyinfraError
    from pyinfra.api.state import State, StateStage

    chosen = list(hosts)
    config = Config(PARALLEL=parallel, CONNECT_TIMEOUT=connect_timeout)  # type: ignore[no-untyped-call]
    state = State(inventory, config,
                  initial_limit=chosen)
    strict_host_keys(chosen)
    collector = _ErrorCollector()
    log = logging.getLogger("pyinfra")
    log.addHandler(collector)
    log.propagate = False
    try:
        state.set_stage(StateStage.Connect)
        with suppress(PyinfraError):  # "No hosts remaining!" when every host failed
            connect_all(state)
        unreachable = {
            h.name: _reason(h.name, collector.messages) for h in chosen if not h.connected
        }
        state.set_stage(StateStage.Prepare)
        yield Connected(state, chosen, unreachable)
    finally:
        log.removeHandler(collector)
        with suppress(Exception):  # never let teardown hide the real outcome
            disconnect_all(state)
        _close_clients(chosen)


_background: Any = None  # one native worker thread per hub: tasks run in the order given


def in_background(fn: Callable[[], Any]) -> Any:
    """Run `fn` in a native thread, for CPU work (imports, loading files) while greenlets wait
    on hosts: connecting and running a command mostly wait on the network and on the hosts.
    Tasks run one after another in the order given (a later one may use an earlier one's
    result). `.get()` on the result waits cooperatively (the hub keeps serving the
    connections) and returns its value or raises its exception. Without gevent's patching
    there is no hub to keep serving: `fn` then simply runs at once."""
    global _background
    from gevent import monkey

    if not monkey.is_module_patched("socket"):
        return _Done(fn)
    import gevent
    from gevent.threadpool import ThreadPool

    if _background is None or _background.hub is not gevent.get_hub():
        _background = ThreadPool(1)
    return _background.spawn(fn)


class _Done:
    """`fn` already run, with `.get()` like gevent's AsyncResult."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        try:
            self.value = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised by get()
            self.error = exc

    def get(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


def _close_clients(hosts: Iterable[Any]) -> None:
    """Close each host's SSH client: pyinfra 3.10's SSH connector `disconnect()` leaves it open,
    so its paramiko transport threads lived on until the interpreter exited (about 0.3 s of
    shutdown for 20 hosts in `fleet probe`) and every extra call kept more connections open."""
    for h in hosts:
        client = getattr(getattr(h, "connector", None), "client", None)
        if client is not None:
            with suppress(Exception):
                client.close()


def strict_host_keys(hosts: Iterable[Any]) -> None:
    """Every SSH connection checks the host key strictly: pyinfra's default, `accept-new`,
    would save an impostor's key at first contact and send it the password. The inventory
    check refuses another value; this holds for inventories built in code too. The host keys
    pyinfra keeps between connections are dropped, so a key trusted or removed since is seen.
    """
    from pyinfra.connectors.ssh import SSHConnector
    from pyinfra.connectors.sshuserclient.client import get_host_keys, get_ssh_config

    get_host_keys.cache.clear()
    get_ssh_config.cache.clear()
    for h in hosts:
        connector = getattr(h, "connector", None)
        if isinstance(connector, SSHConnector):
            connector.data["ssh_strict_host_key_checking"] = "yes"


def _reason(host: str, messages: list[str]) -> str:
    from fleet.remote.hostkeys import refusal

    for m in reversed(messages):
        if f"[{host}]" in m:
            text = m.split("]", 1)[1].strip()
            if "StrictPolicy: No host key for" in text:
                name = text.split("No host key for ", 1)[1].split(" found", 1)[0]
                return refusal(host, f"unknown host key: {name} is not in known_hosts")
            if "Host key for" in text and "does not match" in text:
                name = text.split("Host key for ", 1)[1].split(" does not match", 1)[0]
                return refusal(host, f"host key changed: {name} offers another key than "
                                     "known_hosts holds")
            return text
    return "could not connect"


def gather(conn: Connected, fact: Any, kwargs_for: Callable[[Any], dict[str, Any]] | None = None,
           *, timeout: float | None = None, limit: int | None = None,
           **kwargs: Any) -> dict[str, Any]:
    """A fact from every reachable host, in parallel: {host name: value or exception}.

    `kwargs_for(host)` gives per-host fact arguments (a probe cursor, say); `kwargs` are shared.
    Over SSH each host's command runs bounded (fleet.remote.bounded): within `timeout` seconds
    (default: the host's `command_timeout_s` data, else COMMAND_TIMEOUT_S) and at most `limit`
    bytes of output (default FACT_LIMIT); past either, that host's value is the exception
    (HostTimedOut, OutputTooLarge) and the others are unaffected. Hosts on other connectors
    (`@local`, the test connectors) go through pyinfra's own fact code.
    """
    import gevent

    from fleet.remote.bounded import FACT_LIMIT

    def one(h: Any) -> Any:
        args = {**kwargs, **(kwargs_for(h) if kwargs_for else {})}
        try:
            if _ssh_client(h) is not None:
                return _bounded_fact(conn.state, h, fact, args, timeout=_timeout_for(h, timeout),
                                     limit=limit or FACT_LIMIT)
            return h.get_fact(fact, **args)
        except Exception as exc:
            return exc

    hosts = conn.active
    jobs = [conn.state.pool.spawn(one, h) for h in hosts]
    gevent.joinall(jobs)
    return {h.name: j.value for h, j in zip(hosts, jobs, strict=True)}


class FactFailed(Exception):
    """A fact's command exited non-zero: its output is not read as the fact."""


_NO_COMMAND = "##FLEET-NO-COMMAND##"


def _ssh_client(host: Any) -> Any:
    """The connected paramiko client of a host on pyinfra's SSH connector, else None."""
    from pyinfra.connectors.ssh import SSHConnector

    connector = getattr(host, "connector", None)
    if not isinstance(connector, SSHConnector):
        return None
    return getattr(connector, "client", None)


def _timeout_for(host: Any, timeout: float | None) -> float:
    from fleet.remote.bounded import COMMAND_TIMEOUT_S

    if timeout is not None:
        return timeout
    value = host.data.get("command_timeout_s")
    try:
        seconds = float(value) if value is not None else COMMAND_TIMEOUT_S
    except (TypeError, ValueError):
        raise ValueError(f"command_timeout_s: expected seconds, got {value!r}") from None
    if not seconds > 0:
        raise ValueError(f"command_timeout_s: expected seconds above 0, got {value!r}")
    return seconds


def _bounded_fact(state: Any, host: Any, fact_cls: Any, args: dict[str, Any], *,
                  timeout: float, limit: int) -> Any:
    """What `host.get_fact(fact_cls, **args)` returns, read through `run_bounded`.

    The command line is the one pyinfra would send (its `_sudo`, `_env` and shell settings
    from the host's data), with the fact's `requires_command` guard; a missing command gives
    the fact's default, a non-zero exit FactFailed.
    """
    from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS, pop_global_arguments
    from pyinfra.api.command import StringCommand
    from pyinfra.connectors.util import make_unix_command_for_host

    from fleet.remote.bounded import run_bounded

    fact = fact_cls()
    command = str(fact.command(**args))
    requires = fact.requires_command(**args)
    if requires:
        command = (f"if command -v {requires} >/dev/null 2>&1; then ( {command} ); "
                   f"else echo '{_NO_COMMAND}'; fi")
    global_args, _ = pop_global_arguments(state, host, {})
    executor = {k: v for k, v in global_args.items() if k in CONNECTOR_ARGUMENT_KEYS}
    executor.pop("_timeout", None)
    executor.pop("_success_exit_codes", None)
    executor.pop("_get_pty", None)
    executor.pop("_stdin", None)
    line = make_unix_command_for_host(state, host, StringCommand(command), **executor)
    client = _ssh_client(host)
    out = run_bounded(client.get_transport(), line.get_raw_value(), timeout=timeout,
                      limit=limit)
    lines = out.stdout.decode("utf-8", "replace").splitlines()
    if out.exit_code != 0:
        tail = out.stderr.decode("utf-8", "replace").strip().splitlines()[-3:]
        raise FactFailed(f"{fact.name} exited {out.exit_code}" +
                         (f": {' | '.join(tail)}" if tail else ""))
    if lines == [_NO_COMMAND]:
        return fact.default()
    return fact.process(lines) if lines else fact.default()


def apply(conn: Connected, op: Callable[..., Any], kwargs_for: Callable[[Any], dict[str, Any]],
          *, execute: bool = True) -> dict[str, HostOutcome]:
    """Prepare `op` on every reachable host concurrently, then run it (unless `execute` is False).

    Preparing hosts concurrently matters: pyinfra's add_op prepares one host after another,
    which took 8 s for 20 lab hosts in the spike against 1 s concurrently.
    """
    import gevent
    from pyinfra.api.exceptions import PyinfraError
    from pyinfra.api.operation import add_op
    from pyinfra.api.operations import run_ops
    from pyinfra.api.state import StateStage
    from pyinfra.context import ctx_state

    state = conn.state
    outcomes = {h.name: HostOutcome(h.name, reachable=False, ok=False,
                                    error=conn.unreachable[h.name])
                for h in conn.hosts if h.name in conn.unreachable}
    metas: dict[str, Any] = {}

    def prepare(h: Any) -> None:
        try:
            metas[h.name] = add_op(state, op, host=h, **kwargs_for(h)).get(h)
        except Exception as exc:
            outcomes[h.name] = HostOutcome(h.name, ok=False, error=str(exc))

    with ctx_state.use(state):
        gevent.joinall([state.pool.spawn(prepare, h) for h in conn.active])
    for h in conn.active:
        if h.name in outcomes:
            continue
        meta = metas.get(h.name)
        outcomes[h.name] = HostOutcome(h.name, changed=bool(meta and meta.will_change))
    if execute and any(o.changed for o in outcomes.values()):
        state.set_stage(StateStage.Execute)
        with suppress(PyinfraError):  # per-host failures are read below
            run_ops(state)
        for h in conn.active:
            meta, out = metas.get(h.name), outcomes[h.name]
            if meta is None or not out.ok or not out.changed:
                continue
            if not meta.is_complete():
                out.ok, out.error = False, "not executed: the host failed before this operation"
                continue
            out.ok, out.changed = meta.did_succeed(), meta.did_change()
            out.stdout, out.stderr = list(meta.stdout_lines), list(meta.stderr_lines)
            if not out.ok:
                out.error = "\n".join(out.stderr[-5:]) or "operation failed"
    return outcomes
