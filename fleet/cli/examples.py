"""Help that teaches: an "Examples" section in every command's `--help`, and flags shown without
a value placeholder.

The examples live here, one table for the whole app, so that they stay consistent (same files,
same pool names, `-l/--limit` for every selection) and one test
(tests/unit/cli/test_help.py) can check each of them against the command's own options: an
example naming a removed option fails that test. Each example fits one line of an 80-column
terminal, so `inv.py` and `matrix.yaml` stand for your inventory and matrix (the repository's own
are `inventories/lab.py` and `matrices/example.yaml`).
"""

from __future__ import annotations

import inspect
from typing import Any

INV = "inv.py"
MATRIX = "matrix.yaml"

EXAMPLES: dict[str, tuple[str, ...]] = {
    "": (
        "fleet demo",
        "fleet --db /var/lib/fleet/fleet.db check -l h100",
        f"fleet rollout start -m {MATRIX} -i {INV} -r r595-cuda13.2",
    ),
    # ------------------------------------------------------------------ top-level commands
    "probe": (
        f"fleet probe -i {INV}",
        f"fleet probe -i {INV} -l h100-canary -l 'gpu-0*' -m {MATRIX} --json",
        f"fleet probe -i {INV} --via slurm --partition gpu",
    ),
    "check": (
        "fleet check",
        "fleet check -l h100 -l 'gpu-1*' --all",
        "fleet --db /var/lib/fleet/fleet.db check --json",
    ),
    "apply": (
        f"fleet apply -m {MATRIX} -i {INV} -r r595-cuda13.2 -l h100-canary --dry",
        f"fleet apply -m {MATRIX} -i {INV} -r r595-cuda13.2 -l h100 --serial 2",
    ),
    "rollback": (
        f"fleet rollback -m {MATRIX} -i {INV} -l h100 --reason 'Xid 79 storm' --yes",
        f"fleet rollback -m {MATRIX} -i {INV} -l 'gpu-0[1-4]' --reason RMA --dry",
    ),
    "exec": (
        f"fleet exec -i {INV} -l h100-canary -- nvidia-smi -L",
        f"fleet exec -i {INV} -l 'gpu-0*' --timeout 20 -- 'dmesg | grep -i xid'",
    ),
    "demo": (
        "fleet demo",
        "fleet demo --keep ~/fleet-demo --json",
        "sudo .venv/bin/fleet demo --lab",
    ),
    "node-check": (
        f"fleet node-check -m {MATRIX}",
        f"fleet node-check -m {MATRIX} --node gpu-01 --no-drain --json",
    ),
    "preflight": (
        "fleet preflight --gpus 1 --expect-driver 580",
        "fleet preflight --onnx m.onnx --providers CUDAExecutionProvider --json",
        "fleet preflight --onnx m.onnx --providers CUDAExecutionProvider --canary c/",
        "fleet preflight --emit",
    ),
    "diagnose": ("fleet diagnose bundle-gpu-07/", f"fleet diagnose -i {INV} gpu-07 --seconds 30"),
    "bundle": (f"fleet bundle collect -i {INV} gpu-07 -o bundle-gpu-07/",),
    "bundle collect": (f"fleet bundle collect -i {INV} gpu-07 -o bundle-gpu-07/",
                       f"fleet bundle collect -i {INV} gpu-07 -o b/ --seconds 60 --json"),
    # ------------------------------------------------------------------ matrix
    "matrix": (f"fleet matrix check {MATRIX}",),
    "matrix check": (f"fleet matrix check {MATRIX}", f"fleet matrix check {MATRIX} --json"),
    "matrix show": (f"fleet matrix show {MATRIX}",),
    "matrix diff": ("fleet matrix diff matrices/lab.yaml matrices/example.yaml",),
    # ------------------------------------------------------------------ history
    "history": ("fleet history events -n 20",),
    "history migrate": ("fleet --db postgresql+psycopg://fleet@db/fleet history migrate",
                        "fleet --db /var/lib/fleet/fleet.db history migrate --json"),
    "history events": ("fleet history events", "fleet history events --kind rollback -n 5 --json"),
    "history hosts": ("fleet history hosts", "fleet history hosts -l h100 --json"),
    "history prune": ("fleet history prune --dry",
                      "fleet history prune -m matrices/example.yaml --json",
                      "fleet history prune --raw-weeks 8 --rollup-weeks forever"),
    # ------------------------------------------------------------------ facts, logs
    "facts": ("fleet facts parse nvidia-smi-q.xml",),
    "facts parse": ("fleet facts parse nvidia-smi-q.xml", "fleet facts parse *.csv --json"),
    "facts import": ("fleet facts import gpu-07.xml --host gpu-07 --pool h100",),
    "logs": ("fleet logs parse /var/log/kern.log",),
    "logs parse": ("fleet logs parse /var/log/kern.log", "fleet logs parse dmesg.txt --json"),
    # ------------------------------------------------------------------ lab
    "lab": ("sudo .venv/bin/fleet lab up --hosts 8", "fleet lab status"),
    "lab up": (f"fleet lab up --hosts 8 --matrix {MATRIX}",
               "fleet lab up --hosts 4 --slurm --perf r580-cuda13.0=0.75",
               "fleet lab up --hosts 4 --kubernetes"),
    "lab down": ("fleet lab down",),
    "lab status": ("fleet lab status", "fleet lab status --json"),
    "lab inject": ("fleet lab inject h1 ecc-corrected", "fleet lab inject h3 xid code=79"),
    "lab faults": ("fleet lab faults",),
    "lab reset": ("fleet lab reset h1",),
    "lab reboot": ("fleet lab reboot h2",),
    "lab pod": ("fleet lab pod h2 --name db-1 --labels app=db",),
    # ------------------------------------------------------------------ bench
    "bench": (f"fleet bench run -i {INV} -l h100-canary",),
    "bench run": (f"fleet bench run -i {INV} -l h100-canary",
                  f"fleet bench run -i {INV} -l h100 --suite replay --trace t.jsonl --slo-ms 200"),
    "bench compare": (
        "fleet bench compare --canary canary.json --baseline baseline.json",
        "fleet bench compare --canary c.json --baseline b.json --metric p99_ms:lower:5%",
    ),
    "bench trace-from-log": (
        "fleet bench trace-from-log access.log -o trace.jsonl",
        "fleet bench trace-from-log app.jsonl --format jsonl --only-ok -o t.jsonl",
    ),
    # ------------------------------------------------------------------ rollout
    "rollout": (f"fleet rollout plan -m {MATRIX} -i {INV}", "fleet rollout status 3"),
    "rollout plan": (f"fleet rollout plan -m {MATRIX} -i {INV}",
                     f"fleet rollout plan -m {MATRIX} --sim 64 -l h100 --json"),
    "rollout start": (f"fleet rollout start -m {MATRIX} -i {INV} --release r595-cuda13.2",
                      f"fleet rollout start -m {MATRIX} --sim 64 -l h100-canary --dry"),
    "rollout resume": ("fleet rollout resume 3", "fleet rollout resume 3 --force"),
    "rollout promote": ("fleet rollout promote 3 --reason 'p99 within noise, checked by hand'",),
    "rollout keep-waiting": ("fleet rollout keep-waiting 3 --reason 'job 77 ends at 14:00'",),
    "rollout abort": ("fleet rollout abort 3 --reason 'Xid 79 on a canary'",),
    "rollout status": ("fleet rollout status 3", "fleet rollout status 3 --hosts --json"),
    "rollout history": ("fleet rollout history", "fleet rollout history -n 5 --json"),
    # ------------------------------------------------------------------ hygiene, quarantine
    "hygiene": (f"fleet hygiene run -m {MATRIX} -i {INV} --report-dir reports/",),
    "hygiene run": (f"fleet hygiene run -m {MATRIX} -i {INV} --report-dir reports/",
                    f"fleet hygiene run -m {MATRIX} -i {INV} -l h100 --apply-quarantine",
                    f"fleet hygiene run -m {MATRIX} --sim 64 --no-benchmark --json"),
    "quarantine": ("fleet quarantine list",),
    "quarantine list": ("fleet quarantine list", "fleet quarantine list --all --json"),
    "quarantine release": ("fleet quarantine release gpu-07 --reason 'GPU replaced' "
                           "--scheduler slurm",),
    # --------------------------------------------------------------- fleet view, host keys
    "hosts": ("fleet hosts", "fleet hosts --quarantined -o wide",
              "fleet hosts -l h100 --release r580-cuda13.0 --json",
              f"fleet hosts trust -i {INV} gpu-01 --dry-run"),
    "hosts trust": (
        f"fleet hosts trust -i {INV} gpu-01 --fingerprint SHA256:abc...",
        f"fleet hosts trust -i {INV} h100-canary --dry-run --json",
        f"fleet hosts trust -i {INV} gpu-07 --replace",
    ),
}


def epilog(path: str, *, markup: bool) -> str | None:
    """The "Examples" section of command `path` ("" for `fleet` itself, "rollout start"),
    escaped when the help is read as Rich markup (`[bold]`, a `[0-9]` glob stay as written)."""
    lines = EXAMPLES.get(path)
    if not lines:
        return None
    # rich's escape only changes a `[` (markup) or a trailing backslash: without either, a line
    # is shown as written, and rich is not loaded for it (`fleet probe --json` never needs rich)
    if markup and any("[" in x or x.endswith("\\") for x in lines):
        from rich.markup import escape

        shown = [escape(x) for x in lines]
    else:
        shown = list(lines)
    if markup:  # rich keeps line breaks inside a paragraph
        return "Examples:\n" + "\n".join(f"  {x}" for x in shown)
    return "\b\nExamples:\n" + "\n".join(f"  {x}" for x in shown)  # \b: click must not rewrap


def add_examples(command: Any, path: str = "") -> None:
    """Set the examples epilog on `command` and every sub-command under it (click objects,
    as typer builds them)."""
    markup = getattr(command, "rich_markup_mode", None) == "rich"
    if command.epilog is None:
        command.epilog = epilog(path, markup=markup)
    if markup and command.help:
        command.help = reflow(command.help)
    for name, sub in (getattr(command, "commands", None) or {}).items():
        add_examples(sub, f"{path} {name}".strip())


def reflow(text: str) -> str:
    """A docstring's paragraphs as single lines: typer's rich help keeps every line break of a
    docstring, so lines wrapped at 100 columns in the source break raggedly in an 80-column
    terminal. Paragraphs with an indented or bulleted line keep their layout."""
    out = []
    for para in inspect.cleandoc(text).split("\n\n"):
        lines = para.split("\n")
        if any(line[:1].isspace() or line.lstrip()[:2] in ("- ", "* ") or line.startswith("\b")
               for line in lines):
            out.append(para)
        else:
            out.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(out)


def parse_command(argv: list[str], root: Any) -> tuple[str, ...]:
    """Parse `fleet ARGV...` as click would, without running anything (no callback, resilient
    parsing off): an unknown option, a missing required one or a bad value raises click's
    usage error. Returns the path of the command it would run (`("rollout", "start")`).
    `root` is the click command of the app (`typer.main.get_command(build_app())`): the caller
    builds it, so this module never imports the app that imports it."""
    from typer.core import TyperGroup

    cmd = root
    ctx = cmd.make_context("fleet", list(argv), resilient_parsing=False)
    path: list[str] = []
    while isinstance(cmd, TyperGroup):
        rest = [*ctx._protected_args, *ctx.args]
        if not rest:
            if getattr(cmd, "invoke_without_command", False) and path:
                return tuple(path)  # a group that is a command of its own (`fleet hosts`)
            raise ValueError(f"no command under {' '.join(['fleet', *path])}")
        name, sub, rest = cmd.resolve_command(ctx, rest)
        if name is None or sub is None:
            raise ValueError(f"no command {rest[:1]} under {' '.join(['fleet', *path])}")
        path.append(name)
        ctx = sub.make_context(name, rest, parent=ctx, resilient_parsing=False)
        cmd = sub
    return tuple(path)


def hide_flag_placeholders() -> None:
    """Show flags as `--json`, not `--json <bool>`: typer's rich help prints the type of every
    option, flags included, where click's plain help prints none for a flag; and a variadic
    argument as `COMMAND...`, not `COMMAND... <list[str]>`."""
    from typer.core import TyperArgument, TyperOption

    original = TyperOption.display_type_rich
    if getattr(original, "_fleet_flags", False):
        return

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        if self.is_flag or self.count:
            return None
        return original(self, ctx)

    display_type_rich._fleet_flags = True  # type: ignore[attr-defined]
    setattr(TyperOption, "display_type_rich", display_type_rich)  # noqa: B010

    original_arg = TyperArgument.display_type_rich

    def arg_display_type_rich(self: TyperArgument, ctx: Any) -> str | None:
        # `COMMAND...` already says "one or more"; `<list[str]>` beside it is typer's storage
        return None if self.nargs != 1 else original_arg(self, ctx)

    setattr(TyperArgument, "display_type_rich", arg_display_type_rich)  # noqa: B010
