"""The hygiene report as Markdown (for a ticket or a chat) and as stable JSON."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import Any

from fleet.reports import serving_html
from fleet.reports.actions import actions
from fleet.reports.bench_samples import CHECK_HEADER, check_rows, counts
from fleet.reports.node_state import FIELD_HEADER, FINDING_HEADER, HOST_HEADER, node_state_rows


def _default(obj: Any) -> Any:
    if isinstance(obj, datetime | date):
        return obj.isoformat()
    if hasattr(obj, "as_dict"):
        return obj.as_dict()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def render_json(report: Mapping[str, Any]) -> str:
    """Stable JSON: sorted keys, two-space indent, trailing newline."""
    return json.dumps(report, default=_default, sort_keys=True, indent=2) + "\n"


def _md(value: Any) -> str:
    """Text from hosts and files as Markdown shows it: HTML escaped (Markdown renderers pass
    raw HTML through, so `<img onerror=...>` in a host string would be live in a ticket or a
    wiki), each line break a space (a newline would start a block of its own)."""
    text = html.escape(str(value if value is not None else ""), quote=False)
    return text.replace("\r", " ").replace("\n", " ")


def _cell(value: Any) -> str:
    return _md(value).replace("|", "\\|")


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]
    return lines


def render_markdown(report: Mapping[str, Any], worst: int = 20) -> str:
    s = report["summary"]
    d = s["drift"]
    out = [f"# Fleet hygiene report, {_md(report['generated_at'])}", ""]
    status = "clean" if s["exit_code"] == 0 else f"{s['problems']} problem(s)"
    out += [
        f"**Status: {status}** (exit {s['exit_code']})", "",
        f"- Hosts audited: {d['hosts']}; conformant {d['conformant']}, non-conformant "
        f"{d['non_conformant']} (of which unreachable {d['unreachable']}); behind golden "
        f"{d['behind_golden']}",
        f"- GPUs analyzed: {s['gpus_analyzed']}; flagged {s['gpus_flagged']} on "
        f"{s['hosts_flagged']} host(s)",
        f"- Quarantine: {s['quarantine_proposed']} proposed, {s['quarantine_applied']} applied"
        + (f"; **circuit breaker tripped: {_md(', '.join(s['breakers_tripped']))}**"
           if s["breakers_tripped"] else ""),
        "- Benchmark regressions: " + (_md(", ".join(s["benchmark_regressions"])) or "none"),
        "",
    ]
    todo = actions(report)
    out += ["## Act on this", ""]
    out += [f"{i}. **{_md(a['subject'] or a['kind'])}**: {_md(a['what'])}  \n"
            f"   `$ {_md(a['command'])}`" for i, a in enumerate(todo, 1)] or ["Nothing to act on."]
    out.append("")
    alerts = report["quarantine"]["alerts"]
    if alerts:
        out += ["## Alerts", ""] + [f"- {_md(a)}" for a in alerts] + [""]
    out += ["## Drift (fails closed)", ""]
    bad = [x for x in report["drift"] if not x["conformant"]]
    if bad:
        out += _table(["host", "pool", "release", "differences"],
                      [(x["host"], x["pool"], x["release"] or "-",
                        "; ".join(y["text"] for y in x["differences"])) for x in bad])
    else:
        out.append("Every host is on an allowed release, pinned and reachable.")
    behind = [x for x in report["drift"] if x["behind_golden"]]
    if behind:
        out += ["", f"{len(behind)} host(s) on an allowed release other than their golden: "
                + _md(", ".join(f"{x['host']} ({x['release']})" for x in behind[:20]))
                + (" ..." if len(behind) > 20 else "")]
    ns = node_state_rows(report)
    out += ["", "## Node state (profiles)", "", _md(ns["summary"])]
    if ns["hosts"]:
        out += ["", *_table(HOST_HEADER, ns["hosts"]), "", *_table(FINDING_HEADER,
                                                                    ns["findings"])]
    if ns["fields"]:
        out += ["", *_table(FIELD_HEADER, ns["fields"])]
    t = report["trends"]
    out += ["", f"## Trends (last {t['window_weeks']} weeks)", ""]
    pools = t["pools"]
    if pools:
        out += _table(["pool", "corrected ECC / week", "AER corrected / week", "Xid / week"],
                      [(p, _series(v["ecc_corrected"]), _series(v["aer_corrected"]),
                        _series(v["xid"])) for p, v in pools.items()])
    out += ["", "### Flagged GPUs (worst first)", ""]
    if t["flagged"]:
        out += _table(
            ["host", "GPU", "pool", "severity", "corrected ECC / week", "flags"],
            [(g["host"], g["gpu_index"], g["pool"], g["severity"],
              _series(g["ecc_corrected_weekly"]),
              "; ".join(f["message"] for f in g["flags"])) for g in t["flagged"][:worst]])
        if len(t["flagged"]) > worst:
            out.append(f"\n... and {len(t['flagged']) - worst} more (see the JSON report)")
    else:
        out.append("No GPU flagged.")
    q = report["quarantine"]
    out += ["", "## Quarantine", ""]
    if q["proposals"]:
        out += _table(["host", "pool", "decision", "reasons"],
                      [(p["host"], p["pool"], p["decision"], "; ".join(p["reasons"]))
                       for p in q["proposals"]])
    else:
        out.append("No proposal.")
    if q["breakers"]:
        out += ["", *_table(["pool", "size", "limit", "proposed", "already", "tripped"],
                            [(b["pool"], b["size"], b["limit"], b["proposed"],
                              b["already_quarantined"], "YES" if b["tripped"] else "no")
                             for b in q["breakers"]])]
    if q["applied"]:
        out += ["", "Applied:", ""] + [f"- {_md(a['host'])}: {_md(a['message'])}"
                                           for a in q["applied"]]
    elif q["proposals"] and not q["apply"]:
        out += ["", "Proposals only: rerun with `--apply-quarantine` to drain."]
    if q["open"]:
        out += ["", f"Open quarantines: {len(q['open'])} "
                "(`fleet quarantine list`; release with "
                "`fleet quarantine release HOST --reason WHY`)."]
    out += ["", "## Synthetic benchmark per pool", ""]
    if report["benchmarks"]:
        out += _table(["pool", "hosts", "verdict", "samples per side (week / baseline / needed)",
                       "reason"],
                      [(b["pool"], ", ".join(b["hosts"]), b["verdict"], counts(b),
                        b["reason"]) for b in report["benchmarks"]])
        rows = check_rows(report["benchmarks"])
        if rows:
            out += ["", "Samples each judged check needed (`fleet.domain.sample_size`) and had:",
                    ""] + _table(CHECK_HEADER, rows)
    else:
        out.append("Not run.")
    sv = report.get("serving") or {}
    out += ["", "## Serving per model (Prometheus)", ""]
    if sv.get("status") != "measured":
        out.append(_md(sv.get("reason") or "not run"))
    rows = serving_html.rows(report)
    if rows:
        out += ["", *_table(serving_html.HEADER, rows)]
    return "\n".join(out) + "\n"


def _series(values: Sequence[float]) -> str:
    return " → ".join(f"{v:.0f}" for v in values)
