"""The benchmark gate: synthetic and replay samples of a wave against its baseline, judged.

The same-time baseline runs only on hosts of the pool that are in service and idle (the
scheduler's `IdleCheck`: Slurm IDLE with no job listed, Kubernetes no workload pod), never beside
someone's job; without such hosts the history's samples of the old release are the baseline.
A canary whose benchmark could not run while other hosts were measured is retried with the
gate (`max_retries`), then fails on its own (it counts against the failure budget and is put
back); the other canaries are judged without it. When no host at all could be measured, the
gate could not measure (error, retried, then inconclusive: a pause for a human).
"""

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
from fleet.domain.ports import IdleCheck
from fleet.history.bulk import record_benchmarks
from fleet.history.rollouts import StepRow, WaveRow
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
        if not suites:  # a promote never passes a gate that did not run: only "none set"
            why = "no benchmark gate"
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
            judged, reason, detail, crashed = self._measure(w, todo, suites)
            verdict: GateVerdict = "error" if crashed else judged  # a crash is retried
            if crashed:
                reason = (f"{reason}; " if reason else "") + "could not be measured: " + \
                    "; ".join(f"{h}: {e}" for h, e in sorted(crashed.items()))
            final = after_retries(verdict, attempt, settings.gates.max_retries)
            self.gates.setdefault(w.id, {})["benchmark"] = {
                "verdict": verdict, "reason": reason, "attempt": attempt, **detail}
            self._write([], events=[self._ev(
                "rollout.gate", f"wave {w.index} ({w.pool}): benchmark gate {verdict} "
                                f"(attempt {attempt}): {reason}", wave=w.index,
                gate="benchmark", verdict=verdict, attempt=attempt, reason=reason,
                crashed=sorted(crashed), **detail)],
                label=f"wave{w.index}:bench:attempt{attempt}")
            if final is not None:
                break
        if crashed:  # the retries are spent: each such canary fails on its own
            todo = self._fail_crashed(w, rows, todo, crashed, attempt, settings)
            verdict, final = judged, after_retries(judged, attempt, settings.gates.max_retries)
        if verdict == "error":
            reason = (f"could not measure after {attempt} attempt(s) ({reason}): "
                      "treated as inconclusive")
        assert final is not None
        if not todo:  # every measured canary failed on its own; the health gate passed it
            return
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

    # implemented by the step mixin (WaveSteps, before this one in the engine's MRO)
    def _health_gate(self, w: WaveRow, rows: list[StepRow], settings: RolloutSettings) -> None:
        raise NotImplementedError

    def _fail_crashed(self, w: WaveRow, rows: list[StepRow], todo: list[StepRow],
                      crashed: dict[str, str], attempt: int,
                      settings: RolloutSettings) -> list[StepRow]:
        """Fail the canaries whose benchmark could not run after every retry (the others were
        measured meanwhile), then let the health gate count them against the budget (it rolls
        the wave back when they blow it). Returns the rows still to be judged."""
        failed = [r for r in todo if r.host in crashed]
        for r in failed:
            self._fail(r, "benchmark", f"benchmark could not run after {attempt} attempt(s): "
                                       f"{crashed[r.host]}")
        self._write(failed, events=[self._step_event(w, "benchmark", "end", failed,
                                                     {"verdict": "fail",
                                                      "why": "could not be measured"}),
                                    *self._host_events(failed)],
                    label=f"wave{w.index}:bench:crashed")
        bench = self.gates.get(w.id, {}).get("benchmark")
        self._health_gate(w, rows, settings)  # raises when the failures blow the budget
        if bench is not None:  # the health gate's record replaced the wave's gate results
            self.gates.setdefault(w.id, {})["benchmark"] = bench
        return [r for r in todo if r.host not in crashed]

    def _baseline_hosts(self, w: WaveRow, models: set[str | None], n: int,
                        passed_over: dict[str, str]) -> list[str]:
        """Up to `n` planned hosts of the pool (same GPU model) that are in service and idle
        right now; `passed_over` says why the others were not taken."""
        if not isinstance(self.scheduler, IdleCheck):
            return []
        baseline: list[str] = []
        for r in self._pool_rows(w.pool):
            if len(baseline) >= n:
                break
            ref = self.refs.get(r.host)
            if r.state != "planned" or (ref is not None and ref.gpu_model not in models):
                continue
            state = self.scheduler.state(r.host)
            if state.state != "available":
                passed_over[r.host] = state.state
                continue
            idle = self.scheduler.idle(r.host)
            if not idle.ok:
                passed_over[r.host] = f"unknown: {idle.error}"
            elif not idle.value:
                passed_over[r.host] = "busy"
            else:
                baseline.append(r.host)
        return baseline

    def _measure(self, w: WaveRow, rows: list[StepRow], suites: Sequence[str]
                 ) -> tuple[GateVerdict, str, dict[str, Any], dict[str, str]]:
        """One try of the benchmark gates: the worst verdict over the suites, judged on the
        canaries that were measured, and the canaries that could not be while other hosts
        were (host -> error)."""
        n = max(1, self.opts.bench_hosts)
        canary = sorted(r.host for r in rows)[:n]
        models = {self.refs[h].gpu_model for h in canary if h in self.refs}
        old = _most_common([r.from_release for r in rows if r.from_release])
        passed_over: dict[str, str] = {}
        baseline = self._baseline_hosts(w, models, n, passed_over)
        verdicts: list[GateVerdict] = []
        reasons: list[str] = []
        crashed: dict[str, str] = {}
        detail: dict[str, Any] = {"canary_hosts": canary, "baseline_hosts": baseline,
                                  "baseline_passed_over": dict(list(passed_over.items())[:20]),
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
            lost: dict[str, str] = {}  # canaries of this suite that could not be measured
            for h in canary + baseline:
                res = out.get(h)
                side = c_samples if h in canary else b_samples
                ok = res is not None and res.ok and bool(res.value)
                if ok and res is not None:
                    for metric, values in (res.value or {}).items():
                        side.setdefault(metric, []).extend(values)
                else:
                    why = (res.error if res is not None else None) or "no samples"
                    errors.append(f"{h}: {why}")
                    if h in canary:
                        lost[h] = f"{suite}: {why}"
                rel = (self.steps[h].to_release if h in canary else old)
                runs.append((h, rel, res.value if ok and res is not None else None,
                             "done" if ok else "error"))
            record_benchmarks(self.history, runs, kind=suite, name=f"rollout-{self.rid}",
                              started_at=started, ended_at=ended, rollout_id=self.rid)
            if lost and (c_samples or b_samples):  # others were measured: theirs to answer
                for h, why in lost.items():
                    crashed[h] = f"{crashed[h]}; {why}" if h in crashed else why
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
        return combine(verdicts), "; ".join(reasons), detail, crashed
