"""What the lab's model server serves: two models under steady background traffic, exported
the way Triton and vLLM export it, and the `slow-serving` fault that slows one of them.

`SERVING_CODE` runs on the host inside `model_server.py` (fleet/lab/perf.py; stdlib only, and
the Python of both Debian 12 and Rocky 9). A thread "serves" `serving.rate` requests per second
(host state key, default 200) of each model in `SERVING_MODELS`; `GET /metrics` exports them:

    Triton  nv_inference_request_success / _failure, nv_inference_count,
            nv_inference_request_duration_us, nv_inference_queue_duration_us (counters),
            nv_inference_request_summary_us / nv_inference_queue_summary_us (summaries over the
            last SUMMARY_WINDOW_S, as `--metrics-config summary_latencies=true`),
            nv_model_load_duration_secs, nv_cache_num_hits_per_model / _misses_ (resnet50 only:
            the response cache is configured per model); labels model, version
    vLLM    vllm:e2e_request_latency_seconds, vllm:request_queue_time_seconds,
            vllm:time_to_first_token_seconds (histograms); label model_name

Each request's latency is drawn (log-normal around the model's median), not slept: like the
lab benchmark's kernel times, the figures follow the release's speed (`perf_factor`, a
`slow-bench` or `cpu-fallback` fault, a `slow-serving` fault) and not how busy the lab
machine is, so a statistical gate on them holds on a loaded CI machine. The traffic does not
mark the fake GPUs busy (the benchmark gates' utilization figures stay the benchmark's own).
While NVML cannot initialise (driver not loaded) every request fails.
"""

from __future__ import annotations

import re

SERVING_CODE = r'''
import bisect, collections, math

# name, median latency in ms at speed 1.0, log-normal sigma, response-cache hit share (None:
# no cache metrics), model load seconds
SERVING_MODELS = (("resnet50", 12.0, 0.08, 0.7, 2.4), ("llama-3-8b", 420.0, 0.10, None, 9.5))
BUCKETS_S = tuple(round(0.0005 * 1.2 ** i, 7) for i in range(60))  # 0.5 ms .. ~28 s
SUMMARY_WINDOW_S = 10.0
SUMMARY_QUANTILES = (0.5, 0.9, 0.95, 0.99)

def serving_speed(model, cfg, state):
    # The speed `model` serves at (1.0: the baseline): the release's perf factor, or the CPU's
    # on a cpu-fallback, divided by a slow-serving factor set for this model (or *) on the
    # loaded driver's branch (or any).
    cpu = cpu_fallback(cfg, state)
    speed = cpu if cpu is not None else max(cfg["factor"], 1e-3)
    branch = (cfg.get("driver") or "").split(".")[0]
    for key in ("serving.slow." + model, "serving.slow.*"):
        want, _, factor = state.get(key, "").partition(":")
        if want and (want == "any" or want == branch):
            speed /= max(float(factor or "1"), 1e-3)
    return speed

class _Histogram:
    def __init__(self):
        self.counts = [0] * (len(BUCKETS_S) + 1)
        self.sum, self.count = 0.0, 0

    def observe(self, v):
        self.counts[bisect.bisect_left(BUCKETS_S, v)] += 1
        self.sum += v
        self.count += 1

    def lines(self, name, labels):
        out, total = [], 0
        for bound, n in zip(BUCKETS_S + (None,), self.counts):
            total += n
            le = "+Inf" if bound is None else repr(bound)
            out.append('%s_bucket{%s,le="%s"} %d' % (name, labels, le, total))
        out.append("%s_sum{%s} %r" % (name, labels, self.sum))
        out.append("%s_count{%s} %d" % (name, labels, self.count))
        return out

class _Model:
    def __init__(self, name, median_ms, sigma, hit, load_s, rng):
        self.name, self.median, self.sigma, self.hit = name, median_ms / 1000.0, sigma, hit
        self.load_s = load_s * rng.uniform(0.95, 1.05)
        self.ok = self.fail = self.hits = self.misses = 0
        self.lat_us = self.queue_us = 0.0
        self.e2e, self.queue, self.ttft = _Histogram(), _Histogram(), _Histogram()
        self.recent = collections.deque()  # (time, latency s, queue s) of the summary window

class Serving:
    # The background traffic of every model and its metrics (one instance per server).
    def __init__(self, clock=time.time, seed=None):
        self.clock, self.rng = clock, random.Random(seed)
        self.lock = threading.Lock()
        self.last = clock()
        self.debt = 0.0
        self.nvml_at, self.nvml_ok = -1e9, False
        self.models = [_Model(*m, rng=self.rng) for m in SERVING_MODELS]

    def _healthy(self, now):
        if now - self.nvml_at >= 1.0:
            self.nvml_at, self.nvml_ok = now, nvml_error() is None
        return self.nvml_ok

    def tick(self, now=None):
        # Serve the requests due since the last tick (a late tick catches up, up to 5 s).
        now = self.clock() if now is None else now
        state = _kv(STATE_FILE)
        cfg = perf_config()
        rate = float(state.get("serving.rate", "200"))
        with self.lock:
            self.debt = min(self.debt + rate * max(0.0, now - self.last), rate * 5)
            self.last = now
            n = int(self.debt)
            self.debt -= n
            healthy = self._healthy(now)
            for m in self.models:
                speed = serving_speed(m.name, cfg, state)
                for _ in range(n):
                    self._serve(m, speed, healthy, now)
                while m.recent and m.recent[0][0] < now - SUMMARY_WINDOW_S:
                    m.recent.popleft()

    def _serve(self, m, speed, healthy, now):
        if not healthy:
            m.fail += 1
            return
        lat = m.median / speed * self.rng.lognormvariate(0.0, m.sigma)
        queue = lat * 0.08 * self.rng.lognormvariate(0.0, 0.25)
        m.ok += 1
        m.lat_us += (lat + queue) * 1e6
        m.queue_us += queue * 1e6
        m.e2e.observe(lat + queue)
        m.queue.observe(queue)
        m.ttft.observe(queue + lat * 0.25)
        m.recent.append((now, lat + queue, queue))
        if m.hit is not None:
            if self.rng.random() < m.hit:
                m.hits += 1
            else:
                m.misses += 1

    def render(self):
        # serve what is due first, so the counters are current at the scrape, as a real
        # server's are: the traffic thread may stall on a loaded machine and catch up later,
        # which made short rates swing by a third (the live gate's throughput per GPU)
        try:
            self.tick()
        except Exception:  # a bad state value: export what was served
            pass
        out = []
        def family(name, kind, text):
            out.append("# HELP %s %s" % (name, text))
            out.append("# TYPE %s %s" % (name, kind))
        with self.lock:
            tl = ['model="%s",version="1"' % m.name for m in self.models]
            vl = ['model_name="%s"' % m.name for m in self.models]
            for name, attr, text in (
                    ("nv_inference_request_success", "ok", "Successful requests"),
                    ("nv_inference_request_failure", "fail", "Failed requests"),
                    ("nv_inference_count", "ok", "Inferences performed"),
                    ("nv_inference_request_duration_us", "lat_us", "Request time (us)"),
                    ("nv_inference_queue_duration_us", "queue_us", "Queue time (us)")):
                family(name, "counter", text)
                out += ["%s{%s} %r" % (name, l, float(getattr(m, attr)))
                        for m, l in zip(self.models, tl)]
            for name, idx, text in (("nv_inference_request_summary_us", 1, "Request time"),
                                    ("nv_inference_queue_summary_us", 2, "Queue time")):
                family(name, "summary", text + " (us), over the last %gs" % SUMMARY_WINDOW_S)
                for m, l in zip(self.models, tl):
                    vals = sorted(r[idx] * 1e6 for r in m.recent)
                    for q in SUMMARY_QUANTILES:
                        v = vals[min(len(vals) - 1, int(q * len(vals)))] if vals else "NaN"
                        out.append('%s{%s,quantile="%g"} %s' % (name, l, q, v))
                    out.append("%s_sum{%s} %r" % (name, l, sum(vals)))
                    out.append("%s_count{%s} %d" % (name, l, len(vals)))
            family("nv_model_load_duration_secs", "gauge", "Model load time (s)")
            out += ["nv_model_load_duration_secs{%s} %r" % (l, m.load_s)
                    for m, l in zip(self.models, tl)]
            cached = [(m, l) for m, l in zip(self.models, tl) if m.hit is not None]
            family("nv_cache_num_hits_per_model", "counter", "Response cache hits")
            out += ["nv_cache_num_hits_per_model{%s} %d" % (l, m.hits) for m, l in cached]
            family("nv_cache_num_misses_per_model", "counter", "Response cache misses")
            out += ["nv_cache_num_misses_per_model{%s} %d" % (l, m.misses) for m, l in cached]
            for name, attr, text in (
                    ("vllm:e2e_request_latency_seconds", "e2e", "End-to-end request latency"),
                    ("vllm:request_queue_time_seconds", "queue", "Time in the waiting queue"),
                    ("vllm:time_to_first_token_seconds", "ttft", "Time to first token")):
                family(name, "histogram", text + " (s)")
                for m, l in zip(self.models, vl):
                    out += getattr(m, attr).lines(name, l)
        return "\n".join(out) + "\n"

    def run(self, period=0.25):
        while True:
            time.sleep(period)
            try:
                self.tick()
            except Exception:  # a bad state value: serve on, the next tick reads it again
                pass
'''

MODEL_NAMES = ("resnet50", "llama-3-8b")
_MODEL_RE = re.compile(r"^(\*|[A-Za-z0-9][A-Za-z0-9_.-]{0,62})$")

# the `slow-serving` fault (registered in fleet/lab/faults.py): params with defaults, help
SLOW_SERVING: tuple[dict[str, str], str] = (
    {"branch": "0", "model": "*", "factor": "1.6"},
    "the model server serves `model` (*: every model; the lab's are "
    + ", ".join(MODEL_NAMES)
    + ") `factor` times slower, latency and queue time, while the loaded driver is of `branch` "
    "(0: any)",
)


def check_model(value: str) -> str | None:
    """Why `value` is not a model name for `slow-serving`, or None."""
    if not _MODEL_RE.match(value):
        return f"model must be * or a model name (letters, digits, _.-): {value!r}"
    return None


def slow_serving_state(params: dict[str, str]) -> dict[str, str]:
    """The host state key `serving_speed` in `SERVING_CODE` reads."""
    branch = str(int(params["branch"]))
    return {f"serving.slow.{params['model']}":
            f"{'any' if branch == '0' else branch}:{params['factor']}"}
