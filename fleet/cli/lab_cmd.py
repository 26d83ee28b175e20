"""`fleet lab ...`: real sshd hosts in namespaces with fake NVIDIA packages (root only)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from fleet.cli import lab_kube_cmd
from fleet.cli.lazy import lazy_module
from fleet.cli.output import console, emit_json, stdout
from fleet.cli.table import Grid, OutputOpt, show, wants_json
from fleet.errors import BadInput
from fleet.lab import faults as F
from fleet.lab.paths import LabPaths

if TYPE_CHECKING:
    from fleet.lab import lab
else:  # the lab's machinery (hosts, repositories, slurm): imported by the command that runs
    lab = lazy_module("fleet.lab.lab")

JsonFlag = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]

app = typer.Typer(
    help="The lab: real sshd hosts (namespaces, overlayfs) with fake NVIDIA packages, a fake NVML "
    "and injectable faults, for rehearsals and integration tests. Root only.",
    no_args_is_help=True,
)


@app.command("up")
def up_cmd(
    hosts: Annotated[
        int, typer.Option("--hosts", "-n", min=1, max=200, help="Number of hosts.")
    ] = 8,
    matrix: Annotated[
        Path, typer.Option("--matrix", help="Matrix whose releases fill the apt repository.")
    ] = Path("matrices/example.yaml"),
    release: Annotated[
        str | None,
        typer.Option(
            "--release",
            help="Release installed at start (default: the matrix golden; 'none' for no driver).",
        ),
    ] = None,
    mode: Annotated[
        Literal["netns", "loopback"],
        typer.Option(
            "--mode", help="netns (own bridge fleetbr0, 10.77.0.0/24) or loopback (127.0.1.x)."
        ),
    ] = "netns",
    perf: Annotated[
        list[str] | None,
        typer.Option(
            "--perf", metavar="RELEASE=FACTOR",
            help="RELEASE=FACTOR[:NOISE] speed of a release (repeatable), e.g. r570=0.75.",
        ),
    ] = None,
    model_server: Annotated[
        bool,
        typer.Option(
            "--model-server/--no-model-server", help="Run the HTTP model server on every host."
        ),
    ] = True,
    slurm: Annotated[
        bool,
        typer.Option(
            "--slurm/--no-slurm",
            help="A real Slurm (netns only): slurmctld and munged here, a slurmd in every host.",
        ),
    ] = False,
    health_check_interval: Annotated[
        int,
        typer.Option(
            "--health-check-interval",
            min=1,
            help="Slurm HealthCheckInterval in seconds (runs `fleet node-check` in each host).",
        ),
    ] = 10,
    prometheus: Annotated[
        bool, typer.Option("--prometheus/--no-prometheus",
                           help="Run Prometheus (Debian's binary) scraping every host's model "
                                "server, on a loopback port of its own.")
    ] = False,
    kubernetes: Annotated[
        bool,
        typer.Option(
            "--kubernetes/--no-kubernetes",
            help="A real Kubernetes API server here (etcd, kube-apiserver 1.20, the disruption "
            "controller, a kubelet stand-in): one Node per host. Builds once (~10 min), cached.",
        ),
    ] = False,
    os_spec: Annotated[
        str,
        typer.Option(
            "--os",
            help="Host flavor: debian (apt), el9 (every host: dnf, rpm, Rocky Linux 9) or el9:N "
            "(the last N hosts el9, the rest debian).",
        ),
    ] = "debian",
    json_out: JsonFlag = False,
) -> None:
    """Build (cached) and start the lab; writes the state read by inventories/lab.py."""
    if mode not in ("netns", "loopback"):
        raise BadInput.single(f"expected netns or loopback, not {mode!r}", field="--mode")
    if slurm and mode != "netns":
        raise BadInput.single("--slurm needs --mode netns (one slurmd per host network)",
                              field="--slurm")
    if not matrix.is_file():
        raise BadInput.single("no such file", file=str(matrix), field="--matrix")
    from fleet.lab.perf import parse_perf  # the lab's package repository and the matrix model

    cfg = lab.UpConfig(
        hosts=hosts,
        matrix=matrix,
        release=release,
        mode=mode,
        perf=parse_perf(perf or []),
        model_server=model_server,
        prometheus=prometheus,
        slurm=slurm,
        health_check_interval=health_check_interval,
        el9=lab.parse_os(os_spec, hosts),
        kubernetes=kubernetes,
    )
    paths = LabPaths.from_env()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as bar:
        task = bar.add_task("lab up", total=7 if slurm else 6)

        def report(msg: str, done: int, total: int) -> None:
            bar.update(task, description=msg, completed=done, total=total)

        state = lab.up(paths, cfg, report)
    if json_out:
        emit_json({"up": True, "mode": state.mode, "release": state.release,
                   "hosts": [h.name for h in state.hosts], "run_dir": str(paths.run),
                   "os": {h.name: h.os for h in state.hosts},
                   "inventory": "inventories/lab.py", "slurm_conf": state.slurm_conf,
                   "prometheus_url": state.prometheus_url, "kubeconfig": state.kubeconfig})
        return
    stdout.print(
        f"[green]lab up[/green]: {len(state.hosts)} hosts ({state.mode}), release "
        f"{state.release or 'none'}; inventory: inventories/lab.py "
        f"(FLEET_LAB_DIR={paths.run})"
    )
    if state.prometheus_url:
        stdout.print(f"Prometheus: {state.prometheus_url} (inventory data prometheus_url)")
    if state.slurm_conf:
        parts = ",".join(dict.fromkeys([h.pool for h in state.hosts] + ["lab"]))
        stdout.print(
            f"Slurm: nodes {','.join(h.name for h in state.hosts)}, partitions {parts}; "
            "for sinfo, squeue, sbatch, srun and scontrol:"
        )
        stdout.print(f"export SLURM_CONF={state.slurm_conf}", markup=False, soft_wrap=True)
    if state.kubeconfig:
        lab_kube_cmd.say_kubeconfig(state.kubeconfig, state.kube_ready_s)


@app.command("down")
def down_cmd(json_out: JsonFlag = False) -> None:
    """Stop every host and remove mounts, namespaces, bridge and processes (safe twice)."""
    from fleet.lab.sysutil import require_root

    require_root("`fleet lab down`")
    left = lab.down(LabPaths.from_env())
    if left:
        from fleet.errors import CouldNotComplete

        raise CouldNotComplete("teardown left: " + ", ".join(left))
    if json_out:
        emit_json({"down": True, "left": []})
        return
    stdout.print("lab down: nothing left")


@app.command("status")
def status_cmd(json_: JsonFlag = False, output: OutputOpt = None) -> None:
    """Hosts, their boot, loaded and pending driver module, packages and injected faults."""
    from fleet.cli.output import esc

    st = lab.status(LabPaths.from_env())
    if wants_json(json_, output):
        emit_json(st)
        return
    cols = ["host", "address", "pool", "gpus", "ssh", "module", "pending", "faults"]
    t = Grid(cols + (["slurm"] if st["slurm_conf"] else []),
             title=f"lab ({st['mode']}, {'up' if st['up'] else 'DOWN'})")
    for h in st["hosts"]:
        t.add_row(*map(esc, (
            h["name"],
            h["address"],
            f"{h['pool']} ({h['wave']})" if h.get("wave") else h["pool"],
            f"{h['gpu_count']}x{h['gpu_model']}",
            "yes" if h["ssh"] else "no",
            h["module_loaded"] or "-",
            h["module_pending"] or "-",
            ",".join(h["faults"]) or "-",
            *([h["slurm_state"] or "?"] if st["slurm_conf"] else []),
        )))
    show(t, output)
    if st["slurm_conf"]:
        stdout.print(f"export SLURM_CONF={st['slurm_conf']}", soft_wrap=True)
    if st["kubeconfig"]:
        lab_kube_cmd.say_kubeconfig(st["kubeconfig"], None)


@app.command("inject")
def inject_cmd(
    host: Annotated[str, typer.Argument(help="Host name (h1) or address.")],
    faults: Annotated[
        list[str], typer.Argument(help="Faults: " + ", ".join(F.FAULTS) + ", or KEY=VALUE.")
    ],
    json_out: JsonFlag = False,
) -> None:
    """Inject faults into a host (NVML state, kernel log, sysfs, network, packages)."""
    done = lab.inject(LabPaths.from_env(), host, faults)
    if json_out:
        emit_json({"host": host, "injected": [f.name for f in done]})
        return
    stdout.print(f"{host}: injected " + ", ".join(f.name for f in done), markup=False)


@app.command("faults")
def faults_cmd(json_out: JsonFlag = False) -> None:
    """List the faults `inject` knows."""
    if json_out:
        emit_json({"faults": [{"name": name, "params": params, "help": text}
                              for name, (params, text) in F.FAULTS.items()]})
        return
    for name, (params, text) in F.FAULTS.items():
        p = ",".join(f"{k}={v}" for k, v in params.items())
        stdout.print(f"{name}{':' + p if p else ''}  {text}", soft_wrap=True, markup=False)


@app.command("reset")
def reset_cmd(host: Annotated[str, typer.Argument(help="Host name.")],
              json_out: JsonFlag = False) -> None:
    """Clear every injected fault on a host (GPU state, sysfs, flags, link); with Slurm, also
    resume the node if fleet's health check drained it."""
    lab.reset(LabPaths.from_env(), host)
    if json_out:
        emit_json({"host": host, "reset": True})
        return
    stdout.print(f"{host}: reset", markup=False)


@app.command("reboot")
def reboot_cmd(host: Annotated[str, typer.Argument(help="Host name.")],
               json_out: JsonFlag = False) -> None:
    """Power-cycle a host and wait until sshd answers again."""
    info = lab.reboot(LabPaths.from_env(), host)
    if json_out:
        emit_json({"host": host, "boot_id": info.get("boot_id"), "module": info.get("module")})
        return
    stdout.print(
        f"{host}: booted, boot id {info.get('boot_id')}, module {info.get('module') or 'none'}",
        markup=False)


app.command("pod")(lab_kube_cmd.pod_cmd)
