"""What the on-call engineer should do after a hygiene run, each with its command: the list the
reports open with, above every chart (quarantines, drift, regressions, what could not be
measured). Pure: from the report's JSON only."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any, TypedDict


class Action(TypedDict):
    kind: str  # quarantine, breaker, drift, unreachable, benchmark, serving, unmeasured
    subject: str
    what: str
    command: str


def _q(text: str) -> str:
    return shlex.quote(text)


def actions(report: Mapping[str, Any]) -> list[Action]:
    """The report's actions, most disruptive first."""
    out: list[Action] = []
    q = report.get("quarantine", {})
    applied = {a["host"] for a in q.get("applied", []) if a.get("applied")}
    for p in q.get("proposals", []):
        host, why = p["host"], "; ".join(p.get("reasons", []))
        if host in applied:
            out.append(Action(kind="quarantine", subject=host,
                              what=f"quarantined (drained): {why}; repair, then release it",
                              command=f"fleet quarantine release {_q(host)} "
                                      "--reason 'repaired'"))
        elif p.get("decision") == "quarantine":
            out.append(Action(kind="quarantine", subject=host,
                              what=f"proposed for quarantine: {why}",
                              command=f"fleet hygiene run --apply-quarantine -l {_q(host)}"))
    for alert in q.get("alerts", []):
        out.append(Action(kind="breaker", subject="", what=alert,
                          command="fleet quarantine list"))
    for d in report.get("drift", []):
        if d.get("conformant") or d.get("in_flight"):
            continue
        host = d["host"]
        if not d.get("reachable", True):
            out.append(Action(kind="unreachable", subject=host, what="unreachable: not audited",
                              command=f"fleet probe -l {_q(host)}"))
            continue
        what = "; ".join(x["text"] for x in d.get("differences", [])) or "not conformant"
        golden = d.get("golden")
        out.append(Action(kind="drift", subject=host, what=what,
                          command=(f"fleet apply -r {_q(golden)} -l {_q(host)}" if golden
                                   else f"fleet check -l {_q(host)}")))
    for b in report.get("benchmarks", []):
        if b.get("verdict") == "fail":
            out.append(Action(kind="benchmark", subject=b["pool"],
                              what=f"synthetic benchmark regressed: {b.get('reason', '')}",
                              command=f"fleet rollback -l {_q(b['pool'])} --reason "
                                      f"{_q('benchmark regression')} --dry"))
    serving = report.get("serving") or {}
    for p in serving.get("pools", []):
        for m in p.get("models", []):
            if m.get("regression"):
                out.append(Action(kind="serving", subject=f"{p['pool']}/{m['model']}",
                                  what=m["regression"],
                                  command=f"fleet rollback -l {_q(p['pool'])} --reason "
                                          f"{_q('serving regression')} --dry"))
    for problem in serving.get("problems", []):
        if problem.startswith("serving: "):  # a query that failed (regressions listed above)
            out.append(Action(kind="unmeasured", subject="serving", what=problem,
                              command="curl -s \"$FLEET_PROMETHEUS_URL/-/ready\""))
    return out
