"""Framework compatibility: a release's ONNX Runtime, PyTorch, TensorRT and cuDNN against each
other, the release's CUDA toolkit and its driver, by the published tables in
`fleet/data/frameworks/` (ONNX Runtime's CUDA and TensorRT execution provider tables, TensorRT's
support matrix, PyTorch's CUDA builds).

Why: version drift between these keeps a service "working" on the CPU or without its TensorRT
engines, and nothing fails loudly. The check is opt-in per release (a `frameworks:` section):
a release without one pins its cuDNN and TensorRT packages as before, unchecked.

Fail closed: a framework version the tables do not know is an error unless the release lists
the framework in `frameworks.unverified`, which turns it into a warning. A fact the tables hold
but no stored page states (`unverified` in the data) never fails a release: the check warns
and names the fact instead, whether the release agrees with it or not.
"""

from __future__ import annotations

from datetime import date

from fleet.domain import framework_data, nvidia_data
from fleet.domain.framework_data import FrameworkData, major_minor, torch_cuda
from fleet.domain.matrix.frameworks import FrameworkName, Frameworks
from fleet.domain.matrix.models import Matrix, Release
from fleet.domain.versions import cuda_major_minor
from fleet.errors import Problem


class _Out:
    """Collects problems; a verdict resting on an unverified fact is a warning, never an error."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def error(self, field: str, message: str, unverified: bool = False) -> None:
        severity = "warning" if unverified else "error"
        if unverified:
            message += " (an unverified fact: not failed on it)"
        self.problems.append(Problem(None, None, field, message, severity))

    def warning(self, field: str, message: str) -> None:
        self.problems.append(Problem(None, None, field, message, "warning"))


def framework_compatibility(matrix: Matrix, today: date | None) -> list[Problem]:
    """Each release with a `frameworks:` section, against the shipped framework tables."""
    data = framework_data.load()
    nv = nvidia_data.load()
    out = _Out()
    for i, rel in enumerate(matrix.releases):
        fw = rel.frameworks
        if fw is None:
            continue
        prefix = f"releases[{i}]"
        if fw.onnxruntime is not None:
            _onnxruntime(out, data, rel, fw, prefix)
        if rel.companions.tensorrt is not None:
            _tensorrt(out, data, rel, fw, prefix)
        if fw.torch is not None:
            _torch_build(out, data, nv, rel, fw, prefix)
    return out.problems


def _unknown(out: _Out, fw: Frameworks, field: str, name: FrameworkName, version: str,
             table: str, known: list[str]) -> None:
    shown = ", ".join(known)
    if name in fw.unverified:
        out.warning(field, f"{name} {version} is not in {table} shipped with fleet (known: "
                           f"{shown}); not checked (frameworks.unverified names {name})")
    else:
        out.error(field, f"{name} {version} is not in {table} shipped with fleet (known: "
                         f"{shown}): add its row with its source (docs/nvidia-data.md) or list "
                         f"'{name}' in frameworks.unverified")


def _known(versions: list[str]) -> list[str]:
    return sorted(set(versions), key=lambda v: tuple(int(p) for p in v.split(".")),
                  reverse=True)


def _onnxruntime(out: _Out, data: FrameworkData, rel: Release, fw: Frameworks,
                 prefix: str) -> None:
    assert fw.onnxruntime is not None
    version = fw.onnxruntime
    field = f"{prefix}.frameworks.onnxruntime"
    builds = data.ort_builds(version)
    if not builds:
        _unknown(out, fw, field, "onnxruntime", version,
                 "ONNX Runtime's CUDA execution provider table",
                 _known([major_minor(b.version) for b in data.ort_cuda]))
        return
    cuda_major = cuda_major_minor(rel.cuda)[0]
    cite = "; ".join(dict.fromkeys(data.cite(b.source) for b in builds))
    build = next((b for b in builds if b.cuda == cuda_major), None)
    if build is None:
        majors = ", ".join(f"{m}.x" for m in sorted({b.cuda for b in builds}, reverse=True))
        out.error(field, f"onnxruntime {version} is built for CUDA {majors} only; the release's "
                         f"CUDA {rel.cuda} is CUDA {cuda_major}.x ({cite})",
                  unverified=all("cuda" in b.unverified for b in builds))
        return
    if "cuda" in build.unverified:
        out.warning(field, f"that onnxruntime {version} has a CUDA {cuda_major}.x build is "
                           f"unverified: {build.note} ({data.cite(build.source)})")
    cudnn = rel.companions.cudnn
    if cudnn is None:
        return
    cudnn_major = int(cudnn.split(".", 1)[0])
    doubtful = "cudnn" in build.unverified
    if cudnn_major != build.cudnn:
        out.error(field, f"onnxruntime {version} for CUDA {cuda_major}.x needs cuDNN "
                         f"{build.cudnn}.x; companions.cudnn is {cudnn} (ONNX Runtime built with "
                         f"one cuDNN major does not run with another; {data.cite(build.source)})",
                  unverified=doubtful)
    elif doubtful:
        out.warning(field, f"that onnxruntime {version} for CUDA {cuda_major}.x needs cuDNN "
                           f"{build.cudnn}.x is unverified: {build.note}")


def _tensorrt(out: _Out, data: FrameworkData, rel: Release, fw: Frameworks,
              prefix: str) -> None:
    trt = rel.companions.tensorrt
    assert trt is not None
    field = f"{prefix}.companions.tensorrt"
    trt_mm = major_minor(trt)
    cuda_major = cuda_major_minor(rel.cuda)[0]
    row = data.tensorrt_row(trt)  # a patch row ("10.13.0") wins over its major.minor row
    if row is None:
        _unknown(out, fw, field, "tensorrt", trt, "TensorRT's support matrix",
                 _known([r.version for r in data.tensorrt]))
    else:
        doubtful = "cuda" in row.unverified
        if cuda_major not in row.cuda:
            majors = ", ".join(f"{m}.x" for m in sorted(row.cuda, reverse=True))
            out.error(field, f"TensorRT {row.version} ships builds for CUDA {majors}; the "
                             f"release's CUDA {rel.cuda} is CUDA {cuda_major}.x "
                             f"({data.cite(row.source)})",
                      unverified=doubtful)
        elif doubtful:
            out.warning(field, f"that TensorRT {row.version} has a CUDA {cuda_major}.x build is "
                               f"unverified: {row.note} ({data.cite(row.source)})")
    if fw.onnxruntime is None or not data.ort_builds(fw.onnxruntime):
        return  # no ONNX Runtime, or an unknown one (reported on its own field)
    ort = fw.onnxruntime
    ep = data.ort_tensorrt_row(ort)
    if ep is None:
        _unknown(out, fw, field, "onnxruntime", ort,
                 "ONNX Runtime's TensorRT execution provider table",
                 _known([r.version for r in data.ort_tensorrt]))
        return
    cite = data.cite(ep.source)
    if trt_mm.split(".")[0] != ep.tensorrt.split(".")[0]:
        out.error(field, f"onnxruntime {ort}'s TensorRT execution provider is built with TensorRT "
                         f"{ep.tensorrt}; TensorRT {trt} is another major version, which it "
                         f"cannot load ({cite})")
    elif trt_mm != ep.tensorrt:
        out.warning(field, f"onnxruntime {ort}'s TensorRT execution provider is built with "
                           f"TensorRT {ep.tensorrt}; TensorRT {trt} is untested by ONNX Runtime "
                           f"({cite})")


def _torch_build(out: _Out, data: FrameworkData, nv: nvidia_data.NvidiaData, rel: Release,
                 fw: Frameworks, prefix: str) -> None:
    assert fw.torch is not None
    field = f"{prefix}.frameworks.torch"
    version, variant = fw.torch.split("+", 1)
    row = data.torch_row(version)
    if row is None:
        _unknown(out, fw, field, "torch", version, "PyTorch's table of CUDA builds",
                 _known([r.version for r in data.torch]))
        return
    doubtful = "cuda" in row.unverified
    if variant not in row.cuda:
        out.error(field, f"PyTorch publishes torch {version} for {', '.join(row.cuda)}, not "
                         f"{variant} ({data.cite(row.source)})", unverified=doubtful)
        return
    if doubtful:
        out.warning(field, f"that PyTorch publishes torch {version}+{variant} is unverified: "
                           f"{row.note}")
    cuda = torch_cuda(variant)
    driver = rel.driver.version
    verdict, required = nvidia_data.cuda_compatibility(nv, cuda, driver)
    if verdict == "too_old":
        out.error(field, f"torch {fw.torch} bundles the CUDA {cuda} runtime, which needs driver "
                         f">= {required}; the release's driver {driver} is too old")
    elif verdict == "mvc":
        out.warning(field, f"torch {fw.torch} bundles the CUDA {cuda} runtime, which needs driver "
                           f">= {required} for full support; driver {driver} runs it only "
                           "through minor-version compatibility")
    elif verdict == "unknown":
        out.warning(field, f"CUDA {cuda} (torch {fw.torch}) is not in NVIDIA's table shipped "
                           "with fleet; the driver it needs is not checked")
