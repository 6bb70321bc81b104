"""Investigate a window of production traffic: before vs during, and the four troubleshooting
patterns judged on window evidence (pure: numbers and DataFrames in, findings out).

Production traffic has no per-request records: everything here comes from the watched engines'
cumulative histograms, counters and gauges over two spans of equal length,

- **during** = [from, to], the window under investigation;
- **before** = [from − (to − from), from], the same length immediately before it.

A span's percentiles are those of its summed bucket increases over the whole span (one window:
``histogram_quantile(q, sum by (le) (increase(x_bucket[span])))``, ``analysis.histogram_windows``),
never an average of shorter windows', each with the precision its buckets allow.

The patterns, with ``analysis.diagnose``'s thresholds (:class:`~analysis.diagnose.Finding`):

1. **Memory full and the queue building**: KV-cache usage ≥ ``KV_FULL`` in at least
   ``KV_SATURATED_SHARE`` of the during span's samples, requests waiting, and the queue growing
   (mean waiting during > before, or second half of the span > first half), or standing (at
   least :data:`STANDING_QUEUE` waiting on average with at least :data:`QUEUE_DOMINANT` of TTFT
   spent queueing), or preemptions during it.
2. **Mean fine, P99 high**: TTFT P99 / P50 ≥ ``TAIL_RATIO`` during, with a wide prompt-length
   mix (P90 / P10 or P99 / P50 of the prompt-length histogram ≥ ``LENGTH_MIX_RATIO``) or bursts
   (the request count per sub-window has a coefficient of variation ≥ :data:`BURST_CV` and a
   variance ≥ :data:`BURST_DISPERSION` × its mean — twice what Poisson arrivals give — over at
   least :data:`MIN_BURST_WINDOWS` sub-windows).
3. **Throughput flat as load grows**: request rate, or mean waiting requests (before floored at
   :data:`WAITING_FLOOR`), ≥ ``LOAD_STEP`` × from before to during while generated tokens/s
   grew less than ``FLAT_GAIN``.
4. **Degradation over a long run**: P99 TTFT or P99 E2E per sub-window, or GPU memory, rising
   over the during span (``analysis.latency.trend``: the slope's 95 % interval above zero, a
   change ≥ ``LATENCY_DRIFT`` of the start level / ``MEMORY_DRIFT`` of the GPU's memory); a
   span shorter than ``MIN_TREND_SPAN_S`` is "too short to judge".

No finding without its inputs: a rule whose numbers are missing says nothing, and
:func:`missing_inputs` says what could not be judged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import pandas as pd

from analysis import length_mix
from analysis.diagnose import (
    FLAT_GAIN,
    GPU_BUSY,
    GPU_IDLE,
    KV_SATURATED_SHARE,
    LATENCY_DRIFT,
    LENGTH_MIX_RATIO,
    LOAD_STEP,
    MEMORY_DRIFT,
    TAIL_RATIO,
    Finding,
)
from analysis.latency import (
    KV_FULL,
    Trend,
    counter_increase_between,
    duration_text,
    gauge_over_targets,
    trend,
    trend_too_short,
)

#: Rule 2: bursts — the coefficient of variation of the request count per sub-window …
BURST_CV: Final = 0.5
#: … and its variance / mean (index of dispersion; 1 for Poisson arrivals) at or above these.
BURST_DISPERSION: Final = 2.0
#: Rule 2: the fewest sub-windows with a count that burstiness is judged on.
MIN_BURST_WINDOWS: Final = 4
#: Rule 1: a standing queue — at least this many requests waiting on average through the
#: window while at least QUEUE_DOMINANT of TTFT is queueing — counts as the queue building even
#: when it is no longer growing (the middle of a saturation, its queue draining).
STANDING_QUEUE: Final = 1.0
QUEUE_DOMINANT: Final = 0.5
#: Rule 3: the mean waiting requests before are floored at this when the step is taken (a queue
#: growing from 0 to 0.3 is no load step; from 0 to 12 is 12×).
WAITING_FLOOR: Final = 1.0
#: The percentiles compared before vs during.
QUANTILES: Final = (0.5, 0.9, 0.99)
#: How "before" is chosen, in words (the page and docs/incident.md say it).
BEFORE_RULE: Final = "the same length immediately before the window"


def before_span(start: float, end: float) -> tuple[float, float]:
    """The span compared with [start, end]: the same length immediately before ``start``."""
    return start - (end - start), start


def _ok(value: float | None) -> bool:
    return value is not None and not math.isnan(value)


def _number(value: object) -> float | None:
    if value is None or value is pd.NA:
        return None
    number = float(value)  # type: ignore[arg-type]
    return None if math.isnan(number) else number


# --- one span ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpanLatency:
    """One histogram over a whole span: how many requests, their mean and percentiles
    (seconds, or tokens for length histograms), each percentile with its precision phrase."""

    count: float
    mean: float | None
    quantiles: dict[str, float]  # "p50" → value
    precision: dict[str, str]  # "p50" → "P50 inside the 0.1–0.25 s bucket"

    def get(self, q: str) -> float | None:
        return _number(self.quantiles.get(q))

    @classmethod
    def from_window(cls, row: Mapping[str, object]) -> SpanLatency | None:
        """From a ``summed_histogram_windows`` row covering the span; None without requests."""
        count = _number(row.get("count"))
        if count is None or count <= 0:
            return None
        qs = [str(k) for k in row if _is_qcol(str(k))]
        return cls(
            count=count,
            mean=_number(row.get("mean")),
            quantiles={q: float(row[q]) for q in qs if _number(row[q]) is not None},  # type: ignore[arg-type]
            precision={q: str(row.get(f"{q}_precision") or "") for q in qs},
        )


def _is_qcol(name: str) -> bool:
    return name.startswith("p") and name[1:].replace("_", "").isdigit()


@dataclass(frozen=True)
class SpanSummary:
    """What one span (before or during) showed. Every figure None when not measured."""

    start: float
    end: float
    latency: dict[str, SpanLatency] = field(default_factory=dict)  # histogram → its figures
    finished: float | None = None
    failed: float | None = None
    request_rate: float | None = None  # finished requests per second
    error_rate: float | None = None  # failed / finished
    request_source: str = ""  # where the request rate comes from
    prompt_buckets: tuple[tuple[float, float], ...] = ()  # (le, cumulative count) over the span
    running_mean: float | None = None
    running_max: float | None = None
    waiting_mean: float | None = None
    waiting_max: float | None = None
    waiting_first_half: float | None = None
    waiting_second_half: float | None = None
    kv_mean: float | None = None
    kv_max: float | None = None
    kv_full_share: float | None = None  # share of samples with KV usage ≥ KV_FULL
    kv_samples: int = 0
    preemptions: float | None = None  # increase of preemptions_total over the span
    generation_tps: float | None = None  # generated tokens per second
    gpu_mem_used_max_bytes: float | None = None
    gpu_mem_total_bytes: float | None = None
    gpu_util_mean: float | None = None  # 0..1

    @property
    def duration_s(self) -> float:
        return self.end - self.start

    def ttft_share(self, hist: str) -> float | None:
        """Mean ``hist`` (queue_time_seconds or prefill_time_seconds) / mean TTFT over the
        span (Σ_sum / Σ_count of each); None when either is missing."""
        part, ttft = self.latency.get(hist), self.latency.get("ttft_seconds")
        if part is None or ttft is None or not _ok(part.mean) or not _ok(ttft.mean):
            return None
        assert part.mean is not None and ttft.mean is not None
        return part.mean / ttft.mean if ttft.mean > 0 else None

    @property
    def prompt_lengths(self) -> length_mix.LengthDist:
        return length_mix.from_buckets(self.prompt_buckets)


def _in_span(df: pd.DataFrame, start: float, end: float) -> pd.DataFrame:
    """The rows in (start, end], as a window."""
    if df.empty:
        return df
    return df[(df["ts"] > start) & (df["ts"] <= end)]


def _gauge_stats(state: pd.DataFrame, metric: str, how: str, start: float, end: float) -> pd.Series:
    """A gauge summed (``sum``) or maxed (``max``) over targets per instant, in (start, end]
    (as a window: the sample at ``start`` belongs to the span before)."""
    if state.empty:
        return pd.Series(dtype="float64")
    gauge = gauge_over_targets(state, metric, how)
    gauge = gauge[(gauge["ts"] > start) & (gauge["ts"] <= end)].dropna()
    return pd.Series(gauge["value"].to_numpy(dtype="float64"), index=gauge["ts"].to_numpy())


def span_summary(
    *,
    start: float,
    end: float,
    windows: Mapping[str, pd.DataFrame],
    requests: pd.DataFrame,
    state: pd.DataFrame,
    gpus: pd.DataFrame,
    prompt_buckets: Sequence[tuple[float, float]] = (),
) -> SpanSummary:
    """The figures of [start, end].

    ``windows``: histogram → ``summed_histogram_windows`` with ONE window covering the span;
    ``requests``: ``request_rate_windows`` with that one window (may be empty: then the request
    rate is the E2E histogram's count over the span, said in ``request_source``); ``state``:
    engine samples (target, ts, metric, value), may start before ``start`` (the counters'
    baseline); ``gpus``: GPU samples; ``prompt_buckets``: the prompt-length histogram's bucket
    increases over the span."""
    latency: dict[str, SpanLatency] = {}
    for hist, df in windows.items():
        if df.empty:
            continue
        figures = SpanLatency.from_window({str(k): v for k, v in df.iloc[0].items()})
        if figures is not None:
            latency[hist] = figures
    duration = end - start
    finished = failed = rate = error = None
    source = ""
    if not requests.empty and _number(requests["request_rate"].iloc[0]) is not None:
        finished = float(requests["finished"].iloc[0])
        failed = float(requests["failed"].iloc[0])
        rate = finished / duration
        error = failed / finished if finished > 0 else None
        source = "finished-request counters"
    elif "e2e_seconds" in windows and not windows["e2e_seconds"].empty:
        count = _number(windows["e2e_seconds"]["count"].iloc[0])
        if count is not None and int(windows["e2e_seconds"]["targets"].iloc[0]) > 0:
            finished, rate = count, count / duration
            source = "E2E histogram count (no error counters)"
    kv = _gauge_stats(state, "kv_cache_usage", "max", start, end)
    waiting = _gauge_stats(state, "requests_waiting", "sum", start, end)
    running = _gauge_stats(state, "requests_running", "sum", start, end)
    mid = start + duration / 2
    first = waiting[waiting.index < mid]
    second = waiting[waiting.index >= mid]
    inside = _in_span(state, start, end)
    has = set(inside["metric"]) if not inside.empty else set()
    preemptions = (
        _number(counter_increase_between(state, "preemptions_total", start, end))
        if "preemptions_total" in has
        else None
    )
    tokens = (
        _number(counter_increase_between(state, "generation_tokens_total", start, end))
        if "generation_tokens_total" in has
        else None
    )
    g = _in_span(gpus, start, end)
    mem_max = mem_total = util = None
    if not g.empty:
        used = pd.to_numeric(g["mem_used_bytes"], errors="coerce")
        total = pd.to_numeric(g["mem_total_bytes"], errors="coerce")
        per_gpu = pd.DataFrame({"k": g["host"].astype(str) + "#" + g["gpu_index"].astype(str)})
        per_gpu["used"], per_gpu["total"] = used.to_numpy(), total.to_numpy()
        peaks = per_gpu.groupby("k")[["used", "total"]].max()
        mem_max = _number(peaks["used"].sum(min_count=1))
        mem_total = _number(peaks["total"].sum(min_count=1))
        util = _number(pd.to_numeric(g["util_gpu"], errors="coerce").mean())
    return SpanSummary(
        start=start,
        end=end,
        latency=latency,
        finished=finished,
        failed=failed,
        request_rate=rate,
        error_rate=error,
        request_source=source,
        prompt_buckets=tuple((float(le), float(c)) for le, c in prompt_buckets),
        running_mean=_number(running.mean()) if running.size else None,
        running_max=_number(running.max()) if running.size else None,
        waiting_mean=_number(waiting.mean()) if waiting.size else None,
        waiting_max=_number(waiting.max()) if waiting.size else None,
        waiting_first_half=_number(first.mean()) if first.size else None,
        waiting_second_half=_number(second.mean()) if second.size else None,
        kv_mean=_number(kv.mean()) if kv.size else None,
        kv_max=_number(kv.max()) if kv.size else None,
        kv_full_share=float((kv >= KV_FULL).mean()) if kv.size else None,
        kv_samples=int(kv.size),
        preemptions=preemptions,
        generation_tps=tokens / duration if tokens is not None and duration > 0 else None,
        gpu_mem_used_max_bytes=mem_max,
        gpu_mem_total_bytes=mem_total,
        gpu_util_mean=util,
    )


# --- sub-window evidence -----------------------------------------------------------------------


@dataclass(frozen=True)
class Burstiness:
    """How uneven the request count per sub-window is."""

    windows: int  # sub-windows counted
    mean: float  # requests per sub-window
    cv: float  # standard deviation / mean
    dispersion: float  # variance / mean (1 for Poisson arrivals)

    @property
    def bursty(self) -> bool:
        return self.cv >= BURST_CV and self.dispersion >= BURST_DISPERSION


def burstiness(counts: Sequence[float]) -> Burstiness | None:
    """The spread of ``counts`` (requests per sub-window, NaN = no scrape, skipped); None with
    fewer than ``MIN_BURST_WINDOWS`` sub-windows or no requests."""
    arr = np.asarray([c for c in counts if c is not None], dtype="float64")
    arr = arr[~np.isnan(arr)]
    if arr.size < MIN_BURST_WINDOWS:
        return None
    mean = float(arr.mean())
    if mean <= 0:
        return None
    var = float(arr.var(ddof=1))
    return Burstiness(int(arr.size), mean, math.sqrt(var) / mean, var / mean)


def window_trend(windows: pd.DataFrame, column: str = "p99", scale: float = 1000.0) -> Trend | None:
    """The trend of ``column`` × ``scale`` over the windows' ends (windows with requests only):
    P99 in ms by default. None with fewer than three such windows."""
    if windows.empty or column not in windows:
        return None
    ok = windows[(windows["count"] > 0) & windows[column].notna()]
    if len(ok) < 3:
        return None
    return trend(ok["window_end"].to_numpy(dtype="float64"), ok[column].to_numpy() * scale)


@dataclass(frozen=True)
class MemoryTrend:
    """The GPU whose memory rose most over the span, relative to its total."""

    gpu: str
    trend: Trend
    total_bytes: float


def memory_trend(gpus: pd.DataFrame) -> MemoryTrend | None:
    """Per GPU (host, index) the trend of memory used; the one with the largest fitted rise
    relative to its total (the first when none rises). None without three samples of one."""
    if gpus.empty:
        return None
    best: MemoryTrend | None = None
    for (host, index), part in gpus.groupby(["host", "gpu_index"], sort=True):
        used = pd.to_numeric(part["mem_used_bytes"], errors="coerce")
        total = _number(pd.to_numeric(part["mem_total_bytes"], errors="coerce").max())
        ok = used.notna()
        if ok.sum() < 3 or total is None or total <= 0:
            continue
        t = trend(part.loc[ok, "ts"].to_numpy(dtype="float64"), used[ok].to_numpy())
        if t is None:
            continue
        cand = MemoryTrend(f"{host} GPU {index}", t, total)
        if best is None or cand.trend.change / total > best.trend.change / best.total_bytes:
            best = cand
    return best


@dataclass(frozen=True)
class IncidentEvidence:
    """What the four window rules look at; every piece optional."""

    during: SpanSummary
    before: SpanSummary | None = None
    request_counts: tuple[float, ...] = ()  # requests per sub-window during (NaN: no scrape)
    sub_window_s: float | None = None
    ttft_p99_trend: Trend | None = None  # ms over the during span's sub-windows
    e2e_p99_trend: Trend | None = None
    memory: MemoryTrend | None = None


# --- formatting of evidence --------------------------------------------------------------------


def fmt_seconds(value: float | None) -> str:
    """A latency for evidence text: "50 ms" below 1 s, "2.35 s" below 10 s, "12.5 s" above;
    "—" when unknown."""
    if not _ok(value):
        return "—"
    assert value is not None
    if value < 1:
        return f"{value * 1000:,.0f} ms"
    return f"{value:,.2f} s" if value < 10 else f"{value:,.1f} s"


def _tokens(value: float) -> str:
    return f"{value:,.0f}".replace(",", " ")


def _ratio(a: float | None, b: float | None) -> float | None:
    if not (_ok(a) and _ok(b)) or b is None or b <= 0:
        return None
    assert a is not None
    return a / b


# --- rule 1 --------------------------------------------------------------------------------------


def memory_full_queue(ev: IncidentEvidence) -> Finding | None:
    """Pattern 1 on window evidence (module docstring)."""
    d = ev.during
    if d.kv_full_share is None or d.waiting_max is None or d.waiting_mean is None:
        return None
    if d.kv_full_share < KV_SATURATED_SHARE or d.waiting_max <= 0:
        return None
    before_wait = ev.before.waiting_mean if ev.before is not None else None
    from_before = before_wait is not None and d.waiting_mean > before_wait
    inside = (
        d.waiting_first_half is not None
        and d.waiting_second_half is not None
        and d.waiting_second_half > d.waiting_first_half
    )
    preempted = d.preemptions is not None and d.preemptions > 0
    queue_share = d.ttft_share("queue_time_seconds")
    standing = (
        d.waiting_mean >= STANDING_QUEUE
        and queue_share is not None
        and queue_share >= QUEUE_DOMINANT
    )
    if not (from_before or inside or standing or preempted):
        return None
    how = []
    if from_before:
        how.append(f"the queue grew from {before_wait:,.1f} to {d.waiting_mean:,.1f} on average")
    elif inside:
        how.append(
            f"the queue grew from {d.waiting_first_half:,.1f} to {d.waiting_second_half:,.1f} "
            "within the window"
        )
    elif standing:
        assert queue_share is not None
        how.append(
            f"a queue of {d.waiting_mean:,.1f} requests on average stood through the window "
            f"({queue_share:.0%} of TTFT spent queueing)"
        )
    if preempted:
        how.append(f"{d.preemptions:,.0f} requests were preempted")
    evidence = {
        "peak KV usage": f"{d.kv_max:.0%}" if d.kv_max is not None else "—",
        f"samples with KV ≥ {KV_FULL:.0%}": f"{d.kv_full_share:.0%} of {d.kv_samples:,}",
        "waiting requests, mean before → during": (
            f"{before_wait:,.1f} → {d.waiting_mean:,.1f}"
            if before_wait is not None
            else f"— → {d.waiting_mean:,.1f}"
        ),
        "waiting, first half → second half (mean)": (
            f"{d.waiting_first_half:,.1f} → {d.waiting_second_half:,.1f}"
            if d.waiting_first_half is not None and d.waiting_second_half is not None
            else "—"
        ),
        "waiting requests (peak)": f"{d.waiting_max:,.0f}",
        "preemptions during": f"{d.preemptions:,.0f}" if d.preemptions is not None else "—",
    }
    if queue_share is not None:
        evidence["share of TTFT spent queueing"] = f"{queue_share:.0%}"
    return Finding(
        rule=1,
        title="Memory full and the queue building",
        summary=(
            f"KV-cache usage was at or above {KV_FULL:.0%} in {d.kv_full_share:.0%} of the "
            f"window's samples while up to {d.waiting_max:,.0f} requests waited; "
            + " and ".join(how)
            + ": new requests wait for KV blocks, so TTFT is queueing, not compute."
        ),
        evidence=evidence,
        actions=[
            "Give the KV cache more memory (vLLM --gpu-memory-utilization, SGLang "
            "--mem-fraction-static) or quantise it (FP8 KV cache).",
            "Lower max_num_seqs / max_model_len so the admitted requests fit in KV memory.",
            "Add a replica (or tensor parallelism) and route part of the traffic to it; shed or "
            "rate-limit load at the gateway meanwhile.",
            "Enable prefix caching when prompts share a long prefix (system prompts, RAG context).",
        ],
        chart="state",
    )


# --- rule 2 --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LengthSpread:
    p10: float
    p50: float
    p90: float
    p99: float
    n: float

    @property
    def ratio(self) -> float:
        """The wider of P90 / P10 and P99 / P50 (inf when a lower one is 0)."""
        a = self.p90 / self.p10 if self.p10 > 0 else math.inf
        b = self.p99 / self.p50 if self.p50 > 0 else math.inf
        return max(a, b)


def length_spread(buckets: Sequence[tuple[float, float]]) -> LengthSpread | None:
    """P10, P50, P90, P99 of a length histogram's bucket increases; None when empty."""
    d = length_mix.from_buckets(buckets)
    if d.total <= 0:
        return None
    q = [d.quantile(x) for x in (0.1, 0.5, 0.9, 0.99)]
    if any(math.isnan(v) for v in q):
        return None
    return LengthSpread(q[0], q[1], q[2], q[3], d.total)


def tail_from_mix_or_bursts(ev: IncidentEvidence) -> Finding | None:
    """Pattern 2 on window evidence (module docstring)."""
    ttft = ev.during.latency.get("ttft_seconds")
    if ttft is None:
        return None
    p50, p99 = ttft.get("p50"), ttft.get("p99")
    if p50 is None or p99 is None or p50 <= 0 or p99 / p50 < TAIL_RATIO:
        return None
    spread = length_spread(ev.during.prompt_buckets)
    wide = spread is not None and spread.ratio >= LENGTH_MIX_RATIO
    burst = burstiness(ev.request_counts)
    bursty = burst is not None and burst.bursty
    if not (wide or bursty):
        return None
    causes = []
    evidence = {
        "TTFT mean / P50 / P99 during": (
            f"{fmt_seconds(ttft.mean)} / {fmt_seconds(p50)} / {fmt_seconds(p99)} "
            f"(P99 = {p99 / p50:.1f}× P50)"
        ),
        "TTFT P50 precision": ttft.precision.get("p50", ""),
        "TTFT P99 precision": ttft.precision.get("p99", ""),
    }
    if spread is not None:
        evidence["prompt length P10 / P50 / P90 / P99"] = (
            f"{_tokens(spread.p10)} / {_tokens(spread.p50)} / {_tokens(spread.p90)} / "
            f"{_tokens(spread.p99)} tokens (n = {_tokens(spread.n)})"
        )
        evidence["prompt-length spread (max of P90/P10, P99/P50)"] = (
            f"{spread.ratio:.1f}× (wide at ≥ {LENGTH_MIX_RATIO:g}×)"
        )
    if wide:
        assert spread is not None
        causes.append(
            f"prompt lengths span {spread.ratio:.1f}× (P90 {_tokens(spread.p90)} vs P10 "
            f"{_tokens(spread.p10)} tokens): short requests wait behind long prefills"
        )
    if burst is not None:
        evidence["requests per sub-window (CV, variance/mean)"] = (
            f"mean {burst.mean:,.1f} over {burst.windows} × {duration_text(ev.sub_window_s or 0)}"
            f", CV {burst.cv:.2f}, variance/mean {burst.dispersion:.1f} (bursty at CV ≥ "
            f"{BURST_CV:g} and variance/mean ≥ {BURST_DISPERSION:g})"
        )
    if bursty:
        assert burst is not None
        causes.append(
            f"requests arrive in bursts (CV {burst.cv:.2f} across sub-windows, "
            f"{burst.dispersion:.1f}× the variance of Poisson arrivals): each burst queues "
            "behind itself"
        )
    actions = []
    if wide:
        actions += [
            "Enable chunked prefill and cap the tokens per step so a long prompt cannot stall "
            "the batch (vLLM --max-num-batched-tokens, SGLang --chunked-prefill-size).",
            "Route by prompt length: a separate pool (or priority) for long prompts.",
            "Judge TTFT per length (a length-conditioned SLO profile).",
        ]
    if bursty:
        actions += [
            "Smooth the bursts at the gateway (a queue with admission control, client-side "
            "jitter/backoff for batch jobs).",
            "Keep headroom for the peak sub-window, not the mean rate (autoscale on waiting "
            "requests).",
        ]
    return Finding(
        rule=2,
        title="Mean fine, P99 high: "
        + " and ".join(x for x, on in (("length mixing", wide), ("bursts", bursty)) if on),
        summary=(
            f"TTFT P99 is {p99 / p50:.1f}× its median during the window ({fmt_seconds(p99)} vs "
            f"{fmt_seconds(p50)}; mean {fmt_seconds(ttft.mean)}): " + "; ".join(causes) + "."
        ),
        evidence=evidence,
        actions=actions,
        chart="lengths" if wide else "latency",
    )


# --- rule 3 --------------------------------------------------------------------------------------


def flat_throughput(ev: IncidentEvidence) -> Finding | None:
    """Pattern 3 on window evidence (module docstring)."""
    b, d = ev.before, ev.during
    if b is None or b.generation_tps is None or d.generation_tps is None:
        return None
    if b.generation_tps <= 0:
        return None
    steps: dict[str, tuple[float, str]] = {}
    rate_step = _ratio(d.request_rate, b.request_rate)
    if rate_step is not None:
        steps["request rate"] = (
            rate_step,
            f"{b.request_rate:,.2f} → {d.request_rate:,.2f} req/s",
        )
    if b.waiting_mean is not None and d.waiting_mean is not None:
        steps["waiting requests"] = (
            d.waiting_mean / max(b.waiting_mean, WAITING_FLOOR),
            f"{b.waiting_mean:,.1f} → {d.waiting_mean:,.1f} (mean)",
        )
    if not steps:
        return None
    what, (step, text) = max(steps.items(), key=lambda kv: kv[1][0])
    gain = d.generation_tps / b.generation_tps - 1.0
    if step < LOAD_STEP or gain >= FLAT_GAIN:
        return None
    util, kv = d.gpu_util_mean, d.kv_max
    if (util is not None and util >= GPU_BUSY) or (kv is not None and kv >= KV_FULL):
        kind = "GPU-bound"
        why = (
            f"the GPU is busy ({util:.0%} utilisation)"
            if util is not None and util >= GPU_BUSY
            else f"the KV cache is full ({kv:.0%})"
        )
        actions = [
            "This is the replica's capacity: add replicas/GPUs, or use a smaller or quantised "
            "model.",
            "Raise the KV memory fraction when the KV cache is the limit.",
        ]
    elif util is not None and util < GPU_IDLE:
        kind = "CPU-bound"
        why = f"the GPU is only {util:.0%} busy: the scheduler, tokeniser or API server is"
        actions = [
            "Look at the engine's CPU: scheduling, tokenisation, detokenisation (vLLM: more API "
            "server processes, async output processing).",
            "Raise max_num_seqs if the running batch never fills.",
        ]
    else:
        kind = "bound by an unknown resource"
        why = (
            "no GPU samples tell GPU from CPU (watch with --gpu or --dcgm)"
            if util is None
            else f"the GPU is {util:.0%} busy, between {GPU_IDLE:.0%} and {GPU_BUSY:.0%}"
        )
        actions = [
            "Collect GPU samples (servescope watch --gpu or --dcgm) to tell GPU- from CPU-bound.",
            "Check running vs max_num_seqs: a full batch points at the engine's limit.",
        ]
    evidence = {
        f"{what} before → during": f"{text} ({step:.1f}×, a step at ≥ {LOAD_STEP:g}×)",
    }
    for other, (s, t) in steps.items():
        if other != what:
            evidence[f"{other} before → during"] = f"{t} ({s:.1f}×)"
    evidence["generated tokens/s before → during"] = (
        f"{b.generation_tps:,.0f} → {d.generation_tps:,.0f} ({gain:+.0%}; flat below "
        f"{FLAT_GAIN:+.0%})"
    )
    evidence["GPU utilisation during"] = f"{util:.0%}" if util is not None else "unknown"
    evidence["peak KV usage during"] = f"{kv:.0%}" if kv is not None else "unknown"
    return Finding(
        rule=3,
        title=f"Throughput flat as load grows ({kind})",
        summary=(
            f"The {what} rose {step:.1f}× from before to during the window but generated "
            f"tokens/s changed by {gain:+.0%}: {why}."
        ),
        evidence=evidence,
        actions=actions,
        chart="state",
    )


# --- rule 4 --------------------------------------------------------------------------------------


def degradation_over_window(ev: IncidentEvidence) -> Finding | None:
    """Pattern 4 on window evidence (module docstring)."""
    evidence: dict[str, str] = {}
    parts: list[str] = []
    spans: list[float] = []
    for label, t in (("TTFT P99", ev.ttft_p99_trend), ("E2E P99", ev.e2e_p99_trend)):
        if t is None or trend_too_short(t) or not t.rising or t.start_value <= 0:
            continue
        rel = t.change / t.start_value
        if rel < LATENCY_DRIFT:
            continue
        s, lo, hi = t.per_hour()
        evidence[f"{label} slope"] = f"{s:+,.1f} ms/h (95 % CI {lo:+,.1f} … {hi:+,.1f}, n={t.n})"
        evidence[f"{label} over the window"] = (
            f"{t.start_value:,.0f} → {t.end_value:,.0f} ms ({rel:+.0%}; material at "
            f"≥ {LATENCY_DRIFT:+.0%})"
        )
        parts.append(f"{label} rose {rel:+.0%}")
        spans.append(t.span_s)
    m = ev.memory
    if m is not None and not trend_too_short(m.trend) and m.trend.rising:
        rel = m.trend.change / m.total_bytes
        if rel >= MEMORY_DRIFT:
            s, lo, hi = (v / 2**20 for v in m.trend.per_hour())
            evidence[f"GPU memory slope ({m.gpu})"] = (
                f"{s:+,.0f} MiB/h (95 % CI {lo:+,.0f} … {hi:+,.0f})"
            )
            evidence["GPU memory over the window"] = (
                f"{m.trend.change / 2**20:+,.0f} MiB ({rel:+.1%} of total; material at "
                f"≥ {MEMORY_DRIFT:.0%})"
            )
            parts.append(f"GPU memory grew {rel:+.1%} of total")
            spans.append(m.trend.span_s)
    if not parts:
        return None
    return Finding(
        rule=4,
        title="Degradation over the window",
        summary=(
            " and ".join(parts) + f" over {duration_text(max(spans))}, with the slope's 95 % "
            "confidence interval above zero: something accumulates (memory, fragmentation, "
            "cache, queue)."
        ),
        evidence=evidence,
        actions=[
            "GPU memory rising while KV usage is flat is a leak: compare with the Memory page.",
            "A slowly growing queue means the offered load exceeds capacity: add capacity.",
            "Restart the engine on a schedule as a stop-gap; report the leak upstream.",
        ],
        chart="latency",
    )


RULES: Final = (
    memory_full_queue,
    tail_from_mix_or_bursts,
    flat_throughput,
    degradation_over_window,
)


def judge(ev: IncidentEvidence) -> list[Finding]:
    """Every window rule that fires, in rule order; [] means "no pattern found"."""
    return [f for rule in RULES if (f := rule(ev)) is not None]


def missing_inputs(ev: IncidentEvidence) -> list[str]:
    """What the rules could not look at (said next to "no pattern found")."""
    d, out = ev.during, []
    if d.kv_full_share is None or d.waiting_mean is None:
        out.append("KV-cache usage and waiting requests during the window (pattern 1)")
    if "ttft_seconds" not in d.latency:
        out.append("a TTFT histogram with requests during the window (pattern 2)")
    elif length_spread(d.prompt_buckets) is None and burstiness(ev.request_counts) is None:
        out.append(
            "a prompt-length histogram, or request counts in at least "
            f"{MIN_BURST_WINDOWS} sub-windows (pattern 2)"
        )
    if ev.before is None or ev.before.generation_tps is None or d.generation_tps is None:
        out.append("generated tokens before and during the window (pattern 3)")
    elif ev.before.request_rate is None and ev.before.waiting_mean is None:
        out.append("request rate or waiting requests before the window (pattern 3)")
    trends = [t for t in (ev.ttft_p99_trend, ev.e2e_p99_trend) if t is not None]
    if ev.memory is not None:
        trends.append(ev.memory.trend)
    if not trends:
        out.append(
            "at least three sub-windows with requests or GPU samples for a trend (pattern 4)"
        )
    elif all(trend_too_short(t) for t in trends):
        longest = max(trends, key=lambda t: t.span_s)
        out.append(f"a trend over the window (pattern 4): {trend_too_short(longest)}")
    return out


# --- before vs during --------------------------------------------------------------------------

#: The latency histograms compared, with their names on the page.
LATENCY_LABELS: Final = {
    "ttft_seconds": "TTFT",
    "e2e_seconds": "E2E latency",
    "queue_time_seconds": "queue time",
    "prefill_time_seconds": "prefill time",
    "itl_seconds": "inter-token latency",
}
COMPARISON_COLUMNS: Final = ["section", "measure", "before", "during", "change", "note"]


def _change(a: float | None, b: float | None, *, points: bool = False) -> str:
    """During vs before: ×ratio, or ± points for shares; "—" when either is unknown."""
    if a is None or b is None:
        return "—"
    if points:
        return f"{(b - a) * 100:+.0f} pts"
    if a == 0:
        return "new" if b > 0 else "="
    return f"×{b / a:.3g}"


def _share(x: float | None) -> str:
    return f"{x:.0%}" if x is not None else "—"


def _num(x: float | None, fmt: str = ",.1f", unit: str = "") -> str:
    return "—" if x is None else f"{x:{fmt}}{unit}"


def comparison(before: SpanSummary, during: SpanSummary) -> pd.DataFrame:
    """Before vs during, one row per measure: section, measure, before, during (formatted),
    change (×ratio or ±points), note (the during percentile's precision phrase, or where a
    figure comes from)."""
    rows: list[tuple[str, str, str, str, str, str]] = []
    for hist, label in LATENCY_LABELS.items():
        a, b = before.latency.get(hist), during.latency.get(hist)
        if a is None and b is None:
            continue
        for q in ("p50", "p90", "p99"):
            va = a.get(q) if a is not None else None
            vb = b.get(q) if b is not None else None
            note = "; ".join(
                f"{name}: {span.precision.get(q) or 'no requests'}"
                for name, span in (("during", b), ("before", a))
                if span is not None
            )
            rows.append(
                ("latency", f"{label} {q.upper()}", fmt_seconds(va), fmt_seconds(vb),
                 _change(va, vb), note)
            )  # fmt: skip
    for hist, label in (("queue_time_seconds", "queueing"), ("prefill_time_seconds", "prefill")):
        sa, sb = before.ttft_share(hist), during.ttft_share(hist)
        if sa is None and sb is None:
            continue
        rows.append(
            ("TTFT split", f"share of TTFT in {label} (mean / mean TTFT)", _share(sa), _share(sb),
             _change(sa, sb, points=True), "from the histograms' _sum / _count increases")
        )  # fmt: skip
    rows.append(
        ("requests", "request rate", _num(before.request_rate, ",.2f", " req/s"),
         _num(during.request_rate, ",.2f", " req/s"),
         _change(before.request_rate, during.request_rate),
         during.request_source or before.request_source or "no request counters")
    )  # fmt: skip
    rows.append(
        ("requests", "error rate", _share(before.error_rate), _share(during.error_rate),
         _change(before.error_rate, during.error_rate, points=True),
         f"{_num(during.failed, ',.0f')} failed of {_num(during.finished, ',.0f')} during"
         if during.error_rate is not None else "no failure counters")
    )  # fmt: skip
    la, lb = before.prompt_lengths, during.prompt_lengths
    if la.total > 0 or lb.total > 0:
        dist = length_mix.distance(la, lb)
        rows.append(
            ("prompt length", "distribution", length_mix.describe(la), length_mix.describe(lb),
             "—" if math.isnan(dist) else f"KS distance {dist:.2f}",
             f"material at ≥ {length_mix.MATERIAL_DISTANCE:g}" if not math.isnan(dist) else "")
        )  # fmt: skip
    for label, a_val, b_val, fmt, unit in (
        ("running requests (mean)", before.running_mean, during.running_mean, ",.1f", ""),
        ("running requests (peak)", before.running_max, during.running_max, ",.0f", ""),
        ("waiting requests (mean)", before.waiting_mean, during.waiting_mean, ",.1f", ""),
        ("waiting requests (peak)", before.waiting_max, during.waiting_max, ",.0f", ""),
        ("preemptions", before.preemptions, during.preemptions, ",.0f", ""),
        ("generated tokens/s", before.generation_tps, during.generation_tps, ",.0f", ""),
    ):
        rows.append(
            ("engine", label, _num(a_val, fmt, unit), _num(b_val, fmt, unit),
             _change(a_val, b_val), "")
        )  # fmt: skip
    rows.append(
        ("engine", "KV-cache usage (peak)", _share(before.kv_max), _share(during.kv_max),
         _change(before.kv_max, during.kv_max, points=True), "")
    )  # fmt: skip
    rows.append(
        ("engine", f"samples with KV ≥ {KV_FULL:.0%}", _share(before.kv_full_share),
         _share(during.kv_full_share),
         _change(before.kv_full_share, during.kv_full_share, points=True),
         f"of {during.kv_samples:,} samples during")
    )  # fmt: skip
    gib = 2**30
    ma = before.gpu_mem_used_max_bytes / gib if before.gpu_mem_used_max_bytes else None
    mb = during.gpu_mem_used_max_bytes / gib if during.gpu_mem_used_max_bytes else None
    total = during.gpu_mem_total_bytes or before.gpu_mem_total_bytes
    rows.append(
        ("GPU", "memory used (peak, all GPUs)", _num(ma, ",.1f", " GiB"), _num(mb, ",.1f", " GiB"),
         _change(ma, mb), f"of {total / gib:,.0f} GiB" if total else "no GPU samples")
    )  # fmt: skip
    rows.append(
        ("GPU", "utilisation (mean)", _share(before.gpu_util_mean), _share(during.gpu_util_mean),
         _change(before.gpu_util_mean, during.gpu_util_mean, points=True), "")
    )  # fmt: skip
    return pd.DataFrame.from_records(rows, columns=COMPARISON_COLUMNS)
