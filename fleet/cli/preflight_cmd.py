"""`fleet preflight`: the container start-up check, run from the fleet CLI.

The checks live in `fleet/preflight.py`, one self-contained file that also runs on its own inside
an image (`fleet preflight --emit > preflight.py`); this module only maps its options and its
outcome onto fleet's contract (docs/exit-codes.md, docs/preflight.md). The runtimes it drives
(onnxruntime, numpy, torch) are imported by the checks, never here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from fleet.cli.output import console, emit_json, stdout
from fleet.errors import BadInput, CouldNotComplete, Problem, ProblemsFound


def _csv(values: list[str]) -> list[str]:
    return [x.strip() for v in values for x in v.split(",") if x.strip()]


def preflight(
    onnx: Annotated[Path | None, typer.Option(
        "--onnx", metavar="MODEL", help="ONNX model: open a session with --providers.")] = None,
    providers: Annotated[list[str] | None, typer.Option(
        "--providers", metavar="P1,P2", help="The service's execution provider order "
        "(CUDAExecutionProvider,CPUExecutionProvider).")] = None,
    allow_cpu: Annotated[bool, typer.Option(
        "--allow-cpu", help="CPU placement or fallback is intended: report, do not fail.")
    ] = False,
    canary: Annotated[Path | None, typer.Option(
        "--canary", metavar="DIR", help="Folder with inputs.npz and outputs.npz, keyed by the "
        "model's input and output names: warm up and compare.")] = None,
    rtol: Annotated[float, typer.Option("--rtol", help="Relative tolerance of the canary.")
                    ] = 1e-3,
    atol: Annotated[float, typer.Option("--atol", help="Absolute tolerance of the canary.")
                    ] = 1e-5,
    max_latency_ms: Annotated[float | None, typer.Option(
        "--max-latency-ms", help="Limit on the median warm latency of the canary.")] = None,
    max_load_ms: Annotated[float | None, typer.Option(
        "--max-load-ms", help="Limit on loading the model and creating its session (the cold "
        "start).")] = None,
    prom_file: Annotated[Path | None, typer.Option(
        "--prom-file", help="Also write the outcome (passed, model load time, network or local "
        "filesystem) as a Prometheus textfile for node_exporter.")] = None,
    runs: Annotated[int, typer.Option("--runs", help="Warm runs after the first.")] = 20,
    sample_seconds: Annotated[float, typer.Option(
        "--sample-seconds", help="Keep answering this long while NVML samples utilization.")
    ] = 1.0,
    min_gpu_util: Annotated[float | None, typer.Option(
        "--min-gpu-util", help="GPU utilization (%) the warm-up must reach; default above 0 "
        "when a GPU provider answers.")] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", help="GPUs this container must see.")
                    ] = None,
    expect_driver: Annotated[str | None, typer.Option(
        "--expect-driver", metavar="VERSION", help="Driver seen inside (580 or 580.95.05).")
    ] = None,
    expect_cuda: Annotated[str | None, typer.Option(
        "--expect-cuda", metavar="VERSION", help="CUDA runtime (libcudart) version.")] = None,
    expect_cudnn: Annotated[str | None, typer.Option(
        "--expect-cudnn", metavar="VERSION", help="cuDNN (libcudnn) version.")] = None,
    expect_tensorrt: Annotated[str | None, typer.Option(
        "--expect-tensorrt", metavar="VERSION", help="TensorRT (libnvinfer) version.")] = None,
    require_lib: Annotated[list[str] | None, typer.Option(
        "--require-lib", metavar="LIB", help="cuda-runtime, cudnn or tensorrt must load "
        "(repeatable).")] = None,
    skip: Annotated[list[str] | None, typer.Option(
        "--skip", metavar="CHECK", help="Skip gpu, driver, libraries, onnxruntime or torch.")
    ] = None,
    root: Annotated[Path, typer.Option(
        "--root", help="Read /dev and /proc under this folder.")] = Path("/"),
    emit: Annotated[bool, typer.Option(
        "--emit", help="Print the standalone checker (preflight.py) and exit.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")
                        ] = False,
) -> None:
    """Prove at a service's start that its GPUs do the work: GPUs and driver visible in the
    container, CUDA/cuDNN/TensorRT versions, the ONNX Runtime providers obtained and the node
    placement, a canary answer within tolerance and latency with the GPU busy, torch on each
    device (see docs/preflight.md).

    Exit 0 pass, 1 a check failed, 2 bad input (a flag, a missing or corrupt model, a canary
    that does not fit the model), 3 could not check (a runtime asked for is missing, nothing to
    check).
    """
    from fleet import preflight as pf

    if emit:
        sys.stdout.write(Path(pf.__file__).read_text())
        return
    opts = pf.Options(
        onnx=str(onnx) if onnx else None, providers=_csv(providers or []), allow_cpu=allow_cpu,
        canary=str(canary) if canary else None, rtol=rtol, atol=atol,
        max_latency_ms=max_latency_ms, runs=runs, sample_seconds=sample_seconds,
        min_gpu_util=min_gpu_util, gpus=gpus, expect_driver=expect_driver,
        expect_cuda=expect_cuda, expect_cudnn=expect_cudnn, expect_tensorrt=expect_tensorrt,
        require_libs=_csv(require_lib or []), skip=_csv(skip or []), root=str(root),
        max_load_ms=max_load_ms, prom_file=str(prom_file) if prom_file else None)
    try:
        report = pf.run(opts)
    except pf.InputError as exc:
        raise BadInput([Problem(p["file"], None, p["field"], p["message"])
                        for p in exc.problems]) from None
    if json_out:
        emit_json(report)
    # the standalone file's own text (docs/preflight.md: the same code, the same messages)
    stdout.print(pf.render(report), markup=False, highlight=False, soft_wrap=True)
    if report["status"] == pf.FAIL:
        raise ProblemsFound(pf.summary_line(report))
    if report["status"] != pf.PASS:
        raise CouldNotComplete(pf.summary_line(report))
    console.print(pf.summary_line(report), markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.command("preflight")(preflight)
