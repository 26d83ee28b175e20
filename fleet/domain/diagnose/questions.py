"""The questions in the field's order, and the verdict: the most likely bottleneck."""

from __future__ import annotations

from collections.abc import Callable

from fleet.domain.diagnose import gpu_questions as g
from fleet.domain.diagnose import host_questions as h
from fleet.domain.diagnose import topo_questions as t
from fleet.domain.diagnose.model import CLASSES, SEVERITY_RANK, Answer, Diagnosis, Evidence, Finding

Question = Callable[[Evidence], tuple[list[Finding], Answer]]

QUESTIONS: tuple[Question, ...] = (
    g.queueing, g.gpu_idle, g.throttled, g.memory_bound, g.gpu_memory, h.host_memory,
    t.pcie, t.numa, t.nvlink, t.drift, t.fallback, t.hardware, h.host_cpu, h.disk,
)
assert tuple(q.__name__ for q in QUESTIONS) == CLASSES


# Without one of these answered, nothing was seen of the GPUs: never `healthy` then.
GPU_QUESTIONS = frozenset({"gpu_idle", "throttled", "gpu_memory", "pcie", "fallback", "hardware"})
COULD_NOT_JUDGE = "could_not_judge"


def verdict(findings: list[Finding], answers: list[Answer] | None = None) -> str:
    """The class of the most severe finding (critical over warning; the earlier question on a
    tie); `healthy` when only informational findings (or none) stand and the GPUs were seen;
    `could_not_judge` when nothing stands out but no GPU question could be answered."""
    ranked = [f for f in findings if SEVERITY_RANK[f.severity] > 0]
    if not ranked:
        if answers is not None and all(
                a.status == "could_not_judge" for a in answers if a.cls in GPU_QUESTIONS):
            return COULD_NOT_JUDGE
        return "healthy"
    order = {c: i for i, c in enumerate(CLASSES)}
    best = min(ranked, key=lambda f: (-SEVERITY_RANK[f.severity], order[f.cls]))
    return best.cls


def diagnose(ev: Evidence) -> Diagnosis:
    findings: list[Finding] = []
    answers: list[Answer] = []
    for q in QUESTIONS:
        f, a = q(ev)
        findings += f
        answers.append(a)
    return Diagnosis(verdict(findings, answers), findings, answers, dict(ev.files), ev.boot)
