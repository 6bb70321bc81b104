"""Prometheus text exposition of the reference engine.

Engine series use vLLM v1's names, types, HELP texts and histogram buckets (copied from a real
capture, tests/fixtures/vllm/), with the labels ``engine="0"`` and ``model_name``; GPU memory
uses DCGM exporter names and labels (``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``,
``Hostname``; tests/fixtures/dcgm/), in MiB as DCGM reports it. ``servescope_sim_info`` says
plainly that the endpoint is a simulator (framework ``sim``). Durations are virtual seconds: with
``--time-scale X`` they are X times the wall-clock durations a client measures.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from analysis import perf_model
from sim.engine import Histogram, Scheduler

MIB = 1024 * 1024
HOSTNAME = "servescope-sim"


def _fmt(v: float) -> str:
    return repr(float(v))


def _labels(pairs: Sequence[tuple[str, str]]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in pairs)
    return "{" + inner + "}"


@dataclass(frozen=True)
class GpuIdentity:
    index: int
    uuid: str
    pci_bus_id: str


def gpu_identities(gpu_name: str, tp: int, seed: int, port: int) -> list[GpuIdentity]:
    """Stable, obviously synthetic GPU identities for the DCGM-style series."""
    out = []
    for i in range(tp):
        u = uuid.uuid5(uuid.NAMESPACE_URL, f"servescope-sim/{gpu_name}/{seed}/{port}/{i}")
        out.append(GpuIdentity(i, f"GPU-{u}", f"00000000:{0x10 + i:02X}:00.0"))
    return out


class MetricsWriter:
    """Accumulates exposition text with HELP/TYPE headers."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, labels: str, value: float) -> None:
        self.lines.append(f"{name}{labels} {_fmt(value)}")

    def histogram(self, name: str, base: Sequence[tuple[str, str]], h: Histogram) -> None:
        cum = 0
        for bound, c in zip(h.bounds, h.counts, strict=False):
            cum += c
            self.sample(f"{name}_bucket", _labels([*base, ("le", repr(float(bound)))]), cum)
        cum += h.counts[-1]
        self.sample(f"{name}_bucket", _labels([*base, ("le", "+Inf")]), cum)
        self.sample(f"{name}_count", _labels(base), h.count)
        self.sample(f"{name}_sum", _labels(base), h.sum)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def render(
    sched: Scheduler,
    *,
    gpus: Sequence[GpuIdentity],
    gpu_util: float,
    time_scale: float,
) -> str:
    """The whole /metrics page."""
    cfg = sched.config
    st = sched.stats
    base = (("engine", "0"), ("model_name", cfg.model_name))
    lb = _labels(base)
    w = MetricsWriter()

    w.family("servescope_sim_info", "gauge", "A ServeScope simulated engine (framework sim).")
    info = _labels(
        [
            ("framework", "sim"),
            ("gpu", cfg.gpu.name),
            ("tp", str(cfg.tp)),
            ("model", cfg.model.name),
            ("max_batch_size", str(cfg.max_batch_size)),
            ("max_batched_tokens", str(cfg.max_batched_tokens)),
            ("kv_memory_fraction", str(cfg.kv_memory_fraction)),
            ("block_size", str(cfg.block_size)),
            ("prefix_caching", "on" if cfg.prefix_caching else "off"),
            ("time_scale", str(time_scale)),
        ]
    )
    w.sample("servescope_sim_info", info, 1)

    w.family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.")
    w.sample("vllm:num_requests_running", lb, sched.num_running)
    w.family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.")
    w.sample("vllm:num_requests_waiting", lb, sched.num_waiting)
    w.family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.")
    w.sample("vllm:kv_cache_usage_perc", lb, sched.kv_usage)

    counters = [
        (
            "vllm:prefix_cache_queries_total",
            "Prefix cache queries, in terms of number of queried tokens.",
            st.prefix_queries,
        ),
        (
            "vllm:prefix_cache_hits_total",
            "Prefix cache hits, in terms of number of cached tokens.",
            st.prefix_hits,
        ),
        (
            "vllm:num_preemptions_total",
            "Cumulative number of preemption from the engine.",
            st.preemptions,
        ),
        ("vllm:prompt_tokens_total", "Number of prefill tokens processed.", st.prompt_tokens),
        (
            "vllm:prompt_tokens_cached_total",
            "Number of cached prompt tokens (local + external).",
            st.prompt_tokens_cached,
        ),
        (
            "vllm:prompt_tokens_recomputed_total",
            "Number of cached tokens recomputed for forward pass.",
            st.prompt_tokens_recomputed,
        ),
        (
            "vllm:generation_tokens_total",
            "Number of generation tokens processed.",
            st.generation_tokens,
        ),
    ]
    for name, help_text, value in counters:
        w.family(name, "counter", help_text)
        w.sample(name, lb, value)

    w.family("vllm:request_success_total", "counter", "Count of successfully processed requests.")
    for reason in ("stop", "length", "abort"):
        w.sample(
            "vllm:request_success_total",
            _labels([("engine", "0"), ("finished_reason", reason), base[1]]),
            st.success.get(reason, 0),
        )

    hists = [
        ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", st.req_prompt_tokens),
        (
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            st.req_generation_tokens,
        ),
        (
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            st.iteration_tokens,
        ),
        (
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            st.ttft,
        ),
        (
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            st.itl,
        ),
        (
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            st.tpot,
        ),
        (
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            st.e2e,
        ),
        (
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            st.queue,
        ),
        (
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            st.inference,
        ),
        (
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            st.prefill,
        ),
        (
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            st.decode,
        ),
    ]
    for name, help_text, h in hists:
        w.family(name, "histogram", help_text)
        w.histogram(name, base, h)

    w.family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig")
    w.sample(
        "vllm:cache_config_info",
        _labels(
            [
                ("block_size", str(cfg.block_size)),
                ("enable_prefix_caching", str(cfg.prefix_caching)),
                ("engine", "0"),
                ("gpu_memory_utilization", str(cfg.kv_memory_fraction)),
                ("num_gpu_blocks", str(sched.pool.num_blocks)),
            ]
        ),
        1,
    )

    # --- DCGM-style GPU series (one per GPU of the TP group) ---------------------------------
    dep = sched.dep
    used = (
        perf_model.deployment_weight_bytes(dep) / cfg.tp
        + perf_model.activation_bytes(cfg.model, cfg.max_batched_tokens, cfg.tp)
        + sched.pool.num_blocks * cfg.block_size * perf_model.kv_bytes_per_token_per_gpu(dep)
    )
    total_mib = int(cfg.gpu.memory_bytes // MIB)
    reserved_mib = int(total_mib * 0.005)
    used_mib = min(int(used // MIB), total_mib - reserved_mib)
    free_mib = total_mib - reserved_mib - used_mib
    dcgm = [
        ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", free_mib),
        ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", used_mib),
        ("DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB).", reserved_mib),
        ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", round(100 * gpu_util)),
    ]
    for name, help_text, value in dcgm:
        w.family(name, "gauge", help_text)
        for g in gpus:
            labels = _labels(
                [
                    ("gpu", str(g.index)),
                    ("UUID", g.uuid),
                    ("pci_bus_id", g.pci_bus_id),
                    ("device", f"nvidia{g.index}"),
                    ("modelName", cfg.gpu.display_name or cfg.gpu.name),
                    ("Hostname", HOSTNAME),
                ]
            )
            w.lines.append(f"{name}{labels} {int(value)}")
    return w.text()
