"""`fleet probe` against ansible-core ad-hoc and a bare fabric ThreadingGroup, on a 20-host lab.

    sudo .venv/bin/python benchmarks/probe_speed.py [--hosts 20] [--runs 5] [--keep-lab]
    sudo .venv/bin/python benchmarks/probe_speed.py --hosts 50   # ansible still with -f 20

Issue 4 §5, goals raised by issue 17.3. Run it under `flock /tmp/fleet-lab.lock` where other
lab users share the machine (one lab, one bridge at a time); it takes its lab down at the end.

Every contender runs the same probe command,
`fleet.remote.probe_fact.probe_command(None, frameworks=False)` (the host probe shipped inline,
run with the host's python3), on every lab host, with strict host-key checking against the lab's
known_hosts. Per run, in rotating order:

- `fleet probe` (CLI, a fresh process): `python -m fleet probe --no-frameworks --json` with the
  example matrix, recording snapshots, counters and findings in a SQLite history (one history for
  all runs, as in daily use: the kernel-log cursor of the previous run is passed on).
- ansible-core ad-hoc, `ansible gpu -m shell -a CMD -f 20` (a fresh process), pipelining on, no
  fact gathering, `ansible_python_interpreter` set (no interpreter discovery), the json callback;
  a fresh ControlPath directory per run, so no connection is reused from the previous run.
  ansible-core is installed from PyPI into its own venv under the lab cache
  (`$FLEET_LAB_CACHE/bench-ansible`, default /var/cache/fleet-lab), once.
- bare fabric in a fresh process: a `ThreadingGroup` over all hosts running the command.
- and in this process (no interpreter start, no imports): `fleet.jobs.probe.probe_inventory`
  and a bare fabric `ThreadingGroup`.

Every run's output is checked: each host's document must parse as `HostFacts` from NVML.
Then the probe's own CPU time on a host (user + system of the probe process and its children,
`getrusage(RUSAGE_CHILDREN)` in a small wrapper on the host), median of `--cpu-runs`.
Prints medians and the ratios, and the median CPU time (user + system) each fresh-process
contender spent on the controller: on a small machine the hosts' sshd and probes share the CPUs
with the controller, so what `fleet probe` burns there shows in its wall time. Goals: `fleet
probe` at least 3.5x faster than ansible (forks=20), within 1.3x of bare fabric (issue 17.3;
were 3x and 1.5x); the probe under 150 ms of CPU on a host.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fresh_bytecode import ensure_bytecode  # noqa: E402

from fleet.lab import lab  # noqa: E402
from fleet.lab.model import LabState  # noqa: E402
from fleet.lab.paths import LabPaths  # noqa: E402
from fleet.remote.probe_fact import parse_probe_output, probe_command  # noqa: E402

MATRIX = ROOT / "matrices" / "example.yaml"
INVENTORY = ROOT / "inventories" / "lab.py"
ANSIBLE_SPEC = "ansible-core>=2.18,<2.20"
GOAL_VS_ANSIBLE, GOAL_VS_FABRIC, GOAL_CPU_MS = 3.5, 1.3, 150.0

FABRIC_SCRIPT = r"""
import json, sys, paramiko
from fabric import Config, ThreadingGroup
from fabric.exceptions import GroupException
spec = json.load(sys.stdin)
g = ThreadingGroup(*[h["address"] for h in spec["hosts"]], user="root",
                   config=Config(overrides={"load_ssh_configs": False}),
                   connect_kwargs={"key_filename": spec["key"], "look_for_keys": False,
                                   "allow_agent": False, "timeout": 10})
for c in g:
    c.client.load_host_keys(spec["known_hosts"])
    c.client.set_missing_host_key_policy(paramiko.RejectPolicy())
try:
    res = g.run(spec["command"], hide=True, warn=True, in_stream=False)
except GroupException as e:
    res = e.result
out = {}
for c, r in res.items():
    ok = not isinstance(r, Exception)
    out[c.host] = {"rc": r.exited, "stdout": r.stdout} if ok else {"error": repr(r)}
g.close()
print(json.dumps(out))
"""

CPU_WRAPPER = (
    "import resource,subprocess,sys,time;"
    "t=time.monotonic();"
    "r=subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL);"
    "w=time.monotonic()-t;"
    "u=resource.getrusage(resource.RUSAGE_CHILDREN);"
    "print(r.returncode,u.ru_utime+u.ru_stime,w)"
)


def _valid(stdout: str) -> bool:
    from fleet.domain.facts import HostFacts

    try:
        facts = HostFacts.model_validate(parse_probe_output(stdout.splitlines()))
    except Exception:  # noqa: BLE001 - counted as a failed host
        return False
    return facts.source == "nvml" and bool(facts.gpus)


# ------------------------------------------------------------------------------- ansible setup
def ensure_ansible(cache: Path) -> Path:
    venv = cache / "bench-ansible"
    exe = venv / "bin" / "ansible"
    if exe.exists():
        return exe
    print(f"installing {ANSIBLE_SPEC} into {venv} (once)", flush=True)
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin/pip"), "install", "-q", "--disable-pip-version-check",
                    ANSIBLE_SPEC], check=True)
    return exe


def ansible_inventory(state: LabState, paths: LabPaths, path: Path) -> None:
    ssh_args = (f"-o UserKnownHostsFile={paths.known_hosts} -o StrictHostKeyChecking=yes "
                "-o IdentitiesOnly=yes")
    lines = ["[gpu]"]
    lines += [f"{h.name} ansible_host={h.address} ansible_port={h.port}" for h in state.hosts]
    lines += [
        "[gpu:vars]",
        "ansible_user=root",
        f"ansible_ssh_private_key_file={paths.client_key}",
        f"ansible_ssh_common_args='{ssh_args}'",
        "ansible_python_interpreter=/usr/bin/python3",
    ]
    path.write_text("\n".join(lines) + "\n")


# ------------------------------------------------------------------------------- contenders
class Bench:
    def __init__(self, paths: LabPaths, state: LabState, work: Path, ansible: Path,
                 forks: int) -> None:
        self.paths, self.state, self.work, self.ansible, self.forks = (
            paths, state, work, ansible, forks)
        self.command = probe_command(None, frameworks=False)
        self.n = len(state.hosts)
        self.db = work / "fleet.db"
        self.env = {**os.environ, "FLEET_LAB_DIR": str(paths.run), "FLEET_DB": str(self.db),
                    "COLUMNS": "200"}
        self.inv = work / "ansible-hosts.ini"
        ansible_inventory(state, paths, self.inv)
        self.run_no = 0

    def fleet_cli(self) -> int:
        r = subprocess.run(
            [sys.executable, "-m", "fleet", "probe", "-i", str(INVENTORY), "-m", str(MATRIX),
             "--no-frameworks", "--json"],
            env=self.env, capture_output=True, text=True, cwd=ROOT, check=False)
        if r.returncode not in (0, 1):
            raise RuntimeError(f"fleet probe exited {r.returncode}: {r.stderr[-2000:]}")
        hosts = json.loads(r.stdout)["hosts"]
        return sum(1 for h in hosts if h["reachable"] and h["source"] == "nvml" and h["gpus"])

    def fleet_inproc(self) -> int:
        """probe_inventory, as `fleet probe` calls it (gevent patched first), no CLI around it."""
        from datetime import UTC, datetime

        from fleet.domain.matrix.loader import load_matrix
        from fleet.history import open_history
        from fleet.jobs.probe import probe_inventory
        from fleet.remote.session import patch_gevent

        patch_gevent()
        os.environ["FLEET_LAB_DIR"] = str(self.paths.run)
        matrix = load_matrix(MATRIX).matrix
        with open_history(str(self.work / "inproc.db")) as history:
            res = probe_inventory(INVENTORY, None, history, now=lambda: datetime.now(UTC),
                                  matrix=matrix, frameworks=False)
        return sum(1 for r in res if r.facts is not None and r.facts.source == "nvml")

    def worker(self, kind: str) -> float:
        """One call of an in-process contender, timed after an untimed warm-up call in the same
        fresh process (imports, first connections): each gets its own process, since pyinfra
        needs gevent's monkey patching and the fabric baseline must run without it."""
        r = subprocess.run([sys.executable, __file__, "--worker", kind, "--run-dir",
                            str(self.paths.run), "--work", str(self.work)],
                           capture_output=True, text=True, cwd=ROOT, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"worker {kind} exited {r.returncode}: {r.stderr[-2000:]}")
        ok, dt = r.stdout.split()[-2:]
        if int(ok) != self.n:
            raise RuntimeError(f"{kind} (in-process): {ok} of {self.n} hosts gave valid facts")
        return float(dt)

    def ansible_cli(self) -> int:
        self.run_no += 1
        tmp = self.work / f"ansible-{self.run_no}"
        env = {**os.environ,
               "ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_PIPELINING": "True",
               "ANSIBLE_GATHERING": "explicit", "ANSIBLE_LOCAL_TEMP": str(tmp / "tmp"),
               "ANSIBLE_HOME": str(tmp / "home"), "ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp / "cp"),
               "ANSIBLE_DEPRECATION_WARNINGS": "False", "ANSIBLE_NOCOLOR": "True"}
        r = subprocess.run(
            [str(self.ansible), "-i", str(self.inv), "gpu", "-f", str(self.forks), "-m", "shell",
             "-o", "-a", self.command],
            env=env, capture_output=True, text=True, check=False)
        # one line per host: `h1 | CHANGED | rc=0 | (stdout) {...}` (the probe prints one line)
        ok = 0
        for line in r.stdout.splitlines():
            head, sep, rest = line.partition(" | (stdout) ")
            if sep and head.endswith("| rc=0") and _valid(rest[: rest.rfind("}") + 1]):
                ok += 1
        if not ok:
            raise RuntimeError(f"ansible exited {r.returncode}: {r.stdout[-1500:]}"
                               f"{r.stderr[-1500:]}")
        return ok

    def _fabric_spec(self) -> dict[str, Any]:
        return {"hosts": [{"address": h.address} for h in self.state.hosts],
                "key": str(self.paths.client_key), "known_hosts": str(self.paths.known_hosts),
                "command": self.command}

    def fabric_cli(self) -> int:
        r = subprocess.run([sys.executable, "-c", FABRIC_SCRIPT],
                           input=json.dumps(self._fabric_spec()), capture_output=True, text=True,
                           check=False)
        if r.returncode != 0:
            raise RuntimeError(f"fabric script exited {r.returncode}: {r.stderr[-2000:]}")
        out = json.loads(r.stdout)
        return sum(1 for v in out.values() if v.get("rc") == 0 and _valid(v["stdout"]))

    def fabric_inproc(self) -> int:
        import paramiko
        from fabric import Config, ThreadingGroup
        from fabric.exceptions import GroupException

        spec = self._fabric_spec()
        g = ThreadingGroup(*[h["address"] for h in spec["hosts"]], user="root",
                           config=Config(overrides={"load_ssh_configs": False}),
                           connect_kwargs={"key_filename": spec["key"], "look_for_keys": False,
                                           "allow_agent": False, "timeout": 10})
        for c in g:
            c.client.load_host_keys(spec["known_hosts"])
            c.client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            res = g.run(self.command, hide=True, warn=True, in_stream=False)
        except GroupException as e:
            res = e.result
        g.close()
        return sum(1 for r in res.values()
                   if not isinstance(r, Exception) and r.exited == 0 and _valid(r.stdout))

    def cpu_ms(self, runs: int) -> tuple[float, float]:
        """Median CPU ms and wall ms of the probe on one host (measured there)."""
        import paramiko

        h = self.state.hosts[0]
        c = paramiko.SSHClient()
        c.load_host_keys(str(self.paths.known_hosts))
        c.set_missing_host_key_policy(paramiko.RejectPolicy())
        c.connect(h.address, port=h.port, username="root", key_filename=str(self.paths.client_key),
                  allow_agent=False, look_for_keys=False, timeout=10)
        cmd = f"python3 -c {shlex.quote(CPU_WRAPPER)} {self.command}"
        cpu, wall = [], []
        try:
            for _ in range(runs):
                _, out, _ = c.exec_command(cmd, timeout=60)
                rc, u, w = out.read().decode().split()
                if rc != "0":
                    raise RuntimeError(f"the probe exited {rc} on {h.name}")
                cpu.append(float(u) * 1000)
                wall.append(float(w) * 1000)
        finally:
            c.close()
        return statistics.median(cpu), statistics.median(wall)


CHILD_CPU: dict[str, list[float]] = {}
"""Controller CPU seconds (user + system of the child processes) of each timed CLI run."""


def timed(fn: Callable[[], int], expect: int, label: str) -> float:
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    ok = fn()
    dt = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CHILD_CPU.setdefault(label, []).append(after.ru_utime - before.ru_utime
                                           + after.ru_stime - before.ru_stime)
    if ok != expect:
        raise RuntimeError(f"{label}: {ok} of {expect} hosts gave valid probe facts")
    return dt


def worker_main(kind: str, run_dir: str, work: str) -> int:
    paths = LabPaths(cache=LabPaths.from_env().cache, run=Path(run_dir))
    state = lab.load_state(paths)
    b = Bench(paths, state, Path(work), Path("ansible"), 20)
    fn = b.fleet_inproc if kind == "fleet" else b.fabric_inproc
    fn()  # warm-up
    t = time.monotonic()
    ok = fn()
    print(ok, time.monotonic() - t)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=20)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--forks", type=int, default=20)
    ap.add_argument("--cpu-runs", type=int, default=7)
    ap.add_argument("--keep-lab", action="store_true",
                    help="Leave the lab up afterwards (`fleet lab down` with FLEET_LAB_DIR).")
    ap.add_argument("--run-dir", default="/run/fleet-lab-bench")
    ap.add_argument("--worker", choices=["fleet", "fabric"], help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker_main(a.worker, a.run_dir, a.work)
    if os.geteuid() != 0:
        print("needs root (the lab)", file=sys.stderr)
        return 2
    paths = LabPaths(cache=LabPaths.from_env().cache, run=Path(a.run_dir))
    ensure_bytecode(ROOT / "fleet")
    ansible = ensure_ansible(paths.cache)
    version = subprocess.run([str(ansible), "--version"], capture_output=True, text=True,
                             check=False).stdout.splitlines()[0]
    lab.down(paths)
    t = time.monotonic()
    state = lab.up(paths, lab.UpConfig(hosts=a.hosts, matrix=MATRIX, model_server=False))
    print(f"lab up: {a.hosts} hosts in {time.monotonic() - t:.1f} s; {version}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="fleet-probe-speed-"))
    try:
        b = Bench(paths, state, work, ansible, a.forks)
        print(f"probe command: {len(b.command)} bytes; warm-up run of each contender", flush=True)
        contenders: dict[str, Callable[[], float]] = {
            "fleet probe (CLI)": lambda: timed(b.fleet_cli, a.hosts, "fleet probe"),
            "ansible -m shell (CLI)": lambda: timed(b.ansible_cli, a.hosts, "ansible"),
            "fabric ThreadingGroup (process)": lambda: timed(b.fabric_cli, a.hosts, "fabric"),
            "fleet probe_inventory (in-process)": lambda: b.worker("fleet"),
            "fabric ThreadingGroup (in-process)": lambda: b.worker("fabric"),
        }
        for fn in contenders.values():  # warm-up: page cache, history schema, ansible's caches
            fn()
        times: dict[str, list[float]] = {k: [] for k in contenders}
        names = list(contenders)
        for i in range(a.runs):
            for label in names[i % len(names):] + names[:i % len(names)]:
                times[label].append(contenders[label]())
            print(f"run {i + 1}/{a.runs}: " + ", ".join(
                f"{k.split(' (')[0].split()[0]}{'*' if 'in-process' in k else ''} "
                f"{v[-1]:.2f}" for k, v in times.items()), flush=True)
        cpu, wall = b.cpu_ms(a.cpu_runs)
    finally:
        if not a.keep_lab:
            left = lab.down(paths)
            if left:
                print(f"lab teardown left: {left}", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\n{a.hosts} hosts, median of {a.runs} runs (s), min..max, controller CPU (s):")
    for k, v in times.items():
        cpu_s = CHILD_CPU.get({"fleet probe (CLI)": "fleet probe", "ansible -m shell (CLI)":
                               "ansible", "fabric ThreadingGroup (process)": "fabric"}.get(k, ""))
        used = f"   cpu {statistics.median(cpu_s[1:] or cpu_s):.3f}" if cpu_s else ""
        print(f"  {k:38s} {med[k]:6.3f}   {min(v):.3f}..{max(v):.3f}{used}")
    fleet, ans, fab = (med["fleet probe (CLI)"], med["ansible -m shell (CLI)"],
                       med["fabric ThreadingGroup (process)"])
    fleet_ip, fab_ip = (med["fleet probe_inventory (in-process)"],
                        med["fabric ThreadingGroup (in-process)"])
    ok1 = ans / fleet >= GOAL_VS_ANSIBLE
    ok2 = fleet / fab <= GOAL_VS_FABRIC
    ok3 = fleet_ip / fab_ip <= GOAL_VS_FABRIC
    ok4 = cpu < GOAL_CPU_MS
    print("\nratios (goal):")
    print(f"  ansible / fleet probe (CLI)           {ans / fleet:5.2f}x   (>= {GOAL_VS_ANSIBLE}x) "
          f"{'ok' if ok1 else 'MISSED'}")
    print(f"  fleet probe / fabric (fresh process)  {fleet / fab:5.2f}x   (<= {GOAL_VS_FABRIC}x) "
          f"{'ok' if ok2 else 'MISSED'}")
    print(f"  fleet / fabric (both in-process)      {fleet_ip / fab_ip:5.2f}x   "
          f"(<= {GOAL_VS_FABRIC}x) {'ok' if ok3 else 'MISSED'}")
    print(f"probe on one host ({state.hosts[0].name}, median of {a.cpu_runs}): "
          f"{cpu:.0f} ms CPU (goal < {GOAL_CPU_MS:.0f}) {'ok' if ok4 else 'MISSED'}, "
          f"{wall:.0f} ms wall")
    return 0 if ok1 and ok2 and ok3 and ok4 else 1


if __name__ == "__main__":
    sys.exit(main())
