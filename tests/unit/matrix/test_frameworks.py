"""Framework compatibility in the matrix (issue 15.4): ONNX Runtime, PyTorch, TensorRT and cuDNN
against the shipped tables in fleet/data/frameworks/, each row with its source."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.cli.app import run
from fleet.domain import framework_data, nvidia_data
from fleet.errors import Problem

from .helpers import dump, errors, problems_of, release, single, warnings

TABLES = ("onnxruntime.yaml", "tensorrt.yaml", "torch.yaml")


def stack(driver: str, cuda: str, *, cudnn: str | None = None, tensorrt: str | None = None,
          **frameworks: Any) -> dict[str, Any]:
    """A one-release matrix with the given companions and frameworks."""
    rel = release("r", driver, cuda)
    companions = {k: v for k, v in (("cudnn", cudnn), ("tensorrt", tensorrt)) if v}
    if companions:
        rel["companions"] = companions
    rel["frameworks"] = frameworks
    return single(rel)


def framework_problems(data: dict[str, Any]) -> list[Problem]:
    """Problems on framework fields only (the NVIDIA rules have their own tests)."""
    return [p for p in problems_of(data)
            if p.field and (".frameworks" in p.field or ".companions.tensorrt" in p.field)]


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


# ------------------------------------------------------------------------------ the data
@pytest.mark.parametrize("name", TABLES)
def test_every_row_names_a_known_source(name: str) -> None:
    doc = framework_data.read_table(name)
    assert nvidia_data.rows_without_source(doc) == []
    for key, spec in doc["sources"].items():
        assert spec["edition"] and spec["cited_as"] and spec["table"], key
        assert spec["url"].startswith("https://"), key
    assert sum(len(v) for k, v in doc.items() if k != "sources") >= 6


@pytest.mark.parametrize("name", TABLES)
def test_a_row_without_a_source_is_found(name: str) -> None:
    text = resources.files("fleet.data.frameworks").joinpath(name).read_text()
    doc = yaml.safe_load(text)
    section = next(k for k in doc if k != "sources")
    del doc[section][0]["source"]
    doc[section][1]["source"] = "no-such-page"
    assert nvidia_data.rows_without_source(doc) == [
        f"{section}[0]: source None", f"{section}[1]: source 'no-such-page'"]


def test_unverified_rows_say_why() -> None:
    data = framework_data.load()
    rows = [*data.ort_cuda, *data.ort_tensorrt, *data.tensorrt, *data.torch]
    assert all(r.note for r in rows if r.unverified)
    assert all(set(r.unverified) <= {"cuda", "cudnn"} for r in rows)
    # what the stored pages state, row by row
    assert [(b.cuda, b.cudnn) for b in data.ort_builds("1.19.2")] == [(12, 9), (11, 8)]
    assert [(b.cuda, b.cudnn) for b in data.ort_builds("1.18.0")] == [(12, 8), (11, 8)]
    assert [(b.cuda, b.cudnn) for b in data.ort_builds("1.18.1")] == [(12, 9), (11, 8)]
    ep = data.ort_tensorrt_row("1.22.1")
    assert ep is not None and (ep.tensorrt, ep.cuda) == ("10.9", ("12.0-12.8",))
    torch = data.torch_row("2.9.1")
    assert torch is not None and torch.cuda == ("cu126", "cu128", "cu130") and not torch.unverified
    assert framework_data.torch_cuda("cu130") == "13.0"


# ------------------------------------------------------------------------------ good stacks
@pytest.mark.parametrize(("driver", "cuda", "companions", "frameworks"), [
    # ORT 1.19 for CUDA 12 with cuDNN 9 and the TensorRT its EP is built with
    ("560.35.05", "12.6.3", {"cudnn": "9.1.0.70", "tensorrt": "10.2.0.19"},
     {"onnxruntime": "1.19.2"}),
    # ORT 1.18.0 for CUDA 12 still needs cuDNN 8
    ("550.54.15", "12.4.1", {"cudnn": "8.9.7.29"}, {"onnxruntime": "1.18.0"}),
    # ORT 1.17 on CUDA 11.8, TensorRT 8.6
    ("535.183.01", "11.8", {"cudnn": "8.9.7.29", "tensorrt": "8.6.1.6"},
     {"onnxruntime": "1.17.3"}),
    ("570.133.20", "12.8.1", {}, {"torch": "2.6.0+cu126"}),
    ("580.95.05", "13.0.2", {}, {"torch": "2.9.1+cu130"}),
    ("570.133.20", "12.8.1", {"tensorrt": "10.9.0.34"}, {"torch": "2.6.0+cu118"}),
])
def test_published_stacks_pass(driver: str, cuda: str, companions: dict[str, str],
                               frameworks: dict[str, str]) -> None:
    data = stack(driver, cuda, **companions, **frameworks)
    assert framework_problems(data) == []


def test_without_a_frameworks_section_nothing_is_checked() -> None:
    rel = release("r", "580.95.05", "13.0.2")
    rel["companions"] = {"tensorrt": "10.9.0.34", "cudnn": "8.9.7.29"}  # would be wrong
    assert framework_problems(single(rel)) == []


# ------------------------------------------------------------------------------ bad stacks
def test_ort_1_20_on_cuda_13_is_an_error_with_file_line_and_the_supported_majors() -> None:
    data = stack("580.95.05", "13.0.2", onnxruntime="1.20.1")
    [err] = errors(data)
    assert (err.file, err.field) == ("m.yaml", "releases[0].frameworks.onnxruntime")
    assert err.line == line_of(dump(data), "onnxruntime:")
    assert "onnxruntime 1.20.1 is built for CUDA 12.x, 11.x only" in err.message
    assert "CUDA 13.0.2 is CUDA 13.x" in err.message


def test_cli_exits_2_naming_file_line_and_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(dump(stack("580.95.05", "13.0.2", onnxruntime="1.20.1")))
    with pytest.raises(SystemExit) as info:  # through the real exit-code boundary
        run(["matrix", "check", str(path)])
    line = line_of(path.read_text(), "onnxruntime:")
    assert info.value.code == 2
    assert f"{path}:{line}: releases[0].frameworks.onnxruntime: onnxruntime 1.20.1" in \
        capsys.readouterr().err


def test_cudnn_major_other_than_the_build_needs_is_an_error() -> None:
    data = stack("560.35.05", "12.6.3", cudnn="8.9.7.29", onnxruntime="1.19.2")
    [err] = errors(data)
    assert err.field == "releases[0].frameworks.onnxruntime"
    assert "needs cuDNN 9.x; companions.cudnn is 8.9.7.29" in err.message


def test_tensorrt_of_another_major_than_the_ep_is_an_error_another_minor_a_warning() -> None:
    data = stack("560.35.05", "12.6.3", tensorrt="8.6.1.6", onnxruntime="1.19.2")
    [err] = errors(data)
    assert err.field == "releases[0].companions.tensorrt"
    assert err.line == line_of(dump(data), "tensorrt:")
    assert "built with TensorRT 10.2; TensorRT 8.6.1.6 is another major version" in err.message
    data = stack("570.133.20", "12.8.1", tensorrt="10.9.0.34", onnxruntime="1.19.2")
    assert errors(data) == []
    assert any("built with TensorRT 10.2; TensorRT 10.9.0.34 is untested" in w.message
               for w in warnings(data))


def test_tensorrt_without_a_build_for_the_cuda_major_is_an_error() -> None:
    data = stack("580.95.05", "13.0.2", tensorrt="10.9.0.34", torch="2.9.1+cu130")
    [err] = errors(data)
    assert err.field == "releases[0].companions.tensorrt"
    assert ("TensorRT 10.9 ships builds for CUDA 12.x, 11.x; the release's CUDA 13.0.2"
            in err.message)


def test_tensorrt_10_13_0_has_no_cuda_13_build_and_10_13_2_has() -> None:
    """NVIDIA's PyPI packages: tensorrt-cu13 starts at 10.13.2; 10.13.0 was the last cu11."""
    [err] = errors(stack("580.95.05", "13.0.2", tensorrt="10.13.0.35", torch="2.9.1+cu130"))
    assert "TensorRT 10.13.0 ships builds for CUDA 12.x, 11.x" in err.message
    assert not errors(stack("580.95.05", "13.0.2", tensorrt="10.13.3.9", torch="2.9.1+cu130"))


def test_torch_build_pytorch_does_not_publish_is_an_error() -> None:
    [err] = errors(stack("570.133.20", "12.8.1", torch="2.9.1+cu124"))
    assert err.field == "releases[0].frameworks.torch"
    assert "torch 2.9.1 for cu126, cu128, cu130, not cu124" in err.message


def test_torch_cuda_runtime_newer_than_the_driver_is_an_error() -> None:
    data = stack("570.133.20", "12.8.1", torch="2.9.1+cu130")
    [err] = [e for e in errors(data) if e.field == "releases[0].frameworks.torch"]
    assert "bundles the CUDA 13.0 runtime, which needs driver >= 580.65.06" in err.message


def test_torch_cuda_runtime_through_minor_version_compatibility_warns() -> None:
    data = stack("570.86.15", "12.8", torch="2.8.0+cu129")  # 12.9 needs 575.51.03
    assert errors(data) == []
    assert any("only through minor-version compatibility" in w.message
               for w in warnings(data) if w.field == "releases[0].frameworks.torch")


def test_torch_without_its_cuda_build_is_bad_input() -> None:
    [err] = errors(stack("570.133.20", "12.8.1", torch="2.6.0"))
    assert err.field == "releases[0].frameworks.torch" and '"2.6.0+cu126"' in err.message


@pytest.mark.parametrize(("name", "frameworks", "companions"), [
    ("onnxruntime", {"onnxruntime": "1.31.0"}, {}),
    ("torch", {"torch": "3.1.0+cu130"}, {}),
    ("tensorrt", {"torch": "2.9.1+cu130"}, {"tensorrt": "10.99.0.1"}),
])
def test_unknown_versions_fail_closed_unless_marked_unverified(
        name: str, frameworks: dict[str, Any], companions: dict[str, str]) -> None:
    data = stack("580.95.05", "13.0.2", **companions, **frameworks)
    [err] = errors(data)
    assert "shipped with fleet" in err.message and f"list '{name}' in frameworks" in err.message
    marked = stack("580.95.05", "13.0.2", **companions, **frameworks, unverified=[name])
    assert errors(marked) == []
    assert any(f"not checked (frameworks.unverified names {name})" in w.message
               for w in warnings(marked))


def test_an_unverified_fact_warns_and_never_fails() -> None:
    # ORT 1.20's cuDNN major is only in a secondary copy: a mismatch warns, a match warns too
    data = stack("570.133.20", "12.8.1", cudnn="8.9.7.29", onnxruntime="1.20.1")
    assert errors(data) == []
    assert any("needs cuDNN 9.x" in w.message and "unverified fact" in w.message
               for w in warnings(data))
    data = stack("570.133.20", "12.8.1", cudnn="9.8.0.87", onnxruntime="1.20.1")
    assert errors(data) == []
    assert any("is unverified" in w.message for w in warnings(data))


def test_cudnn_major_from_the_wheel_metadata_is_a_verified_fact() -> None:
    # 1.21 to 1.24 name nvidia-cudnn-cu12~=9.0 in their PyPI wheels: cuDNN 8 is an error
    [err] = errors(stack("570.133.20", "12.8.1", cudnn="8.9.7.29", onnxruntime="1.22.0"))
    assert "needs cuDNN 9.x" in err.message and "PyPI onnxruntime-gpu" in err.message
    data = stack("570.133.20", "12.8.1", cudnn="9.8.0.87", onnxruntime="1.23.2")
    assert errors(data) == [] and not any("unverified" in w.message for w in warnings(data))


def test_unknown_framework_name_in_unverified_is_rejected() -> None:
    [err] = errors(stack("570.133.20", "12.8.1", torch="2.6.0+cu126", unverified=["jax"]))
    assert err.field == "releases[0].frameworks.unverified[0]"
