"""The canary judge: is the canary worse than its baseline by more than we allow? (pure)

Every metric is judged as a *non-inferiority* test on a confidence interval of its shift, never as
"no significant difference" (Kayenta's failure mode: a noisy, underpowered comparison reads as a
pass). With the shift oriented so that positive means worse and `a` the allowed degradation:

    pass          the interval lies entirely below `a` (and is not wider than `4a`)
    fail          the interval lies entirely above `a`
    inconclusive  anything else, including too few samples
    nodata        one side has no samples; a critical metric with no data fails the canary

How each kind of metric gets its interval (confidence 95% two-sided by default):

    location  per-request samples (latency): Hodges-Lehmann shift of log(canary) - log(baseline)
              with its distribution-free CI (the Mann-Whitney inversion), as a relative change.
    tail      p95/p99 of the same samples: bootstrap CI on the quantile ratio. Mann-Whitney is a
              location test and misses a change only in the tail (Kayenta #780); this catches it.
    rate      per-request 0/1 outcomes (errors): Newcombe's hybrid score CI on the difference of
              proportions with an absolute allowance, plus Fisher's exact p. Zero-heavy counts are
              where rank tests go blind (Kayenta #426); proportions are not.
    run       run-level values (throughput, TFLOP/s, a per-run p99): Welch t CI on the log ratio.

The overall verdict: a critical metric that fails (or has no data) fails the canary; a
non-critical failure or any inconclusive metric makes it inconclusive (pause for a human); it
passes when every judged metric passes; "nodata" when nothing could be judged at all.

Deterministic: the bootstrap uses a seeded generator. No I/O, no clock.

The package, bottom up: `model` (specs, settings, verdicts), `stats` (the intervals), `rule` (the
non-inferiority decision), `utilization` (the GPU-utilization check), `specs` (defaults by name,
the metric flag), `metrics` (one metric by kind), `verdict` (the canary's verdict, the baseline).
"""

from fleet.domain.judge.metrics import (
    judge_counts,
    judge_location,
    judge_metric,
    judge_rate,
    judge_run,
    judge_tail,
)
from fleet.domain.judge.model import (
    MIN_SAMPLES,
    MIN_WIDTH,
    TAIL_EVENTS,
    VERDICTS,
    WIDTH_FACTOR,
    BaselineSource,
    Direction,
    JudgeConfig,
    Judgement,
    Kind,
    MetricSpec,
    MetricVerdict,
    Verdict,
)
from fleet.domain.judge.rule import decide_shift
from fleet.domain.judge.specs import default_spec, parse_metric_flag
from fleet.domain.judge.stats import (
    bootstrap_quantile_ratio,
    hodges_lehmann,
    newcombe_interval,
    welch_log_interval,
)
from fleet.domain.judge.utilization import GPU_UTIL, UTILIZATION, is_utilization
from fleet.domain.judge.verdict import choose_baseline, judge, overall

__all__ = [
    "GPU_UTIL", "MIN_SAMPLES", "MIN_WIDTH", "TAIL_EVENTS", "UTILIZATION", "VERDICTS",
    "WIDTH_FACTOR", "BaselineSource", "Direction", "JudgeConfig", "Judgement", "Kind",
    "MetricSpec", "MetricVerdict", "Verdict", "bootstrap_quantile_ratio", "choose_baseline",
    "decide_shift", "default_spec", "hodges_lehmann", "is_utilization", "judge", "judge_counts",
    "judge_location", "judge_metric", "judge_rate", "judge_run", "judge_tail",
    "newcombe_interval", "overall", "parse_metric_flag", "welch_log_interval",
]
