"""Framework requirements (ONNX Runtime, TensorRT, PyTorch), read from `fleet/data/frameworks/`.

Like the NVIDIA tables (`fleet.domain.nvidia_data`), these are published facts shipped as data,
each row with its source, and facts no stored page states marked `unverified` with a note. The
matrix rule `fleet.domain.matrix.frameworks` judges a release against them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from fleet.domain.nvidia_data import Source, read_sourced_table


@dataclass(frozen=True)
class OrtCudaBuild:
    """One ONNX Runtime GPU build: the CUDA major it is built for and the cuDNN major it needs."""

    version: str  # "1.20" matches every 1.20.x, "1.18.1" only 1.18.1
    cuda: int
    cudnn: int
    source: str
    unverified: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class OrtTensorrt:
    """The TensorRT an ONNX Runtime release's TensorRT EP is built with, and its CUDA ranges."""

    version: str  # ONNX Runtime major.minor
    tensorrt: str  # TensorRT major.minor
    cuda: tuple[str, ...]
    source: str
    unverified: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class TensorrtRow:
    """The CUDA majors a TensorRT release (major.minor) ships builds for."""

    version: str
    cuda: tuple[int, ...]
    source: str
    unverified: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class TorchRow:
    """The CUDA builds (cu118, cu126, ...) PyTorch publishes for a release."""

    version: str
    cuda: tuple[str, ...]
    source: str
    unverified: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class FrameworkData:
    ort_cuda: tuple[OrtCudaBuild, ...]
    ort_tensorrt: tuple[OrtTensorrt, ...]
    tensorrt: tuple[TensorrtRow, ...]
    torch: tuple[TorchRow, ...]
    sources: dict[str, Source]

    def ort_builds(self, version: str) -> list[OrtCudaBuild]:
        """Every CUDA build of an ONNX Runtime version ("1.20.1" matches rows 1.20 and 1.20.1)."""
        return [row for row in self.ort_cuda if matches(row.version, version)]

    def ort_tensorrt_row(self, version: str) -> OrtTensorrt | None:
        return next((r for r in self.ort_tensorrt if matches(r.version, version)), None)

    def tensorrt_row(self, version: str) -> TensorrtRow | None:
        return next((r for r in self.tensorrt if matches(r.version, version)), None)

    def torch_row(self, version: str) -> TorchRow | None:
        return next((r for r in self.torch if matches(r.version, version)), None)

    def cite(self, key: str) -> str:
        return self.sources[key].cite()


def matches(row_version: str, version: str) -> bool:
    """Whether a table row ("1.20", or "1.18.1") covers a concrete version ("1.20.1")."""
    row = row_version.split(".")
    return version.split(".")[: len(row)] == row


def major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def torch_cuda(variant: str) -> str:
    """The CUDA version of a PyTorch build tag: "cu126" -> "12.6", "cu130" -> "13.0"."""
    digits = variant.removeprefix("cu")
    return f"{digits[:2]}.{digits[2:]}"


_FILES = ("onnxruntime.yaml", "tensorrt.yaml", "torch.yaml")


def read_table(name: str) -> dict[str, Any]:
    """A shipped table, checked to have a `sources` block and a known source on every row."""
    return read_sourced_table("fleet.data.frameworks", name)


def _row(row: dict[str, Any], *tuples: str) -> dict[str, Any]:
    return {**row, **{key: tuple(row.get(key, ())) for key in (*tuples, "unverified")}}


@lru_cache(maxsize=1)
def load() -> FrameworkData:
    """The shipped tables, parsed once per process."""
    ort, trt, torch = (read_table(name) for name in _FILES)
    sources: dict[str, Source] = {}
    for doc in (ort, trt, torch):
        for key, spec in doc["sources"].items():
            sources[key] = Source(key, spec.get("url"), spec["edition"], spec.get("table", ""),
                                  spec.get("cited_as", ""))
    return FrameworkData(
        ort_cuda=tuple(OrtCudaBuild(**_row(r)) for r in ort["cuda_execution_provider"]),
        ort_tensorrt=tuple(OrtTensorrt(**_row(r, "cuda"))
                           for r in ort["tensorrt_execution_provider"]),
        tensorrt=tuple(TensorrtRow(**_row(r, "cuda")) for r in trt["support_matrix"]),
        torch=tuple(TorchRow(**_row(r, "cuda")) for r in torch["cuda_builds"]),
        sources=sources,
    )
