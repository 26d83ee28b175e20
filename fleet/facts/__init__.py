"""Offline host facts: read `nvidia-smi` captures and probe JSON into `HostFacts`.

The pure parsers of text live below (`fleet.domain.nvsmi`: the `-q` text and the `--query-gpu`
CSV; the XML parser is the probe's own); this adds `facts_from_file`, the one entry point that
`fleet facts parse` and `fleet facts import` use.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from fleet.domain.facts import HostFacts
from fleet.domain.nesting import MAX_JSON_DEPTH, json_too_deep
from fleet.domain.nvsmi.q_text import looks_like_q_text, parse_q_text
from fleet.domain.nvsmi.query_csv import looks_like_csv, parse_query_csv
from fleet.errors import BadInput, Problem
from fleet.probe.hostprobe import parse_nvsmi_xml

Format = Literal["probe-json", "nvidia-smi-xml", "nvidia-smi-q", "nvidia-smi-csv"]

__all__ = ["Format", "detect_format", "facts_from_file", "facts_from_text", "parse_xml"]


def parse_xml(text: str) -> HostFacts:
    d = parse_nvsmi_xml(text)
    return HostFacts.model_validate(
        {
            "source": "nvidia-smi-xml",
            "versions": {
                "driver_library": d["driver_version"],
                "cuda_driver_api": d["cuda_version"],
            },
            "gpu_count": d["attached_gpus"]
            if isinstance(d["attached_gpus"], int)
            else len(d["gpus"]),
            "gpus": d["gpus"],
        }
    )


def detect_format(text: str) -> Format | None:
    head = text.lstrip()[:4000]
    if head.startswith("{"):
        return "probe-json"
    if head.startswith("<?xml") or "<nvidia_smi_log" in head:
        return "nvidia-smi-xml"
    if looks_like_q_text(text):
        return "nvidia-smi-q"
    if looks_like_csv(text):
        return "nvidia-smi-csv"
    return None


def facts_from_text(text: str, name: str = "<input>") -> HostFacts:
    """Host facts from any supported capture; BadInput (file, line) when it cannot be read."""
    fmt = detect_format(text)
    if fmt is None:
        raise BadInput.single(
            "unknown format: expected probe JSON, nvidia-smi -q -x XML, nvidia-smi -q text or "
            "--query-gpu CSV",
            file=name,
            line=1,
        )
    deep = json_too_deep(text) if fmt == "probe-json" else None
    if deep is not None:
        raise BadInput.single(f"invalid JSON: nested deeper than {MAX_JSON_DEPTH} levels",
                              file=name, line=deep)
    try:
        if fmt == "probe-json":
            facts = HostFacts.model_validate(json.loads(text))
        elif fmt == "nvidia-smi-xml":
            facts = parse_xml(text)
        elif fmt == "nvidia-smi-q":
            facts = parse_q_text(text)
        else:
            facts = parse_query_csv(text)
    except json.JSONDecodeError as exc:
        raise BadInput.single(f"invalid JSON: {exc.msg}", file=name, line=exc.lineno) from exc
    except ValidationError as exc:
        raise BadInput(
            [
                Problem(name, None, ".".join(str(p) for p in e["loc"]), e["msg"])
                for e in exc.errors()
            ]
        ) from exc
    except SyntaxError as exc:  # xml.etree.ElementTree.ParseError
        line = getattr(exc, "position", (None,))[0]
        raise BadInput.single(f"invalid {fmt}: {exc}", file=name, line=line) from exc
    except ValueError as exc:
        raise BadInput.single(f"invalid {fmt}: {exc}", file=name) from exc
    if fmt != "probe-json" and not facts.gpus:
        # an nvidia-smi report without one GPU (a capture cut after its header, a CSV of its
        # header only) shows nothing of the GPUs: never "no findings" (nvidia-smi itself prints
        # "No devices were found" rather than an empty report)
        said = f" (its header says {facts.gpu_count} attached)" if facts.gpu_count else ""
        raise BadInput.single(f"invalid {fmt}: no GPU in the capture{said}: cut short or "
                              "empty; capture it again", file=name,
                              line=text.count("\n") + 1, field="gpus")
    return facts.model_copy(update={"input_file": name})


def facts_from_file(path: str | Path) -> HostFacts:
    """Read one capture file into HostFacts (the hook for `fleet facts import`)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise BadInput.single(f"cannot read: {exc.strerror or exc}", file=str(p)) from exc
    return facts_from_text(text, str(p))
