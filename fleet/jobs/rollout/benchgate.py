"""The benchmark gate: synthetic and replay samples of a wave against its baseline, judged."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fleet.domain.gates import (
    GateVerdict,
    after_retries,
    combine,
    from_judge,
)
from fleet.domain.judge import choose_baseline, judge
from fleet.domain.judge.utilization import GPU_UTIL
from fleet.domain.matrix.models import RolloutSettings
from fleet.history.rollouts import (
    StepRow,
    WaveRow,
    record_benchmarks,
)
from fleet.history.store import benchmark_samples
from fleet.jobs.rollout.core import EngineCore
from fleet.jobs.rollout.model import _UNLOCK, _most_common, _Stop


class BenchGate(EngineCore):
    """The benchmark gate: the wave's hosts against a same-time baseline, judged."""

    def _bench_gate(self, w: WaveRow, rows: list[StepRow], settings: RolloutSettings) -> None:
        todo = [r for r in rows if (r.state == "verifying" and r.ended)
                or (r.state == "benchmarking" and not r.ended)]
        if not todo:
            return
        suites = [s for s, on in (("synthetic", settings.gates.benchmark),
                                  ("replay", settings.gates.replay)) if on]
        if w.verdict == "pass" or not suites:  # promoted by an operator, or no benchmark gate
            why = "promoted" if w.verdict == "pass" else "no benchmark gate"
            self._set(todo, "judged", ended=True, verdict="pass", why=why)
            self._write(todo, events=[self._step_event(w, "judge", "end", todo, {"why": why})],
                        label=f"wave{w.index}:judge:skip")
            return
        self._set(todo, "benchmarking", ended=False)
        self._write(todo, events=[self._step_event(w, "benchmark", "begin", todo,
                                                   {"suites": suites})],
                    wave=(w.id, {"status": "running"}),
                    label=f"wave{w.index}:bench:begin")
        attempt = 0
        while True:
            attempt += 1
            verdict, reason, detail = self._measure(w, todo, suites)
            final = after_retries(verdict, attempt, settings.gates.max_retries)
            self.gates.setdefault(w.id, {})["benchmark"] = {
                "verdict": verdict, "reason": reason, "attempt": attempt, **detail}
            self._write([], events=[self._ev(
                "rollout.gate", f"wave {w.index} ({w.pool}): benchmark gate {verdict} "
                                f"(attempt {attempt}): {reason}", wave=w.index,
                gate="benchmark", verdict=verdict, attempt=attempt, reason=reason, **detail)],
                label=f"wave{w.index}:bench:attempt{attempt}")
            if final is not None:
                break
        if verdict == "error":
            reason = (f"could not measure after {attempt} attempt(s) ({reason}): "
                      "treated as inconclusive")
        self._set(todo, "judged", ended=True, verdict=final)
        status = {"pass": "running", "fail": "failed", "inconclusive": "paused"}[final]
        events = [self._step_event(w, "benchmark", "end", todo, {"verdict": final})]
        rollout: dict[str, Any] | None = None
        if final == "inconclusive":
            events.append(self._ev("rollout.pause", f"wave {w.index} ({w.pool}) inconclusive: "
                                   f"{reason}; paused until `fleet rollout promote {self.rid}` "
                                   f"or `abort`", wave=w.index, reason=reason))
            rollout = {"status": "paused", **_UNLOCK}
        self._write(todo, events=events, wave=(w.id, {"status": status, "verdict": final}),
                    rollout=rollout, label=f"wave{w.index}:bench:end")
        w.status, w.verdict = status, final
        if final == "inconclusive":
            raise _Stop("paused", f"wave {w.index} ({w.pool}) inconclusive: {reason}")
        if final == "fail":
            res = self._rollback(w, f"benchmark gate: {reason}")
            raise _Stop(res.status, res.reason)

    def _measure(self, w: WaveRow, rows: list[StepRow],
                 suites: Sequence[str]) -> tuple[GateVerdict, str, dict[str, Any]]:
        """One try of the benchmark gates: the worst verdict over the suites."""
        n = max(1, self.opts.bench_hosts)
        canary = sorted(r.host for r in rows)[:n]
        models = {self.refs[h].gpu_model for h in canary if h in self.refs}
        old = _most_common([r.from_release for r in rows if r.from_release])
        baseline: list[str] = []
        for r in self._pool_rows(w.pool):
            if len(baseline) >= n:
                break
            ref = self.refs.get(r.host)
            if (r.state == "planned" and (ref is None or ref.gpu_model in models)
                    and self.scheduler.state(r.host).state == "available"):
                baseline.append(r.host)
        verdicts: list[GateVerdict] = []
        reasons: list[str] = []
        detail: dict[str, Any] = {"canary_hosts": canary, "baseline_hosts": baseline,
                                  "suites": {}}
        for suite in suites:
            # the pool's gate settings name the command/endpoint; engine options override them
            pool_params = self._settings(w.pool).gates.suite_params().get(suite, {})
            params = {**pool_params, **self.opts.suite_params.get(suite, {})}
            started = self.now()
            out = self.backend.benchmark(canary + baseline, suite, params)
            ended = self.now()
            c_samples: dict[str, list[float]] = {}
            b_samples: dict[str, list[float]] = {}
            errors = []
            runs = []
            for h in canary + baseline:
                res = out[h]
                side = c_samples if h in canary else b_samples
                ok = res.ok and bool(res.value)
                if ok:
                    for metric, values in (res.value or {}).items():
                        side.setdefault(metric, []).extend(values)
                else:
                    errors.append(f"{h}: {res.error}")
                rel = (self.steps[h].to_release if h in canary else old)
                runs.append((h, rel, res.value if ok else None, "done" if ok else "error"))
            record_benchmarks(self.history, runs, kind=suite, name=f"rollout-{self.rid}",
                              started_at=started, ended_at=ended, rollout_id=self.rid)
            if not c_samples:
                verdicts.append("error")
                reasons.append(f"{suite}: no canary samples ({'; '.join(errors[:3])})")
                continue
            history_base = (benchmark_samples(self.history, pool=w.pool, release=old,
                                              kind=suite) if old else {})
            chosen = choose_baseline(b_samples, history_base)
            if chosen is None:
                verdicts.append("error")
                reasons.append(f"{suite}: no baseline on {old or 'the old release'} (no host "
                               "of the pool left on it, and no history)")
                continue
            base, source = chosen
            # the suite's specs for the metrics this benchmark measures (on either side: one the
            # canary lacks stays, and fails as missing); a configured command that prints other
            # metrics is judged by their names (judge.default_spec)
            specs = [s for s in self.opts.suite_specs.get(suite, ())
                     if s.name in c_samples or s.name in base]
            if suite == "synthetic" and "command" in params:
                specs = []  # the pool's own benchmark: its metrics are judged by their names
            j = judge(c_samples, base, specs or None, baseline_source=source,
                      config=self.opts.judge_config, only_specified=bool(specs))
            v = from_judge(j.verdict)
            verdicts.append(v)
            # GPU utilization is judged by `judge` whenever either side has it (one side without
            # it is inconclusive); a backend that measures it on neither side is said so here
            measured = GPU_UTIL in c_samples or GPU_UTIL in base
            note = "" if measured else " (GPU utilization not measured on either side)"
            reasons.append(f"{suite}: {j.verdict}: {j.reason}{note}")
            detail["suites"][suite] = {"verdict": j.verdict, "baseline_source": source,
                                       "gpu_utilization_measured": measured,
                                       "low_confidence": j.low_confidence,
                                       "metrics": [m.as_dict() for m in j.metrics]}
        return combine(verdicts), "; ".join(reasons), detail
