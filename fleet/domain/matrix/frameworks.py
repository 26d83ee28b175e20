"""The `frameworks:` section of a release: the ML framework versions its services run with
(ONNX Runtime, PyTorch with its CUDA build), validated by shape here and checked against the
published tables by `fleet.domain.matrix.framework_check`."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator

from fleet.domain.matrix.base import Model

FrameworkName = Literal["onnxruntime", "torch", "tensorrt"]

ORT_VERSION_RE = re.compile(r"^[0-9]{1,3}\.[0-9]{1,3}(?:\.[0-9]{1,3})?$")
TORCH_VERSION_RE = re.compile(r"^[0-9]{1,3}\.[0-9]{1,3}(?:\.[0-9]{1,3})?\+cu[0-9]{3,4}$")


def _ort(value: str) -> str:
    if not ORT_VERSION_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a valid onnxruntime version (expected e.g. \"1.20.1\")")
    return value


def _torch(value: str) -> str:
    if not TORCH_VERSION_RE.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a torch version with its CUDA build (expected e.g. "
            "\"2.6.0+cu126\": the build decides which CUDA runtime the wheel bundles)"
        )
    return value


class Frameworks(Model):
    """The ML frameworks a release's services run with; named here, checked by `matrix check`."""

    onnxruntime: Annotated[str, AfterValidator(_ort)] | None = None
    torch: Annotated[str, AfterValidator(_torch)] | None = None
    unverified: list[FrameworkName] = []
