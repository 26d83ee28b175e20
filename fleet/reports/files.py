"""Writing report files: atomically (node_exporter must never read half a textfile)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PROM_NAME = "fleet_hygiene.prom"


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Write `text` to a temporary file in the same directory, fsync it, then rename it over
    `path`: readers see the old file or the new one, never a partial one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_reports(report: Mapping[str, Any], directory: Path, *,
                  prom_path: Path | None = None) -> dict[str, Path]:
    """hygiene-<date>.{md,html,json} plus latest.* copies in `directory`, and the Prometheus
    textfile (`prom_path`, default `directory/fleet_hygiene.prom`)."""
    from fleet.reports.html import render_html
    from fleet.reports.markdown import render_json, render_markdown
    from fleet.reports.prometheus import render_prometheus

    stamp = str(report.get("generated_at", ""))[:10] or "undated"
    out: dict[str, Path] = {}
    for ext, text in (("md", render_markdown(report)), ("html", render_html(report)),
                      ("json", render_json(report))):
        dated = directory / f"hygiene-{stamp}.{ext}"
        write_atomic(dated, text)
        write_atomic(directory / f"latest.{ext}", text)
        out[ext] = dated
    prom = prom_path or directory / PROM_NAME
    write_atomic(prom, render_prometheus(report))
    out["prom"] = prom
    return out
