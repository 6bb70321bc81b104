"""The four troubleshooting patterns as rules (pure): evidence in, findings out.

1. **KV / memory saturation with a growing queue** — KV-cache usage at or near full for a real
   share of the run while requests wait (and the queue grows, or preemptions happen).
2. **Acceptable mean, high P99 from length mixing / head-of-line blocking** — TTFT P99 far above
   the median while short requests share the engine with much longer ones, and the short ones'
   own P99 is blown up (they wait behind long prefills).
3. **Throughput flat while load rises** — across load levels of the same series the throughput
   stops growing; classified client-bound (the load generator fell behind), batch-limited
   (the running batch never fills to the offered concurrency), GPU-bound (KV full or GPU
   busy), CPU-bound (GPU idle-ish) or unknown (no GPU samples).
4. **Degradation over a long run** — latency or GPU memory rising over time, with the slope's
   95 % confidence interval above zero and a material change over the span. A trend is judged
   only over a window of at least ``MIN_TREND_SPAN_S`` (:func:`trend_too_short`); every display
   of a slope says "too short to judge (needs ≥ 10 min of data, have 29 s)" below that.

No finding without evidence: each rule needs its inputs and says nothing when they are missing.
``diagnose`` returns the findings that fired; an empty list means "no issue found".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import pandas as pd

from analysis.buckets import assign_buckets, bucket_labels
from analysis.latency import KV_FULL, Trend, trend, trend_too_short, trend_window_need

#: Rule 1: the share of engine samples with KV usage ≥ KV_FULL that counts as saturated.
KV_SATURATED_SHARE = 0.10
#: Rule 2: P99 / P50 of TTFT at or above this is a heavy tail.
TAIL_RATIO = 3.0
#: Rule 2: the longest bucket's median input must be this many times the shortest's.
LENGTH_MIX_RATIO = 4.0
#: Rule 3: a load step at least this big (×) with throughput growing less than FLAT_GAIN.
LOAD_STEP = 1.5
FLAT_GAIN = 0.10
#: Rule 3: a batch that never holds this share of the offered concurrency is batch-limited.
BATCH_FILL = 0.5
#: Rule 3: GPU utilisation (0..1) at or above which a plateau is GPU-bound, below which CPU-bound.
GPU_BUSY = 0.85
GPU_IDLE = 0.60
#: Rule 4: latency must change by this fraction of its start level, memory by this of total.
LATENCY_DRIFT = 0.20
MEMORY_DRIFT = 0.02


@dataclass(frozen=True)
class Finding:
    rule: int
    title: str
    summary: str
    evidence: dict[str, str]
    actions: list[str]
    chart: str  # which evidence chart the view draws: kv_queue | buckets | load | trend


@dataclass(frozen=True)
class DiagnosisInput:
    """What the rules look at; every piece optional (a rule without its inputs stays silent).

    - ``engine``: engine samples of the run (target, ts, metric, value): kv_cache_usage,
      requests_waiting, preemptions_total.
    - ``ttft_p50_ms``, ``ttft_mean_ms``, ``ttft_p99_ms``: the run's TTFT (successful requests).
    - ``buckets``: per input-length bucket (in order): bucket, n, median_input (tokens, optional),
      p50_ms, p99_ms of TTFT.
    - ``load``: one row per load level of the series: load, throughput (tokens/s),
      client_bound (bool), gpu_util (0..1), kv_max (0..1), running_max (most requests in the
      running batch), concurrency (closed-loop levels) — NaN when unknown.
    - ``latency_trend``: TTFT (or E2E) over time; ``memory_trend``: GPU memory used (bytes) over
      time, with ``memory_total_bytes``.
    """

    engine: pd.DataFrame | None = None
    ttft_p50_ms: float | None = None
    ttft_mean_ms: float | None = None
    ttft_p99_ms: float | None = None
    buckets: pd.DataFrame | None = None
    load: pd.DataFrame | None = None
    latency_trend: Trend | None = None
    latency_label: str = "TTFT P50"
    memory_trend: Trend | None = None
    memory_total_bytes: float | None = None
    notes: dict[str, str] = field(default_factory=dict)


def _ok(value: float | None) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _metric(engine: pd.DataFrame, metric: str) -> pd.DataFrame:
    part = engine[engine["metric"] == metric]
    if part.empty:
        return part
    # several targets: sum queues, take the fullest KV, per timestamp
    how = "max" if metric == "kv_cache_usage" else "sum"
    g = part.groupby("ts", sort=True)["value"]
    return (g.max() if how == "max" else g.sum()).reset_index()


# --- rule 1 --------------------------------------------------------------------------------------


def kv_saturation(inp: DiagnosisInput) -> Finding | None:
    if inp.engine is None or inp.engine.empty:
        return None
    kv = _metric(inp.engine, "kv_cache_usage")
    waiting = _metric(inp.engine, "requests_waiting")
    if kv.empty or waiting.empty:
        return None
    full_share = float((kv["value"] >= KV_FULL).mean())
    if full_share < KV_SATURATED_SHARE:
        return None
    w = waiting["value"].to_numpy(dtype="float64")
    if float(np.nanmax(w)) <= 0:
        return None
    half = max(1, w.size // 2)
    first, second = float(np.nanmean(w[:half])), float(np.nanmean(w[half:] if w.size > 1 else w))
    pre = _metric(inp.engine, "preemptions_total")["value"].to_numpy(dtype="float64")
    d = np.diff(pre) if pre.size > 1 else np.zeros(0)
    preemptions = float(np.where(d < 0, pre[1:], d).sum()) if d.size else 0.0
    growing = second > first
    if not growing and preemptions <= 0:
        return None
    return Finding(
        rule=1,
        title="KV cache saturated while the queue grows",
        summary=(
            f"KV-cache usage was at or above {KV_FULL:.0%} in {full_share:.0%} of the engine's "
            f"samples while up to {float(np.nanmax(w)):,.0f} requests waited"
            + (f" and {preemptions:,.0f} were preempted" if preemptions > 0 else "")
            + ": new requests wait for KV blocks, so TTFT is queueing, not compute."
        ),
        evidence={
            "peak KV usage": f"{float(kv['value'].max()):.0%}",
            f"samples with KV ≥ {KV_FULL:.0%}": f"{full_share:.0%} of {len(kv):,}",
            "waiting requests (peak)": f"{float(np.nanmax(w)):,.0f}",
            "waiting, first half → second half (mean)": f"{first:,.1f} → {second:,.1f}",
            "preemptions": f"{preemptions:,.0f}",
        },
        actions=[
            "Give the KV cache more memory (kv_memory_fraction: vLLM --gpu-memory-utilization, "
            "SGLang --mem-fraction-static).",
            "Lower max_batch_size or max_model_len so admitted requests fit.",
            "Quantise the KV cache (e.g. FP8) or enable prefix caching for shared prompts.",
            "Add replicas / tensor parallelism, or lower the offered load.",
        ],
        chart="kv_queue",
    )


# --- rule 2 --------------------------------------------------------------------------------------


def tail_from_length_mixing(inp: DiagnosisInput) -> Finding | None:
    p50, p99, mean = inp.ttft_p50_ms, inp.ttft_p99_ms, inp.ttft_mean_ms
    if not (_ok(p50) and _ok(p99)) or inp.buckets is None or len(inp.buckets) < 2:
        return None
    assert p50 is not None and p99 is not None
    if p50 <= 0 or p99 / p50 < TAIL_RATIO:
        return None
    b = inp.buckets[inp.buckets["n"] > 0].reset_index(drop=True)
    if len(b) < 2:
        return None
    short, long_ = b.iloc[0], b.iloc[-1]
    if "median_input" in b and _ok(short["median_input"]) and short["median_input"] > 0:
        spread = float(long_["median_input"]) / float(short["median_input"])
        if spread < LENGTH_MIX_RATIO:
            return None
    short_ratio = (
        float(short["p99_ms"]) / float(short["p50_ms"]) if float(short["p50_ms"]) > 0 else 0.0
    )
    if short_ratio < TAIL_RATIO:
        return None
    long_share = float(b["n"].iloc[1:].sum()) / float(b["n"].sum())
    mean_text = f"{mean:,.0f} ms" if _ok(mean) else "—"
    return Finding(
        rule=2,
        title="High P99 TTFT from length mixing (head-of-line blocking)",
        summary=(
            f"TTFT P99 is {p99 / p50:.1f}× its median ({p99:,.0f} vs {p50:,.0f} ms; mean "
            f"{mean_text}). Even the shortest bucket ({short['bucket']}) has a P99 "
            f"{short_ratio:.1f}× its median: short requests wait behind long prefills."
        ),
        evidence={
            "TTFT mean / P50 / P99": f"{mean_text} / {p50:,.0f} ms / {p99:,.0f} ms",
            f"shortest bucket {short['bucket']} P50 → P99": (
                f"{float(short['p50_ms']):,.0f} → {float(short['p99_ms']):,.0f} ms "
                f"(n={int(short['n']):,})"
            ),
            f"longest bucket {long_['bucket']} P99": f"{float(long_['p99_ms']):,.0f} ms",
            "requests above the shortest bucket": f"{long_share:.0%}",
        },
        actions=[
            "Enable chunked prefill and cap max_batched_tokens so a long prompt cannot stall "
            "the batch (vLLM --max-num-batched-tokens, SGLang --chunked-prefill-size).",
            "Route by input length: a separate pool (or priority) for long prompts.",
            "Consider prefill/decode disaggregation for long-context traffic.",
            "Set the SLO per length (length-conditioned TTFT) so long prompts are judged fairly.",
        ],
        chart="buckets",
    )


# --- rule 3 --------------------------------------------------------------------------------------


def throughput_plateau(inp: DiagnosisInput) -> Finding | None:
    if inp.load is None or len(inp.load) < 2:
        return None
    pts = inp.load.dropna(subset=["load", "throughput"]).sort_values("load").reset_index(drop=True)
    if len(pts) < 2:
        return None
    for i in range(1, len(pts)):
        a, b = pts.iloc[i - 1], pts.iloc[i]
        if a["load"] <= 0 or a["throughput"] <= 0:
            continue
        step = float(b["load"]) / float(a["load"])
        gain = float(b["throughput"]) / float(a["throughput"]) - 1.0
        if step >= LOAD_STEP and gain < FLAT_GAIN:
            break
    else:
        return None
    util = b.get("gpu_util", math.nan)
    kv = b.get("kv_max", math.nan)
    running = b.get("running_max", math.nan)
    conc = b.get("concurrency", math.nan)
    client = bool(b.get("client_bound", False)) if _ok(b.get("client_bound")) else False
    if client:
        kind, why = "client-bound", "the load generator itself fell behind (flagged on the run)"
        actions = [
            "Run the load generator with more worker processes or on a bigger host.",
            "Shard connection pools; re-measure before tuning the server.",
        ]
    elif _ok(running) and _ok(conc) and running < BATCH_FILL * float(conc):
        kind = "batch-limited"
        why = (
            f"at most {running:,.0f} requests ran at once while {float(conc):g} were "
            "offered: the engine's batch limit caps throughput and the rest queue"
        )
        actions = [
            "Raise max_batch_size (vLLM --max-num-seqs, SGLang --max-running-requests, "
            "llama.cpp -np) if the KV cache has room (see peak KV usage).",
            "Or add replicas behind a load balancer to serve the queued requests.",
        ]
    elif (_ok(util) and util >= GPU_BUSY) or (_ok(kv) and kv >= KV_FULL):
        kind = "GPU-bound"
        why = (
            f"the GPU is saturated (utilisation {util:.0%})"
            if _ok(util) and util >= GPU_BUSY
            else f"the KV cache is full ({kv:.0%})"
        )
        actions = [
            "This is the engine's capacity on this GPU: add GPUs/replicas or use a smaller or "
            "quantised model.",
            "Raise kv_memory_fraction if the KV cache is the limit; else accept the plateau as "
            "SLO capacity.",
        ]
    elif _ok(util) and util < GPU_IDLE:
        kind, why = "CPU-bound", f"the GPU is only {util:.0%} busy: the scheduler or tokenizer is"
        actions = [
            "Look at the engine's CPU: scheduling overhead, tokenisation, detokenisation "
            "(vLLM: async output processing, more API server processes).",
            "Raise max_batch_size if the batch never fills (check running requests).",
        ]
    else:
        kind = "bound by an unknown resource"
        why = "there are no GPU samples to tell GPU from CPU (collect them with --gpu or --dcgm)"
        actions = [
            "Collect GPU samples (servescope watch --gpu, or bench --dcgm URL) and re-run.",
            "Check running vs max_batch_size: a full batch points at the engine's limit.",
        ]
    return Finding(
        rule=3,
        title=f"Throughput flat while load rises ({kind})",
        summary=(
            f"Load went from {float(a['load']):g} to {float(b['load']):g} ({step:.1f}×) but "
            f"throughput changed by {gain:+.0%}: {why}."
        ),
        evidence={
            "load step": f"{float(a['load']):g} → {float(b['load']):g}",
            "throughput": f"{float(a['throughput']):,.0f} → {float(b['throughput']):,.0f} tok/s",
            "GPU utilisation at the plateau": f"{util:.0%}" if _ok(util) else "unknown",
            "peak KV usage at the plateau": f"{kv:.0%}" if _ok(kv) else "unknown",
            "most requests running at the plateau": f"{running:,.0f}"
            if _ok(running)
            else "unknown",
            "client-bound": "yes" if client else "no",
        },
        actions=actions,
        chart="load",
    )


# --- rule 4 --------------------------------------------------------------------------------------


def degradation(inp: DiagnosisInput) -> Finding | None:
    evidence: dict[str, str] = {}
    parts: list[str] = []
    lt = inp.latency_trend
    if lt is not None and not trend_too_short(lt) and lt.rising and lt.start_value > 0:
        rel = lt.change / lt.start_value
        if rel >= LATENCY_DRIFT:
            s, lo, hi = lt.per_hour()
            evidence[f"{inp.latency_label} slope"] = (
                f"{s:+,.1f} ms/h (95 % CI {lo:+,.1f} … {hi:+,.1f}, n={lt.n})"
            )
            evidence[f"{inp.latency_label} over the run"] = (
                f"{lt.start_value:,.0f} → {lt.end_value:,.0f} ms ({rel:+.0%})"
            )
            parts.append(f"{inp.latency_label} rose {rel:+.0%}")
    mt, total = inp.memory_trend, inp.memory_total_bytes
    if mt is not None and not trend_too_short(mt) and mt.rising and _ok(total) and total:
        rel = mt.change / total
        if rel >= MEMORY_DRIFT:
            s, lo, hi = (v / 2**20 for v in mt.per_hour())
            evidence["GPU memory slope"] = f"{s:+,.0f} MiB/h (95 % CI {lo:+,.0f} … {hi:+,.0f})"
            evidence["GPU memory over the run"] = (
                f"{mt.change / 2**20:+,.0f} MiB ({rel:+.1%} of total)"
            )
            parts.append(f"GPU memory grew {rel:+.1%} of total")
    if not parts:
        return None
    span = max(t.span_s for t in (lt, mt) if t is not None)
    return Finding(
        rule=4,
        title="Degradation over the run",
        summary=(
            " and ".join(parts) + f" over {span / 60:,.0f} min, with the slope's 95 % confidence "
            "interval above zero: something accumulates (memory, fragmentation, cache, queue)."
        ),
        evidence=evidence,
        actions=[
            "Compare with the Memory page: GPU memory rising while KV usage is flat is a leak.",
            "Check the queue: a slowly growing waiting count means offered load > capacity.",
            "Restart the engine periodically as a stop-gap; report the leak upstream "
            "with this run.",
        ],
        chart="trend",
    )


RULES = (kv_saturation, tail_from_length_mixing, throughput_plateau, degradation)


def diagnose(inp: DiagnosisInput) -> list[Finding]:
    """Every rule that fires, in rule order; [] means "no issue found"."""
    return [f for rule in RULES if (f := rule(inp)) is not None]


def missing_inputs(inp: DiagnosisInput) -> list[str]:
    """What the rules could not look at (said next to "no issue found")."""
    out = []
    if inp.engine is None or inp.engine.empty:
        out.append("engine samples (rule 1): the run has no /metrics samples")
    if inp.buckets is None or inp.ttft_p99_ms is None:
        out.append("per-request TTFT (rule 2)")
    if inp.load is None or len(inp.load) < 2:
        out.append("other load levels of this series (rule 3)")
    trends = [t for t in (inp.latency_trend, inp.memory_trend) if t is not None]
    if not trends:
        out.append("enough time windows for a trend (rule 4)")
    elif all(trend_too_short(t) for t in trends):
        longest = max(t.span_s for t in trends)
        out.append(f"a long enough window for a trend (rule 4): {trend_window_need(longest)}")
    return out


# --- the rules' inputs, from what the Latency page reads ---------------------------------------


def _number(value: object) -> float | None:
    """``value`` as a float; None for None, pandas' NA and NaN."""
    if value is None or value is pd.NA:
        return None
    number = float(value)  # type: ignore[arg-type]
    return None if math.isnan(number) else number


def heatmap_ttft(heatmap: pd.DataFrame) -> dict[str, float | None]:
    """The whole selection's TTFT from ``ttft_heatmap``'s row with bucket −1 and window −1 (the
    keys of ``ttft_summary``: ttft_mean_ms, ttft_p50_ms, ttft_p99_ms); {} when it has none."""
    if heatmap.empty:
        return {}
    whole = heatmap[(heatmap["bucket"] < 0) & (heatmap["window"] < 0)]
    if whole.empty:
        return {}
    row = whole.iloc[0]
    return {f"ttft_{key}": _number(row[key]) for key in ("mean_ms", "p50_ms", "p99_ms")}


def input_buckets(
    ttft_by_input: pd.DataFrame, edges: Sequence[int], sample: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Rule 2's buckets: TTFT per input-length bucket (``bucket_latency`` rows of ttft_ms, by
    input) as bucket (label), n, p50_ms, p99_ms, plus median_input (tokens) from the successful
    requests of ``sample`` when there is one."""
    labels = bucket_labels(edges)
    ttft = ttft_by_input[ttft_by_input["metric"] == "ttft_ms"]
    buckets = pd.DataFrame(
        {
            "bucket": [labels[int(b)] for b in ttft["bucket"]],
            "n": ttft["n"].to_numpy(),
            "p50_ms": ttft["p50_ms"].to_numpy(),
            "p99_ms": ttft["p99_ms"].to_numpy(),
        }
    )
    if sample is not None and not sample.empty and not buckets.empty:
        ok = sample[(sample["status"] == "ok") & sample["input_tokens"].notna()]
        medians = ok.groupby(assign_buckets(ok["input_tokens"], edges), observed=True)[
            "input_tokens"
        ].median()
        buckets["median_input"] = [float(medians.get(b, float("nan"))) for b in buckets["bucket"]]
    return buckets


def ttft_over_time(heatmap: pd.DataFrame | None, *, t0: float, window_s: float) -> pd.DataFrame:
    """TTFT P50 per time window (columns window_start, ttft_p50_ms) from ``ttft_heatmap``'s
    per-window rows (bucket −1); windows are ``window_s`` long from ``t0``. Empty without a
    heatmap."""
    if heatmap is None or heatmap.empty:
        return pd.DataFrame(
            {"window_start": pd.Series(dtype="float64"), "ttft_p50_ms": pd.Series(dtype="float64")}
        )
    per_window = heatmap[(heatmap["bucket"] < 0) & (heatmap["window"] >= 0)]
    return pd.DataFrame(
        {
            "window_start": t0 + per_window["window"].astype("float64") * window_s,
            "ttft_p50_ms": per_window["p50_ms"].astype("float64"),
        }
    ).reset_index(drop=True)


LOAD_COLUMNS: Final = (
    "run_id",
    "load",
    "concurrency",
    "throughput",
    "output_throughput",
    "client_bound",
    "gpu_util",
    "kv_max",
    "running_max",
)


def load_points(levels: pd.DataFrame, states: pd.DataFrame) -> pd.DataFrame:
    """Rule 3's load levels: the series' ``load_levels`` beside each run's ``run_states`` (same
    runs, same order): run_id, load, concurrency, throughput (= output_throughput, tokens/s),
    client_bound, gpu_util, kv_max, running_max."""
    if levels.empty:
        return pd.DataFrame(columns=list(LOAD_COLUMNS))
    return pd.DataFrame(
        {
            "run_id": levels["run_id"],
            "load": levels["load"],
            "concurrency": pd.to_numeric(levels["concurrency"]).astype("float64"),
            "throughput": levels["output_throughput"],
            "output_throughput": levels["output_throughput"],
            "client_bound": levels["client_bound"].fillna(False).astype(bool),
            "gpu_util": states["gpu_util"].to_numpy(),
            "kv_max": states["kv_max"].to_numpy(),
            "running_max": states["running_max"].to_numpy(),
        }
    )


def diagnosis_input(
    *,
    ttft: Mapping[str, object],
    buckets: pd.DataFrame,
    timeline: pd.DataFrame,
    engine: pd.DataFrame | None,
    load: pd.DataFrame,
) -> DiagnosisInput:
    """What the four rules look at: the selection's TTFT (``ttft``: ttft_p50_ms, ttft_mean_ms,
    ttft_p99_ms, as :func:`heatmap_ttft` or ``ttft_summary`` give them), its input buckets
    (:func:`input_buckets`), TTFT P50 over time (:func:`ttft_over_time`, whose trend rule 4
    judges), the engine series and the series' load levels (:func:`load_points`)."""
    return DiagnosisInput(
        engine=engine if engine is not None and not engine.empty else None,
        ttft_p50_ms=_number(ttft.get("ttft_p50_ms")),
        ttft_mean_ms=_number(ttft.get("ttft_mean_ms")),
        ttft_p99_ms=_number(ttft.get("ttft_p99_ms")),
        buckets=buckets if not buckets.empty else None,
        load=load,
        latency_trend=trend(
            timeline["window_start"].to_numpy(), timeline["ttft_p50_ms"].to_numpy()
        ),
    )
