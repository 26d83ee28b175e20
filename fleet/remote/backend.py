"""`Backend` over SSH: pyinfra for facts, pins and reboots; one connection round per call.

A pyinfra State cannot run twice, so each call loads the inventory afresh, connects, does its one
thing and disconnects.
Connecting 20 lab hosts costs about a second (spike figures), small next to an apt transaction.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from fleet.remote.session import Connected, apply, connected, gather, load_inventory, select_hosts

if TYPE_CHECKING:  # imported where used: `fleet probe` connects before it loads the models
    from fleet.domain.facts import HostFacts
    from fleet.domain.matrix.models import Release
    from fleet.domain.pinning import PinPlan
    from fleet.domain.ports import HostRef, HostResult, Samples
    from fleet.domain.reboot_gate import RebootPass

Cursors = Mapping[str, str | None]

PROBE_PARALLEL = 256
"""Hosts probed at once. pyinfra's default is 20 per controller CPU: 40 on a 2-core controller,
so a 50-host probe ran in two rounds. A probe holds a connection for well under a second and
costs the controller a few ms per host."""

APPLY_TIMEOUT_S = 3600
"""Deadline of each command of a pin (pyinfra's `_timeout`): an apt or dnf transaction that
downloads a driver takes minutes; a host that takes the command and never finishes it fails
after this, the others carry on."""

NODE_TIMEOUT_S = 300
"""Deadline of each node-state command: `nvidia-smi -e`, `-mig` or `mig -cgi` on an 8-GPU host
takes seconds; one that hangs (a GPU stuck in a reset) fails its host after this."""

# Groups pyinfra (or the inventory file) adds that are not pools; so are the file's stem and the
# groups a connector attaches (`@local`).
_NOT_POOLS = frozenset({"all"})


def _pool(host: Any, stem: str) -> str | None:
    explicit = host.data.get("pool")
    if explicit:
        return str(explicit)
    groups = sorted(g for g in (host.groups or [])
                    if g not in _NOT_POOLS and g != stem and not g.startswith("@"))
    return groups[0] if groups else None


def _packages(release: Release, family: str) -> list[tuple[str, str, str]]:
    fam: Literal["debian", "rhel"] = "rhel" if family == "rhel" else "debian"
    return [(p.name, p.version, p.component) for p in release.packages(fam)]


def driver_refusals(readings: Mapping[str, Any]) -> dict[str, str]:
    """Hosts whose driver fleet must not pin (the GPU Operator's container, or cannot tell),
    from `facts.DriverRoot` per host; a reading that failed is a host fleet cannot account
    for (fail closed)."""
    from fleet.domain.driver_owner import DriverOwner, from_host, refusal

    out: dict[str, str] = {}
    for name, reading in readings.items():
        owner = (DriverOwner("unknown", f"reading /run/nvidia failed: {reading}")
                 if isinstance(reading, Exception) else from_host(reading))
        why = refusal(owner)
        if why is not None:
            out[name] = why
    return out


class SshBackend:
    """The fleet as a pyinfra inventory describes it (the same file the `pyinfra` CLI takes)."""

    def __init__(self, inventory_path: str | Path, limit: Sequence[str] | None = None, *,
                 connect_timeout: int = 10, reboot_timeout: int = 300) -> None:
        self.inventory_path = Path(inventory_path)
        self.inventory = load_inventory(self.inventory_path)
        self._hosts = {h.name: h for h in select_hosts(self.inventory, limit)}
        self.connect_timeout = connect_timeout
        self.reboot_timeout = reboot_timeout
        self._fresh = True  # no State has run over self.inventory yet

    def names(self) -> list[str]:
        """The selected hosts' names, in inventory order (cheaper than `hosts()`)."""
        return list(self._hosts)

    def hosts(self) -> list[HostRef]:
        from fleet.domain.ports import HostRef

        stem = self.inventory_path.stem
        refs = []
        for h in self._hosts.values():
            data = h.data.dict()
            refs.append(HostRef(
                name=h.name, pool=_pool(h, stem), gpu_model=data.get("gpu_model"),
                gpu_count=data.get("gpu_count"), unit=data.get("unit"),
                groups=tuple(sorted(set(h.groups or []))), data=data,
            ))
        return refs

    def _connect(self, names: Sequence[str], parallel: int = 0) -> Any:
        """A fresh inventory per run: pyinfra keeps each host's operation order on the Host
        object, so a second State over the same Host objects fails (KeyError in run_ops). The
        first run takes the one loaded in `__init__` (reading it again cost `fleet probe`
        another execution of the inventory file before connecting)."""
        unknown = [n for n in names if n not in self._hosts]
        if unknown:
            raise KeyError(f"not in the inventory: {', '.join(unknown)}")
        if self._fresh:
            self._fresh, inventory = False, self.inventory
        else:
            inventory = load_inventory(self.inventory_path)
        return connected(inventory, [inventory.get_host(n) for n in names],
                         connect_timeout=self.connect_timeout, parallel=parallel)

    @staticmethod
    def _unreachable(conn: Connected) -> dict[str, HostResult[Any]]:
        from fleet.domain.ports import HostResult

        return {n: HostResult.unreachable(n, e) for n, e in conn.unreachable.items()}

    def probe(self, hosts: Sequence[str], *,
              since: Cursors | Callable[[], Cursors] | None = None,
              frameworks: bool = False) -> dict[str, HostResult[HostFacts]]:
        """Host facts. `since` may be a callable: it is called once the hosts are connected,
        before the probe is sent (`fleet probe` reads the cursors, and waits for its matrix,
        while the hosts connect); what it raises stops the probe before anything runs. The
        models are imported once the answers are in: before, they would delay the first
        connection (`fleet probe` loads them in a thread while the hosts connect)."""
        from fleet.remote.probe_fact import HostProbe

        with self._connect(hosts, parallel=min(len(hosts), PROBE_PARALLEL)) as conn:
            cursors = (since() if callable(since) else since) or {}
            raw = gather(conn, HostProbe, kwargs_for=lambda h: {
                "since": cursors.get(h.name), "frameworks": frameworks})
            unreachable = dict(conn.unreachable)
        from pydantic import ValidationError

        from fleet.domain.facts import HostFacts
        from fleet.domain.ports import HostResult

        out: dict[str, HostResult[HostFacts]] = {
            n: HostResult.unreachable(n, e) for n, e in unreachable.items()}
        from fleet.remote.bounded import HostTimedOut

        for name, value in raw.items():
            if isinstance(value, HostTimedOut):  # it took the session and never answered
                out[name] = HostResult.unreachable(name, f"probe {value}")
                continue
            if isinstance(value, Exception):
                out[name] = HostResult.failed(name, f"probe failed: {value}")
                continue
            try:
                out[name] = HostResult(name, HostFacts.model_validate(value))
            except ValidationError as exc:
                out[name] = HostResult.failed(name, f"probe output invalid: {exc}")
        return out

    def _plans(self, conn: Connected, release: Release,
               kernel_hold: Collection[str] = frozenset()) -> dict[str, HostResult[PinPlan]]:
        from fleet.domain.kernel_hold import KERNEL_HOLD_PATH
        from fleet.domain.pinning import PREFERENCES_PATH, UNATTENDED_PATH
        from fleet.domain.ports import HostResult
        from fleet.remote import facts as F

        out: dict[str, HostResult[PinPlan]] = {}
        families = gather(conn, F.OsFamily)
        for name, why in driver_refusals(gather(conn, F.DriverRoot)).items():
            out[name] = HostResult.refusal(name, why)
        families = {n: f for n, f in families.items() if n not in out}
        modules = gather(conn, F.LoadedModuleVersion)
        deb = [n for n, f in families.items() if f == "debian"]
        rhel = [n for n, f in families.items() if f == "rhel"]
        for name, fam in families.items():
            if fam not in ("debian", "rhel"):
                out[name] = HostResult.failed(name, f"unsupported OS family: {fam!r}")
        if deb:
            installed = gather(conn, F.DebNvidiaPackages)
            residual = gather(conn, F.DebResidualPackages)
            held = gather(conn, F.AptHeldPackages)
            kernels = gather(conn, F.DebKernelPackages)
            files = gather(conn, F.FileContents,
                           paths=[PREFERENCES_PATH, UNATTENDED_PATH, KERNEL_HOLD_PATH])
            for name in deb:
                out[name] = self._plan_one(name, "debian", release, installed[name], held[name],
                                           files[name], modules.get(name),
                                           residual=residual.get(name), kernels=kernels[name],
                                           hold=name in kernel_hold)
        if rhel:
            installed = gather(conn, F.RpmNvidiaPackages)
            locks = gather(conn, F.DnfVersionLocks)
            streams = gather(conn, F.DnfDriverStreams)
            kernels = gather(conn, F.RpmKernelPackages)
            records = gather(conn, F.FileContents, paths=[KERNEL_HOLD_PATH])
            for name in rhel:
                out[name] = self._plan_one(name, "rhel", release, installed[name], locks[name],
                                           records[name], modules.get(name),
                                           streams.get(name, {}), kernels=kernels[name],
                                           hold=name in kernel_hold)
        return out

    @staticmethod
    def _plan_one(name: str, family: Any, release: Release, installed: Any, held: Any,
                  files: Any, module: Any = None, streams: Any = None,
                  residual: Any = None, *, kernels: Any, hold: bool) -> HostResult[PinPlan]:
        """`files` holds the managed files fleet reads on this family (on dnf hosts only the
        kernel hold record: automatic.conf is rewritten with the locks)."""
        from fleet.domain.kernel_hold import KERNEL_HOLD_PATH, with_kernel_hold
        from fleet.domain.pinning import plan_pin
        from fleet.domain.ports import HostResult
        from fleet.remote import facts as F

        for value in (installed, held, files, streams, residual, kernels):
            if isinstance(value, Exception):
                return HostResult.failed(name, f"could not read packages: {value}")
        if KERNEL_HOLD_PATH not in files:  # an answer without it: the record is unread
            return HostResult.failed(name, f"could not read {KERNEL_HOLD_PATH}")
        record = files[KERNEL_HOLD_PATH]
        pin_files = {k: v for k, v in files.items() if k != KERNEL_HOLD_PATH}
        wanted = release.packages(family)
        loaded = module if isinstance(module, str) else None
        args = F.stream_args(release.driver_module_stream(), streams) if streams else {}
        try:
            plan = plan_pin(family, wanted, installed, held, pin_files, loaded,
                            residual=residual or (), **args)
            return HostResult(name, with_kernel_hold(plan, hold=hold, kernels=kernels,
                                                     record=record))
        except ValueError as exc:  # a name from the host that is not a plain package name
            return HostResult.failed(name, str(exc))

    def plan(self, hosts: Sequence[str], release: Release, *,
             kernel_hold: Collection[str] = frozenset()) -> dict[str, HostResult[PinPlan]]:
        with self._connect(hosts) as conn:
            return {**self._unreachable(conn), **self._plans(conn, release, kernel_hold)}

    def apply(self, hosts: Sequence[str], release: Release, *,
              kernel_hold: Collection[str] = frozenset()) -> dict[str, HostResult[PinPlan]]:
        from fleet.remote import facts as F
        from fleet.remote.operations import pin_release

        start = time.monotonic()
        with self._connect(hosts) as conn:
            out = {**self._unreachable(conn), **self._plans(conn, release, kernel_hold)}
            families = gather(conn, F.OsFamily)
            runnable = [n for n, r in out.items() if r.ok and r.value is not None]
            if not runnable:
                return out
            conn.hosts = [h for h in conn.hosts if h.name in runnable]
            done = apply(conn, pin_release, lambda h: {
                "release": release.name, "packages": _packages(release, families[h.name]),
                "stream": release.driver_module_stream() if families[h.name] == "rhel" else None,
                "kernel_hold": h.name in kernel_hold, "_timeout": APPLY_TIMEOUT_S})
        for name, outcome in done.items():
            res = out[name]
            res.seconds = time.monotonic() - start
            res.changed = outcome.changed
            if not outcome.ok:
                res.ok, res.error = False, outcome.error or "apply failed"
        return out

    def reboot(self, hosts: Sequence[str], *, gate: RebootPass) -> dict[str, HostResult[None]]:
        """Only hosts the pre-reboot gate passed (`fleet.jobs.reboot_gate.gated_reboot`)."""
        from fleet.domain.ports import HostResult
        from fleet.domain.reboot_gate import require_pass
        from fleet.remote.reboot_wait import reboot

        require_pass(gate, hosts)

        start = time.monotonic()
        with self._connect(hosts) as conn:
            out: dict[str, HostResult[None]] = self._unreachable(conn)
            done = apply(conn, reboot, lambda h: {
                "delay": 2, "interval": 1, "reboot_timeout": self.reboot_timeout})
        for name, outcome in done.items():
            if name in out:
                continue
            res: HostResult[None] = HostResult(name, None, changed=True,
                                               seconds=time.monotonic() - start)
            if not outcome.ok:
                res.ok, res.error = False, outcome.error or "reboot failed"
            out[name] = res
        return out

    def run_commands(self, commands: Mapping[str, Sequence[tuple[str, ...]]], *,
                     files: Mapping[str, Mapping[str, str]] | None = None,
                     remove_boot: Collection[str] = ()
                     ) -> dict[str, HostResult[list[str]]]:
        """Node-state commands, boot-unit files and boot units to remove per host
        (`fleet.domain.ports.NodeCommands`): checked here, before connecting, so an unsafe one
        fails its host and reaches none."""
        from fleet.domain.node_commands import UnsafeCommand, check_argv
        from fleet.domain.ports import HostResult
        from fleet.remote.operations import node_commands

        out: dict[str, HostResult[list[str]]] = {}
        todo: dict[str, list[list[str]]] = {}
        for name, argvs in commands.items():
            try:
                todo[name] = [list(check_argv(a)) for a in argvs]
            except UnsafeCommand as exc:
                out[name] = HostResult.failed(name, f"refused: {exc}")
        files = files or {}
        todo.update({n: [] for n in [*files, *remove_boot] if n not in todo and n not in out})
        todo = {n: a for n, a in todo.items() if a or files.get(n) or n in remove_boot}
        out.update({n: HostResult(n, [], changed=False) for n in commands
                    if n not in out and n not in todo})
        if not todo:
            return out
        start = time.monotonic()
        with self._connect(list(todo)) as conn:
            out.update(self._unreachable(conn))
            done = apply(conn, node_commands, lambda h: {
                "commands": todo[h.name], "files": dict(files.get(h.name) or {}),
                "remove_boot": h.name in remove_boot,
                "_timeout": NODE_TIMEOUT_S})
        for name, outcome in done.items():
            if name in out:
                continue
            res: HostResult[list[str]] = HostResult(
                name, list(outcome.stdout), changed=outcome.changed,
                seconds=time.monotonic() - start)
            if not outcome.ok:
                said = " | ".join(outcome.stdout[-3:])  # nvidia-smi reports errors on stdout
                res.ok = False
                res.error = (said if outcome.error in (None, "operation failed") and said
                             else outcome.error or "node-state command failed")
            out[name] = res
        return out

    def benchmark(self, hosts: Sequence[str], suite: str,
                  params: Mapping[str, Any] | None = None) -> dict[str, HostResult[Samples]]:
        from fleet.remote.bench import run_benchmarks  # written with the benchmark suite

        with self._connect(hosts) as conn:
            return {**self._unreachable(conn), **run_benchmarks(conn, None, suite, params or {})}

    def close(self) -> None:
        """Nothing held between calls: each call connects and disconnects."""
