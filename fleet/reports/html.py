"""The hygiene report as one self-contained HTML page: inline CSS and SVG, no JavaScript, no
external resources (it opens from a mail attachment or an air-gapped share).

It opens with what to do ("Act on this", `fleet.reports.actions`), above every chart; a chart is
drawn only where something moved (a pool's trend with any count, a model's weekly p99 that
changed), the flat ones are named in one line."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from fleet.reports import serving_html
from fleet.reports.actions import actions
from fleet.reports.bench_samples import CHECK_HEADER, check_rows, counts
from fleet.reports.node_state import FIELD_HEADER, FINDING_HEADER, HOST_HEADER, node_state_rows

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222;max-width:1200px}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:3px 7px;
text-align:left;vertical-align:top}th{background:#f4f4f4}.fail{color:#b00020;font-weight:600}
.warn{color:#a15c00}.ok{color:#1b7f3b}.charts{display:flex;flex-wrap:wrap;gap:16px}
.chart{border:1px solid #eee;padding:6px}.alert{background:#fde8e8;border:1px solid #b00020;
padding:8px;margin:6px 0}svg text{font:11px system-ui,sans-serif;fill:#444}
"""

_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def _fmt(v: float) -> str:
    if abs(v) >= 1e6:
        return f"{v / 1e6:.1f}M"
    if abs(v) >= 1e3:
        return f"{v / 1e3:.1f}k"
    return f"{v:.0f}"


def line_chart(title: str, series: Mapping[str, Sequence[float | None]], *, width: int = 360,
               height: int = 180) -> str:
    """A small SVG line chart of weekly values, one line per series, with a legend; a week
    without a value (None) is a gap, never a zero."""
    left, right, top, bottom = 44, 10, 22, 34
    w, h = width - left - right, height - top - bottom
    n = max((len(v) for v in series.values()), default=0)
    peak = max((x for v in series.values() for x in v if x is not None), default=0.0) or 1.0
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="{escape(title)}">',
             f'<text x="{left}" y="14">{escape(title)}</text>',
             f'<line x1="{left}" y1="{top + h}" x2="{left + w}" y2="{top + h}" stroke="#999"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + h}" stroke="#999"/>',
             f'<text x="{left - 4}" y="{top + 4}" text-anchor="end">{_fmt(peak)}</text>',
             f'<text x="{left - 4}" y="{top + h}" text-anchor="end">0</text>']
    for i in range(n):
        x = left + (w * i / (n - 1) if n > 1 else w / 2)
        parts.append(f'<text x="{x:.1f}" y="{top + h + 14}" text-anchor="middle">'
                     f'{"now" if i == n - 1 else f"-{n - 1 - i}w"}</text>')
    for j, (name, values) in enumerate(series.items()):
        color = _COLORS[j % len(_COLORS)]
        runs: list[list[str]] = [[]]
        for i, v in enumerate(values):
            if v is None:
                runs.append([])
                continue
            runs[-1].append(f"{left + (w * i / (n - 1) if n > 1 else w / 2):.1f},"
                            f"{top + h - h * v / peak:.1f}")
        parts += [f'<polyline fill="none" stroke="{color}" stroke-width="2" '
                  f'points="{" ".join(run)}"/>' for run in runs if run]
        lx = left + j * 110
        parts.append(f'<rect x="{lx}" y="{height - 12}" width="10" height="3" fill="{color}"/>'
                     f'<text x="{lx + 14}" y="{height - 8}">{escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def sparkline(values: Sequence[float], width: int = 90, height: int = 20) -> str:
    peak = max(values, default=0.0) or 1.0
    n = len(values)
    pts = " ".join(f"{(width - 2) * i / max(n - 1, 1) + 1:.1f},"
                   f"{height - 1 - (height - 2) * v / peak:.1f}" for i, v in enumerate(values))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">'
            f'<polyline fill="none" stroke="#d62728" stroke-width="1.5" points="{pts}"/></svg>')


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _sev(sev: str) -> str:
    return f'<span class="{escape(sev)}">{escape(sev)}</span>'


def render_html(report: Mapping[str, Any], worst: int = 25) -> str:
    s, d = report["summary"], report["summary"]["drift"]
    t, q = report["trends"], report["quarantine"]
    status = ('<span class="ok">clean</span>' if s["exit_code"] == 0 else
              f'<span class="fail">{s["problems"]} problem(s)</span>')
    body = [f"<h1>Fleet hygiene report, {escape(str(report['generated_at']))}</h1>",
            f"<p>Status: {status} (exit {s['exit_code']}). Hosts {d['hosts']}: conformant "
            f"{d['conformant']}, non-conformant {d['non_conformant']} (unreachable "
            f"{d['unreachable']}). GPUs analyzed {s['gpus_analyzed']}, flagged "
            f"{s['gpus_flagged']}. Quarantine proposed {s['quarantine_proposed']}, applied "
            f"{s['quarantine_applied']}.</p>"]
    todo = actions(report)
    body.append('<section id="act"><h2>Act on this</h2>')
    body.append("<ol>" + "".join(
        f'<li class="action {escape(a["kind"])}"><b>{escape(a["subject"] or a["kind"])}</b>: '
        f'{escape(a["what"])}<br><code>$ {escape(a["command"])}</code></li>' for a in todo)
        + "</ol>" if todo else "<p>Nothing to act on.</p>")
    body.append("</section>")
    body += [f'<div class="alert">{escape(a)}</div>' for a in q["alerts"]]
    body.append(f"<h2>Trends per pool (last {t['window_weeks']} weeks)</h2>")
    moved = {p: v for p, v in t["pools"].items()
             if any(v[k] and max(v[k]) > 0 for k in ("ecc_corrected", "aer_corrected", "xid"))}
    if moved:
        body.append("<div class=charts>")
    for pool, v in moved.items():
        body.append(f'<div class="chart">{line_chart(f"{pool}: corrected ECC / week", {"ECC corrected": v["ecc_corrected"]})}</div>')  # noqa: E501
        body.append(f'<div class="chart">{line_chart(f"{pool}: AER corrected and Xid / week", {"AER corrected": v["aer_corrected"], "Xid": v["xid"]})}</div>')  # noqa: E501
    if moved:
        body.append("</div>")
    flat = [p for p in t["pools"] if p not in moved]
    if flat:
        body.append(f"<p>Flat (no corrected ECC, AER or Xid in the window, no chart): "
                    f"{escape(', '.join(flat))}.</p>")
    body.append("<h2>Worst GPUs</h2>")
    if t["flagged"]:
        body.append(_table(
            ["host", "GPU", "pool", "severity", "corrected ECC / week", "flags"],
            [(escape(g["host"]), str(g["gpu_index"]), escape(g["pool"]), _sev(g["severity"]),
              sparkline(g["ecc_corrected_weekly"]) + " "
              + escape(" → ".join(f"{x:.0f}" for x in g["ecc_corrected_weekly"])),
              "<br>".join(escape(f["message"]) for f in g["flags"]))
             for g in t["flagged"][:worst]]))
    else:
        body.append("<p>No GPU flagged.</p>")
    body.append("<h2>Drift (fails closed)</h2>")
    bad = [x for x in report["drift"] if not x["conformant"]]
    body.append(_table(["host", "pool", "release", "differences"],
                       [(escape(x["host"]), escape(str(x["pool"])), escape(x["release"] or "-"),
                         "<br>".join(escape(y["text"]) for y in x["differences"]))
                        for x in bad]) if bad else "<p>Every host is conformant.</p>")
    ns = node_state_rows(report)
    body.append(f"<h2>Node state (profiles)</h2><p>{escape(ns['summary'])}</p>")
    for header, rows in ((HOST_HEADER, ns["hosts"]), (FINDING_HEADER, ns["findings"]),
                         (FIELD_HEADER, ns["fields"])):
        if rows:
            body.append(_table(list(header), [tuple(escape(str(c)) for c in r) for r in rows]))
    body.append("<h2>Quarantine</h2>")
    body.append(_table(["host", "pool", "decision", "reasons"],
                       [(escape(p["host"]), escape(p["pool"]), escape(p["decision"]),
                         "<br>".join(escape(r) for r in p["reasons"]))
                        for p in q["proposals"]]) if q["proposals"] else "<p>No proposal.</p>")
    if q["breakers"]:
        body.append(_table(["pool", "size", "limit", "proposed", "already", "tripped"],
                           [(escape(b["pool"]), str(b["size"]), str(b["limit"]),
                             str(b["proposed"]), str(b["already_quarantined"]),
                             _sev("fail") if b["tripped"] else "no") for b in q["breakers"]]))
    body.append("<h2>Synthetic benchmark per pool</h2>")
    body.append(_table(["pool", "hosts", "verdict",
                        "samples per side (week / baseline / needed)", "reason"],
                       [(escape(b["pool"]), escape(", ".join(b["hosts"])), escape(b["verdict"]),
                         escape(counts(b)), escape(b["reason"])) for b in report["benchmarks"]])
                if report["benchmarks"] else "<p>Not run.</p>")
    rows = check_rows(report["benchmarks"])
    if rows:
        body.append("<p>Samples each judged check needed and had:</p>")
        body.append(_table(list(CHECK_HEADER), [tuple(escape(c) for c in r) for r in rows]))
    body += _serving(report)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>Fleet hygiene {escape(str(report['generated_at']))}</title>"
            f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def _serving(report: Mapping[str, Any]) -> list[str]:
    sv = report.get("serving") or {}
    out = ["<h2>Serving per model (Prometheus)</h2>"]
    if sv.get("status") != "measured":
        out.append(f'<p class="warn">{escape(sv.get("reason") or "not run")}</p>')
    rows = serving_html.rows(report)
    if rows:
        out.append(_table(list(serving_html.HEADER), [tuple(escape(c) for c in r)
                                                      for r in rows]))
    charts = serving_html.weekly(report)
    if charts:
        out.append("<div class=charts>" + "".join(
            f'<div class="chart">{line_chart(f"{pool}: p99 latency per week (ms)", series)}'
            "</div>" for pool, series in charts.items()) + "</div>")
    elif rows:
        out.append("<p>No model's weekly p99 moved: no chart.</p>")
    return out
