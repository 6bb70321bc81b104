"""Engine /metrics → normalised metrics (DESIGN §6, FORMATS.md §A1–§A5, §A8).

Each engine's names map onto one vocabulary (``NORMALISED``): gauges and cumulative counters,
plus label-free histogram series (``<hist>_bucket:<le>``, ``<hist>_sum``, ``<hist>_count``) from
which ``analysis.engine_series`` derives per-window percentiles. Counters stay cumulative here;
rates are computed at query time (resets handled there).

Series of one metric that differ by labels are combined: data-parallel replicas (vLLM
``engine``, SGLang ``dp_rank``) and finish reasons are summed; tensor/pipeline-parallel ranks of
one scheduler (SGLang ``tp_rank``, ``pp_rank``, ``moe_ep_rank``) report the same state, so the
largest of them is taken first; ratios (KV usage, hit rates) are averaged over replicas.

The engine is detected from the family prefixes (``detect_engine``). The reference engine
(``servescope_sim_info``) uses vLLM's names but is reported as ``sim``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from collectors.prometheus_text import Exposition, Sample

Agg = Literal["sum", "mean", "max"]

#: Normalised metrics and what they mean (docs/live.md repeats this table).
NORMALISED: dict[str, str] = {
    "requests_running": "requests in the running batch (gauge)",
    "requests_waiting": "requests queued, waiting to be scheduled (gauge)",
    "requests_preempted": "requests currently preempted / retracted / paused (gauge)",
    "requests_swapped": "vLLM V0: requests swapped to CPU (gauge)",
    "requests_max": "the batch's capacity in requests, where exported (gauge)",
    "kv_cache_usage": "KV-cache usage, 0..1 (gauge)",
    "kv_cache_tokens": "tokens held in the KV cache (gauge; llama.cpp legacy)",
    "prefix_cache_hit_rate": "engine-reported prefix-cache hit rate, 0..1 (gauge)",
    "generation_throughput": "engine-reported generation tokens/s (gauge, engine's own window)",
    "batch_size_avg": "average busy slots per decode call (llama.cpp)",
    "gpu_memory_used_bytes": "GPU memory the engine reports using (bytes)",
    "preemptions_total": "preemptions / retractions since start (counter)",
    "prompt_tokens_total": "prompt (prefill) tokens processed (counter)",
    "prompt_tokens_cached_total": "prompt tokens served from the prefix cache (counter)",
    "generation_tokens_total": "generated tokens (counter)",
    "prefix_cache_hits_total": "prefix-cache hits, tokens (blocks in vLLM 0.8) (counter)",
    "prefix_cache_queries_total": "prefix-cache queries, tokens (blocks in vLLM 0.8) (counter)",
    "requests_finished_total": "requests finished, every finish reason (counter)",
    "decode_calls_total": "llama_decode() calls (counter; llama.cpp)",
    "prompt_seconds_total": "seconds spent in prompt processing (counter; llama.cpp)",
    "generation_seconds_total": "seconds spent generating (counter; llama.cpp)",
}

#: Histograms (seconds) derived per window; ``<name>_bucket:<le>``, ``_sum``, ``_count``.
HISTOGRAMS: dict[str, str] = {
    "ttft_seconds": "time to first token",
    "itl_seconds": "inter-token latency",
    "tpot_seconds": "per-request time per output token",
    "e2e_seconds": "end-to-end request latency",
    "queue_time_seconds": "time waiting in the queue",
    "prefill_time_seconds": "time in prefill",
    "decode_time_seconds": "time in decode",
    "inference_time_seconds": "time running (prefill + decode)",
}

#: Length histograms (tokens, not seconds) of finished requests, stored the same way; the
#: production length mix and the mean lengths of ``plan --lengths metrics:<target>``.
LENGTH_HISTOGRAMS: dict[str, str] = {
    "prompt_length_tokens": "prompt length of each finished request (tokens)",
    "output_length_tokens": "generated length of each finished request (tokens)",
}

COUNTERS = frozenset(n for n in NORMALISED if n.endswith("_total"))

#: Labels whose series are replicas of one scheduler's state (take the max, not the sum).
RANK_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank", "attn_tp_rank"})

ENGINES = ("vllm", "sim", "sglang", "tgi", "llamacpp", "triton-trtllm", "trtllm-serve")

#: Family prefixes that identify each engine, in detection order (FORMATS.md §A8).
_PREFIXES: tuple[tuple[str, str], ...] = (
    ("vllm:", "vllm"),
    ("sglang:", "sglang"),
    ("llamacpp:", "llamacpp"),
    ("nv_trt_llm_", "triton-trtllm"),
    ("trtllm_", "trtllm-serve"),
    ("tgi_", "tgi"),
    ("nv_inference_", "triton-trtllm"),
)
#: Families that belong to an engine's own metrics (kept in the raw store by default).
ENGINE_RAW_PREFIXES = (
    "vllm:",
    "sglang:",
    "llamacpp:",
    "nv_trt_llm_",
    "nv_llm_",
    "nv_inference_",
    "nv_gpu_",
    "trtllm_",
    "tgi_",
    "DCGM_FI_",
    "servescope_sim_",
)


@dataclass(frozen=True)
class Source:
    """One exposed sample name (optionally restricted by labels) feeding a normalised metric."""

    name: str
    where: tuple[tuple[str, str], ...] = ()
    scale: float = 1.0


@dataclass(frozen=True)
class Scalar:
    """A normalised gauge or counter: the first source present wins (new name before old)."""

    metric: str
    sources: tuple[Source, ...]
    agg: Agg = "sum"
    drop_negative: bool = False


@dataclass(frozen=True)
class Hist:
    """A normalised histogram from the first family present; ``scale`` converts to seconds.

    ``buckets=False`` for engines that export only cumulative sum and count (Triton's µs
    counters): percentiles are then unavailable, the window mean still is.
    """

    metric: str
    families: tuple[str, ...]
    scale: float = 1.0
    buckets: bool = True
    count_source: str | None = None  # a separate count series (Triton)


def _s(name: str, scale: float = 1.0, **where: str) -> Source:
    return Source(name, tuple(sorted(where.items())), scale)


def _one(metric: str, *names: str, agg: Agg = "sum", drop_negative: bool = False) -> Scalar:
    return Scalar(metric, tuple(Source(n) for n in names), agg, drop_negative)


@dataclass(frozen=True)
class EngineMap:
    engine: str
    scalars: tuple[Scalar, ...]
    hists: tuple[Hist, ...] = field(default_factory=tuple)


_VLLM = EngineMap(
    "vllm",
    (
        _one("requests_running", "vllm:num_requests_running"),
        _one("requests_waiting", "vllm:num_requests_waiting"),
        _one("requests_swapped", "vllm:num_requests_swapped"),
        _one("kv_cache_usage", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", agg="mean"),
        _one("preemptions_total", "vllm:num_preemptions_total"),
        _one("prompt_tokens_total", "vllm:prompt_tokens_total"),
        _one("prompt_tokens_cached_total", "vllm:prompt_tokens_cached_total"),
        _one("generation_tokens_total", "vllm:generation_tokens_total"),
        _one(
            "prefix_cache_hits_total",
            "vllm:prefix_cache_hits_total",
            "vllm:gpu_prefix_cache_hits_total",
        ),
        _one(
            "prefix_cache_queries_total",
            "vllm:prefix_cache_queries_total",
            "vllm:gpu_prefix_cache_queries_total",
        ),
        # V0 gauge; -1 when prefix caching is off
        _one(
            "prefix_cache_hit_rate",
            "vllm:gpu_prefix_cache_hit_rate",
            agg="mean",
            drop_negative=True,
        ),
        _one("generation_throughput", "vllm:avg_generation_throughput_toks_per_s"),  # V0 only
        _one("requests_finished_total", "vllm:request_success_total"),
    ),
    (
        Hist("ttft_seconds", ("vllm:time_to_first_token_seconds",)),
        Hist(
            "itl_seconds",
            ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
        ),
        Hist("tpot_seconds", ("vllm:request_time_per_output_token_seconds",)),
        Hist("e2e_seconds", ("vllm:e2e_request_latency_seconds",)),
        Hist("queue_time_seconds", ("vllm:request_queue_time_seconds",)),
        Hist("prefill_time_seconds", ("vllm:request_prefill_time_seconds",)),
        Hist("decode_time_seconds", ("vllm:request_decode_time_seconds",)),
        Hist("inference_time_seconds", ("vllm:request_inference_time_seconds",)),
        Hist("prompt_length_tokens", ("vllm:request_prompt_tokens",)),
        Hist("output_length_tokens", ("vllm:request_generation_tokens",)),
    ),
)

_SGLANG = EngineMap(
    "sglang",
    (
        _one("requests_running", "sglang:num_running_reqs"),
        _one("requests_waiting", "sglang:num_queue_reqs"),
        _one("requests_preempted", "sglang:num_retracted_reqs"),
        _one("kv_cache_usage", "sglang:token_usage", agg="mean"),
        _one("kv_cache_tokens", "sglang:num_used_tokens"),
        _one("prefix_cache_hit_rate", "sglang:cache_hit_rate", agg="mean"),
        _one("generation_throughput", "sglang:gen_throughput"),
        _one("preemptions_total", "sglang:num_retracted_requests_total"),
        _one("prompt_tokens_total", "sglang:prompt_tokens_total"),
        _one("prompt_tokens_cached_total", "sglang:cached_tokens_total"),
        _one("generation_tokens_total", "sglang:generation_tokens_total"),
        _one("requests_finished_total", "sglang:num_requests_total"),
    ),
    (
        Hist("ttft_seconds", ("sglang:time_to_first_token_seconds",)),
        Hist(
            "itl_seconds",
            ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
        ),
        Hist("e2e_seconds", ("sglang:e2e_request_latency_seconds",)),
        Hist("queue_time_seconds", ("sglang:queue_time_seconds",)),
        # exported with --collect-tokens-histogram
        Hist("prompt_length_tokens", ("sglang:prompt_tokens_histogram",)),
        Hist("output_length_tokens", ("sglang:generation_tokens_histogram",)),
    ),
)

_TGI = EngineMap(
    "tgi",
    (
        _one("requests_running", "tgi_batch_current_size"),
        _one("requests_waiting", "tgi_queue_size"),
        _one("prompt_tokens_total", "tgi_request_input_length_sum"),
        _one("generation_tokens_total", "tgi_request_generated_tokens_sum"),
        _one("requests_finished_total", "tgi_request_success"),
    ),
    (
        Hist("e2e_seconds", ("tgi_request_duration",)),
        Hist("queue_time_seconds", ("tgi_request_queue_duration",)),
        Hist("tpot_seconds", ("tgi_request_mean_time_per_token_duration",)),
        Hist("inference_time_seconds", ("tgi_request_inference_duration",)),
        Hist("prompt_length_tokens", ("tgi_request_input_length",)),
        Hist("output_length_tokens", ("tgi_request_generated_tokens",)),
    ),
)

_LLAMACPP = EngineMap(
    "llamacpp",
    (
        _one("requests_running", "llamacpp:requests_processing"),
        _one("requests_waiting", "llamacpp:requests_deferred"),
        _one("kv_cache_usage", "llamacpp:kv_cache_usage_ratio", agg="mean"),
        _one("kv_cache_tokens", "llamacpp:kv_cache_tokens"),
        _one("batch_size_avg", "llamacpp:n_busy_slots_per_decode", agg="mean"),
        _one("prompt_tokens_total", "llamacpp:prompt_tokens_total"),
        _one("prompt_tokens_cached_total", "llamacpp:prompt_tokens_cached_total"),
        _one("generation_tokens_total", "llamacpp:tokens_predicted_total"),
        _one("decode_calls_total", "llamacpp:n_decode_total"),
        _one("prompt_seconds_total", "llamacpp:prompt_seconds_total"),
        _one("generation_seconds_total", "llamacpp:tokens_predicted_seconds_total"),
    ),
)

_TRITON = EngineMap(
    "triton-trtllm",
    (
        Scalar("requests_running", (_s("nv_trt_llm_request_metrics", request_type="active"),)),
        Scalar(
            "requests_waiting",
            (
                _s("nv_trt_llm_request_metrics", request_type="waiting"),
                _s("nv_inference_pending_request_count"),
            ),
        ),
        Scalar("requests_max", (_s("nv_trt_llm_request_metrics", request_type="max"),)),
        Scalar(
            "requests_preempted",
            (
                _s(
                    "nv_trt_llm_inflight_batcher_metrics",
                    inflight_batcher_specific_metric="paused_requests",
                ),
            ),
        ),
        Scalar(
            "kv_cache_usage",
            (_s("nv_trt_llm_kv_cache_block_metrics", kv_cache_block_type="fraction"),),
            agg="mean",
        ),
        Scalar(
            "gpu_memory_used_bytes",
            (
                _s("nv_trt_llm_runtime_memory_metrics", memory_type="gpu"),
                _s("nv_gpu_memory_used_bytes"),
            ),
        ),
        _one("prompt_tokens_total", "nv_llm_input_token_len_sum"),
        _one("generation_tokens_total", "nv_llm_output_token_len_sum"),
        _one("requests_finished_total", "nv_inference_request_success"),
    ),
    (
        Hist("ttft_seconds", ("nv_inference_first_response_histogram_ms",), scale=1e-3),
        Hist(
            "queue_time_seconds",
            ("nv_inference_queue_duration_us",),
            scale=1e-6,
            buckets=False,
            count_source="nv_inference_request_success",
        ),
        Hist(
            "e2e_seconds",
            ("nv_inference_request_duration_us",),
            scale=1e-6,
            buckets=False,
            count_source="nv_inference_request_success",
        ),
    ),
)

_TRTLLM_SERVE = EngineMap(
    "trtllm-serve",
    (
        _one("requests_running", "trtllm_num_requests_running"),
        _one("requests_waiting", "trtllm_num_requests_waiting"),
        _one("kv_cache_usage", "trtllm_kv_cache_utilization", agg="mean"),
        _one("prefix_cache_hit_rate", "trtllm_kv_cache_hit_rate", agg="mean"),
        _one("gpu_memory_used_bytes", "trtllm_gpu_memory_usage_bytes"),
        _one("prompt_tokens_total", "trtllm_prompt_tokens_total"),
        _one("generation_tokens_total", "trtllm_generation_tokens_total"),
        _one("requests_finished_total", "trtllm_request_success_total"),
    ),
    (
        Hist("ttft_seconds", ("trtllm_time_to_first_token_seconds",)),
        Hist("tpot_seconds", ("trtllm_time_per_output_token_seconds",)),
        Hist("e2e_seconds", ("trtllm_e2e_request_latency_seconds",)),
        Hist("queue_time_seconds", ("trtllm_request_queue_time_seconds",)),
        Hist("prefill_time_seconds", ("trtllm_request_prefill_time_seconds",)),
        Hist("decode_time_seconds", ("trtllm_request_decode_time_seconds",)),
        Hist("inference_time_seconds", ("trtllm_request_inference_time_seconds",)),
    ),
)

MAPS: dict[str, EngineMap] = {
    "vllm": _VLLM,
    "sim": EngineMap("sim", _VLLM.scalars, _VLLM.hists),
    "sglang": _SGLANG,
    "tgi": _TGI,
    "llamacpp": _LLAMACPP,
    "triton-trtllm": _TRITON,
    "trtllm-serve": _TRTLLM_SERVE,
}


def detect_engine(names: Iterable[str]) -> str | None:
    """The engine whose metric families appear in ``names`` (sample names), or None.

    The sim is recognised by ``servescope_sim_info``; otherwise the first prefix of FORMATS.md
    §A8 present decides (an engine page also carrying DCGM or process series is still that
    engine).
    """
    present = set(names)
    if "servescope_sim_info" in present:
        return "sim"
    for prefix, engine in _PREFIXES:
        if any(n.startswith(prefix) for n in present):
            return engine
    return None


def has_dcgm(names: Iterable[str]) -> bool:
    """True when the page carries DCGM exporter series (``DCGM_FI_*``)."""
    return any(n.startswith("DCGM_FI_") for n in names)


def _combine(samples: Sequence[Sample], agg: Agg, scale: float) -> float | None:
    """Combine the series of one metric: max over rank replicas, then ``agg`` over the rest."""
    values: list[float] = []
    if any(k in RANK_LABELS for s in samples for k, _ in s.labels):
        groups: dict[tuple[tuple[str, str], ...], float] = {}
        for s in samples:
            key = tuple((k, v) for k, v in s.labels if k not in RANK_LABELS)
            prev = groups.get(key)
            groups[key] = s.value if prev is None or s.value > prev else prev
        values = list(groups.values())
    else:
        values = [s.value for s in samples]
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return None
    if agg == "sum":
        out = math.fsum(values)
    elif agg == "mean":
        out = math.fsum(values) / len(values)
    else:
        out = max(values)
    return out * scale


def _matching(by_name: Mapping[str, list[Sample]], src: Source) -> list[Sample]:
    found = by_name.get(src.name, [])
    if src.where:
        found = [s for s in found if all(p in s.labels for p in src.where)]
    return found


def _le(sample: Sample) -> float | None:
    le = sample.label("le")
    if le is None:
        return None
    try:
        return float(le)
    except ValueError:
        return None


def bucket_metric(hist: str, le: float) -> str:
    """The stored name of one cumulative bucket: ``ttft_seconds_bucket:0.5`` / ``…:+Inf``."""
    return f"{hist}_bucket:{'+Inf' if math.isinf(le) else repr(float(le))}"


def _histogram(by_name: Mapping[str, list[Sample]], h: Hist) -> dict[str, float]:
    for family in h.families:
        sums = by_name.get(f"{family}_sum") or (by_name.get(family) if not h.buckets else None)
        if not sums:
            continue
        out: dict[str, float] = {}
        total = _combine(sums, "sum", h.scale)
        if total is not None:
            out[f"{h.metric}_sum"] = total
        count_name = h.count_source or f"{family}_count"
        count = _combine(by_name.get(count_name, []), "sum", 1.0)
        if count is not None:
            out[f"{h.metric}_count"] = count
        if h.buckets:
            per_le: dict[float, list[Sample]] = {}
            for s in by_name.get(f"{family}_bucket", []):
                le = _le(s)
                if le is not None:
                    per_le.setdefault(le, []).append(s)
            for le, samples in per_le.items():
                value = _combine(samples, "sum", 1.0)
                if value is not None:
                    out[bucket_metric(h.metric, le * h.scale)] = value
        return out
    return {}


def normalise(
    expo: Exposition,
    engine: str | None = None,
    *,
    by_name: Mapping[str, list[Sample]] | None = None,
) -> dict[str, float]:
    """The normalised metrics of one scrape (engine auto-detected when not given).

    Returns ``{}`` for a page of no known engine. Counters are cumulative (as exposed);
    histograms come back as ``<hist>_bucket:<le>`` / ``_sum`` / ``_count``, in seconds
    (``HISTOGRAMS``) or tokens (``LENGTH_HISTOGRAMS``).
    ``by_name`` (``expo.by_name()``) may be passed when the caller already has it.
    """
    if by_name is None:
        by_name = expo.by_name()
    engine = engine or detect_engine(by_name)
    if engine is None:
        return {}
    spec = MAPS[engine]
    out: dict[str, float] = {}
    for scalar in spec.scalars:
        for src in scalar.sources:
            found = _matching(by_name, src)
            if not found:
                continue
            value = _combine(found, scalar.agg, src.scale)
            if value is not None and not (scalar.drop_negative and value < 0):
                out[scalar.metric] = value
            break
    for h in spec.hists:
        out.update(_histogram(by_name, h))
    return out


def source_names(engines: Iterable[str] = ENGINES) -> list[str]:
    """Every exposed sample name the maps read (for Prometheus range queries)."""
    names: set[str] = set()
    for engine in engines:
        spec = MAPS[engine]
        for scalar in spec.scalars:
            names.update(src.name for src in scalar.sources)
        for h in spec.hists:
            for fam in h.families:
                if h.buckets:
                    names.update((f"{fam}_bucket", f"{fam}_sum", f"{fam}_count"))
                else:
                    names.add(fam)
            if h.count_source:
                names.add(h.count_source)
    names.add("servescope_sim_info")
    return sorted(names)


def keep_raw(name: str, mode: str) -> bool:
    """Whether a sample goes to the raw store: ``all``, ``engine`` (engine families) or ``none``.

    ``*_created`` series (prometheus_client's creation timestamps) are never kept.
    """
    if mode == "none" or name.endswith("_created"):
        return False
    return mode == "all" or name.startswith(ENGINE_RAW_PREFIXES)
