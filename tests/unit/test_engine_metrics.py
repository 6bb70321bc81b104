"""Normalisation of every engine's /metrics (FORMATS.md §A), against values read by hand.

The fixture captures are real (tests/fixtures/SOURCES.md); each expected number below was
read from the file by eye. TGI and trtllm-serve have no public capture: their pages here are
written from the metric tables of FORMATS.md §A3/§A5 and marked synthetic.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest

from collectors import engine_metrics as em
from collectors import gpu
from collectors.prometheus_text import parse

MIB = 1024 * 1024


@pytest.fixture
def page(fixtures_dir: Path) -> Callable[[str], str]:
    """Read a capture under tests/fixtures by its path there."""

    def read(rel: str) -> str:
        return (fixtures_dir / rel).read_text()

    return read


def test_vllm_v1_capture(page: Callable[[str], str]) -> None:
    """vllm/metrics_v1_full…prom: an idle Qwen2.5-0.5B server — every engine value is 0.0."""
    expo = parse(page("vllm/metrics_v1_full_qwen2.5-0.5b_k8s-ai-conformance_kops.prom"))
    assert em.detect_engine(expo.names()) == "vllm"
    out = em.normalise(expo)
    for metric in (
        "requests_running",  # vllm:num_requests_running 0.0
        "requests_waiting",  # vllm:num_requests_waiting 0.0
        "kv_cache_usage",  # vllm:kv_cache_usage_perc 0.0
        "preemptions_total",  # vllm:num_preemptions_total 0.0
        "prompt_tokens_total",  # vllm:prompt_tokens_total 0.0
        "prompt_tokens_cached_total",  # vllm:prompt_tokens_cached_total 0.0
        "generation_tokens_total",  # vllm:generation_tokens_total 0.0
        "prefix_cache_hits_total",  # vllm:prefix_cache_hits_total 0.0
        "prefix_cache_queries_total",  # vllm:prefix_cache_queries_total 0.0
        "requests_finished_total",  # 5 × vllm:request_success_total{finished_reason=…} 0.0
    ):
        assert out[metric] == 0.0, metric
    # V0-only names are absent in a V1 page
    assert "requests_swapped" not in out and "prefix_cache_hit_rate" not in out
    # TTFT: 22 finite buckets 0.001 … 2560 plus +Inf, all 0
    ttft = {k: v for k, v in out.items() if k.startswith("ttft_seconds_bucket:")}
    assert len(ttft) == 23
    assert "ttft_seconds_bucket:0.001" in ttft and "ttft_seconds_bucket:2560.0" in ttft
    assert ttft["ttft_seconds_bucket:+Inf"] == 0.0
    assert out["ttft_seconds_count"] == 0.0 and out["ttft_seconds_sum"] == 0.0
    # queue time: 21 finite buckets 0.3 … 7680 plus +Inf
    assert len([k for k in out if k.startswith("queue_time_seconds_bucket:")]) == 22
    # every histogram of the map is exported by this version
    assert {k[: -len("_count")] for k in out if k.endswith("_count")} == set(em.HISTOGRAMS) | set(
        em.LENGTH_HISTOGRAMS
    )


def test_vllm_v0_and_old_v1_names() -> None:
    """Synthetic V0 page (names from FORMATS.md §A1): old KV, swapped, block prefix counters."""
    text = """
vllm:num_requests_running{model_name="m"} 4
vllm:num_requests_waiting{model_name="m"} 2
vllm:num_requests_swapped{model_name="m"} 1
vllm:gpu_cache_usage_perc{model_name="m"} 0.75
vllm:gpu_prefix_cache_hit_rate{model_name="m"} -1
vllm:gpu_prefix_cache_queries_total{model_name="m"} 40
vllm:gpu_prefix_cache_hits_total{model_name="m"} 10
vllm:avg_generation_throughput_toks_per_s{model_name="m"} 123.5
vllm:time_per_output_token_seconds_bucket{le="0.01",model_name="m"} 3
vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="m"} 4
vllm:time_per_output_token_seconds_sum{model_name="m"} 0.05
vllm:time_per_output_token_seconds_count{model_name="m"} 4
"""
    out = em.normalise(parse(text))
    assert out["requests_running"] == 4
    assert out["requests_swapped"] == 1
    assert out["kv_cache_usage"] == 0.75
    assert out["prefix_cache_queries_total"] == 40
    assert out["prefix_cache_hits_total"] == 10
    assert "prefix_cache_hit_rate" not in out  # -1 means prefix caching off
    assert out["generation_throughput"] == 123.5
    assert out["itl_seconds_bucket:0.01"] == 3 and out["itl_seconds_count"] == 4


def test_vllm_prefers_new_kv_name_and_sums_data_parallel_engines() -> None:
    text = """
vllm:num_requests_running{engine="0",model_name="m"} 3
vllm:num_requests_running{engine="1",model_name="m"} 5
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.6
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.9
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="m"} 1
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.5",model_name="m"} 2
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 3
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 4
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 3
vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 4
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 1.5
vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 2.5
"""
    out = em.normalise(parse(text))
    assert out["requests_running"] == 8
    assert out["kv_cache_usage"] == pytest.approx(0.4)
    assert out["ttft_seconds_bucket:0.5"] == 3
    assert out["ttft_seconds_bucket:+Inf"] == 7
    assert out["ttft_seconds_count"] == 7
    assert out["ttft_seconds_sum"] == 4.0


def test_sglang_capture(page: Callable[[str], str]) -> None:
    """sglang/production_metrics_doc_llama-3.1-8b.prom (older SGLang, label model_name only)."""
    expo = parse(page("sglang/production_metrics_doc_llama-3.1-8b.prom"))
    assert em.detect_engine(expo.names()) == "sglang"
    out = em.normalise(expo)
    assert out["requests_running"] == 162.0  # sglang:num_running_reqs 162.0
    assert out["requests_waiting"] == 2826.0  # sglang:num_queue_reqs 2826.0
    assert out["kv_cache_usage"] == 0.28  # sglang:token_usage 0.28
    assert out["kv_cache_tokens"] == 123859.0  # sglang:num_used_tokens
    assert out["prefix_cache_hit_rate"] == 0.007507552643049313
    assert out["generation_throughput"] == 86.50814177726902
    assert out["prompt_tokens_total"] == 8.128902e06
    assert out["generation_tokens_total"] == 7.557572e06
    assert out["ttft_seconds_count"] == 11008.0
    assert out["ttft_seconds_sum"] == 2.3518979474117756e06
    assert out["ttft_seconds_bucket:1.0"] == 27.0
    assert out["ttft_seconds_bucket:30.0"] == 2513.0
    assert out["ttft_seconds_bucket:+Inf"] == 11008.0
    assert out["e2e_seconds_count"] == 11228.0
    # older SGLang: time_per_output_token_seconds is the ITL histogram
    assert out["itl_seconds_count"] == 7.400757e06
    assert out["itl_seconds_bucket:0.1"] == 4.950195e06
    # not exported by this version
    assert "preemptions_total" not in out and "queue_time_seconds_count" not in out


def test_sglang_ranks_max_then_data_parallel_sum() -> None:
    """Synthetic newer SGLang page: TP ranks replicate one scheduler, DP ranks add up."""
    text = """
sglang:num_running_reqs{model_name="m",tp_rank="0",pp_rank="0",dp_rank="0"} 10
sglang:num_running_reqs{model_name="m",tp_rank="1",pp_rank="0",dp_rank="0"} 10
sglang:num_running_reqs{model_name="m",tp_rank="0",pp_rank="0",dp_rank="1"} 7
sglang:num_running_reqs{model_name="m",tp_rank="1",pp_rank="0",dp_rank="1"} 7
sglang:token_usage{model_name="m",tp_rank="0",pp_rank="0",dp_rank="0"} 0.5
sglang:token_usage{model_name="m",tp_rank="0",pp_rank="0",dp_rank="1"} 0.3
sglang:num_retracted_requests_total{model_name="m",tp_rank="0",pp_rank="0",dp_rank="0"} 4
sglang:inter_token_latency_seconds_bucket{model_name="m",le="+Inf"} 9
sglang:inter_token_latency_seconds_count{model_name="m"} 9
sglang:inter_token_latency_seconds_sum{model_name="m"} 0.2
sglang:time_per_output_token_seconds_count{model_name="m"} 99
sglang:time_per_output_token_seconds_sum{model_name="m"} 9.9
"""
    out = em.normalise(parse(text))
    assert out["requests_running"] == 17
    assert out["kv_cache_usage"] == pytest.approx(0.4)
    assert out["preemptions_total"] == 4
    assert out["itl_seconds_count"] == 9  # the new name wins over the old one


def test_llamacpp_capture(page: Callable[[str], str]) -> None:
    """llamacpp/metrics_llama-server_cuda_lfm2.5-8b.prom (current names, no KV gauges)."""
    expo = parse(page("llamacpp/metrics_llama-server_cuda_lfm2.5-8b.prom"))
    assert em.detect_engine(expo.names()) == "llamacpp"
    out = em.normalise(expo)
    assert out == {
        "requests_running": 0.0,  # llamacpp:requests_processing
        "requests_waiting": 0.0,  # llamacpp:requests_deferred
        "batch_size_avg": 1.0523,  # llamacpp:n_busy_slots_per_decode
        "prompt_tokens_total": 26129.0,
        "generation_tokens_total": 10911.0,  # llamacpp:tokens_predicted_total
        "decode_calls_total": 10420.0,
        "prompt_seconds_total": 32.378,
        "generation_seconds_total": 469.376,
    }


def test_llamacpp_names_list_and_legacy_kv_gauges(page: Callable[[str], str]) -> None:
    names = page("llamacpp/llmkube_llamacpp-metric-names.txt").split()
    assert em.detect_engine(names) == "llamacpp"
    out = em.normalise(
        parse(
            "llamacpp:kv_cache_usage_ratio 0.25\nllamacpp:kv_cache_tokens 2048\n"
            "llamacpp:requests_processing 2\nllamacpp:prompt_tokens_cached_total 64\n"
        )
    )
    assert out == {
        "kv_cache_usage": 0.25,
        "kv_cache_tokens": 2048.0,
        "requests_running": 2.0,
        "prompt_tokens_cached_total": 64.0,
    }


def test_triton_trtllm_capture(page: Callable[[str], str]) -> None:
    """trtllm/triton_tensorrtllm_backend_readme_ifb_metrics.prom (README sample)."""
    expo = parse(page("trtllm/triton_tensorrtllm_backend_readme_ifb_metrics.prom"))
    assert em.detect_engine(expo.names()) == "triton-trtllm"
    out = em.normalise(expo)
    assert out == {
        "requests_running": 0.0,  # request_type="active"
        "requests_waiting": 1.0,  # request_type="waiting"
        "requests_max": 512.0,  # request_type="max"
        "kv_cache_usage": 0.4875,  # kv_cache_block_type="fraction"
        "gpu_memory_used_bytes": 1610236.0,  # memory_type="gpu"
    }


def test_triton_core_counters_give_window_means_not_buckets() -> None:
    text = """
nv_inference_request_success{model="ensemble",version="1"} 10
nv_inference_queue_duration_us{model="ensemble",version="1"} 2500000
nv_inference_request_duration_us{model="ensemble",version="1"} 9000000
nv_inference_pending_request_count{model="ensemble",version="1"} 3
nv_inference_first_response_histogram_ms_bucket{model="ensemble",version="1",le="100"} 4
nv_inference_first_response_histogram_ms_bucket{model="ensemble",version="1",le="+Inf"} 10
nv_inference_first_response_histogram_ms_sum{model="ensemble",version="1"} 1500
nv_inference_first_response_histogram_ms_count{model="ensemble",version="1"} 10
"""
    out = em.normalise(parse(text))
    assert out["requests_waiting"] == 3
    assert out["requests_finished_total"] == 10
    assert out["queue_time_seconds_sum"] == pytest.approx(2.5)
    assert out["queue_time_seconds_count"] == 10
    assert out["e2e_seconds_sum"] == pytest.approx(9.0)
    assert not any(k.startswith("queue_time_seconds_bucket") for k in out)
    assert out["ttft_seconds_bucket:0.1"] == 4  # 100 ms → 0.1 s
    assert out["ttft_seconds_sum"] == pytest.approx(1.5)


def test_tgi_syntheticpage(page: Callable[[str], str]) -> None:
    """Names from FORMATS.md §A3 (no real capture exists): counters without _total."""
    text = """
tgi_queue_size 5
tgi_batch_current_size 12
tgi_request_success 40
tgi_request_input_length_sum 8000
tgi_request_input_length_count 40
tgi_request_generated_tokens_sum 2000
tgi_request_queue_duration_bucket{le="0.5"} 30
tgi_request_queue_duration_bucket{le="+Inf"} 40
tgi_request_queue_duration_sum 12
tgi_request_queue_duration_count 40
"""
    assert em.detect_engine(parse(text).names()) == "tgi"
    out = em.normalise(parse(text))
    assert out["requests_waiting"] == 5
    assert out["requests_running"] == 12
    assert out["requests_finished_total"] == 40
    assert out["prompt_tokens_total"] == 8000
    assert out["generation_tokens_total"] == 2000
    assert out["queue_time_seconds_bucket:0.5"] == 30
    assert out["queue_time_seconds_count"] == 40


def test_trtllm_serve_syntheticpage(page: Callable[[str], str]) -> None:
    text = """
trtllm_num_requests_running{model_name="m",engine_type="trtllm"} 6
trtllm_num_requests_waiting{model_name="m",engine_type="trtllm"} 1
trtllm_kv_cache_utilization{model_name="m",engine_type="trtllm"} 0.5
trtllm_kv_cache_hit_rate{model_name="m",engine_type="trtllm"} 0.25
trtllm_request_success_total{model_name="m",engine_type="trtllm",finished_reason="stop"} 7
trtllm_request_success_total{model_name="m",engine_type="trtllm",finished_reason="length"} 3
"""
    assert em.detect_engine(parse(text).names()) == "trtllm-serve"
    out = em.normalise(parse(text))
    assert out == {
        "requests_running": 6,
        "requests_waiting": 1,
        "kv_cache_usage": 0.5,
        "prefix_cache_hit_rate": 0.25,
        "requests_finished_total": 10,
    }


def test_vllm_golden_family_names_are_mapped(page: Callable[[str], str]) -> None:
    """vllm/metric_families_v0.26.0_names_types.txt: the families the map reads exist there."""
    lines = page("vllm/metric_families_v0.26.0_names_types.txt").split("\n")
    families = {line.split()[0] for line in lines if line.strip() and not line.startswith("#")}
    for needed in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:time_to_first_token_seconds",
        "vllm:request_queue_time_seconds",
    ):
        assert any(f.startswith(needed) for f in families), needed


def test_dcgm_capture_to_gpu_rows(page: Callable[[str], str]) -> None:
    """dcgm/dcgm_exporter_nvidia_l4…prom: one idle NVIDIA L4; FB values in MiB."""
    expo = parse(page("dcgm/dcgm_exporter_nvidia_l4_k8s-ai-conformance_kops.prom"))
    assert em.detect_engine(expo.names()) is None
    assert em.has_dcgm(expo.names())
    (row,) = gpu.dcgm_rows(expo, ts=100.0, default_host="10.0.0.1:9400")
    assert row == {
        "host": "i-030791dc5a37cd257",  # Hostname label
        "gpu_index": 0,
        "ts": 100.0,
        "gpu_uuid": "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c",
        "gpu_name": "NVIDIA L4",
        "source": "dcgm",
        "mem_used_bytes": 0.0,  # DCGM_FI_DEV_FB_USED 0
        "mem_total_bytes": (0 + 22563 + 470) * MIB,  # used + free 22563 + reserved 470
        "mem_reserved_bytes": 470 * MIB,  # DCGM_FI_DEV_FB_RESERVED 470 (MiB)
        "util_gpu": 0.0,
        "util_mem": 0.0,
        "power_w": 16.365,
        "temp_c": 31.0,
        "sm_clock_mhz": 210.0,
    }


def test_dcgm_sentinels_and_missing_hostname() -> None:
    text = (
        'DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-x"} 1024\n'
        'DCGM_FI_DEV_FB_FREE{gpu="1",UUID="GPU-x"} 1024\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-x"} 9223372036854775794\n'
    )
    (row,) = gpu.dcgm_rows(parse(text), ts=1.0, default_host="node:9400")
    assert row["host"] == "node:9400"
    assert row["gpu_index"] == 1
    assert row["mem_used_bytes"] == 1024 * MIB
    assert row["mem_total_bytes"] == 2048 * MIB
    assert row["temp_c"] is None


def test_detection_order_and_unknown_pages() -> None:
    assert em.detect_engine(["servescope_sim_info", "vllm:num_requests_running"]) == "sim"
    assert em.detect_engine(["nv_inference_count", "nv_trt_llm_request_metrics"]) == (
        "triton-trtllm"
    )
    assert em.detect_engine(["python_info", "process_cpu_seconds_total"]) is None
    assert em.normalise(parse("python_info 1\n")) == {}


def test_raw_filter_and_source_names() -> None:
    assert em.keep_raw("vllm:num_requests_running", "engine")
    assert not em.keep_raw("python_gc_objects_collected_total", "engine")
    assert em.keep_raw("python_gc_objects_collected_total", "all")
    assert not em.keep_raw("vllm:prompt_tokens_created", "all")
    assert not em.keep_raw("vllm:num_requests_running", "none")
    names = em.source_names()
    assert "vllm:time_to_first_token_seconds_bucket" in names
    assert "nv_inference_queue_duration_us" in names
    assert "llamacpp:requests_processing" in names


def test_bucket_metric_names() -> None:
    assert em.bucket_metric("ttft_seconds", 0.5) == "ttft_seconds_bucket:0.5"
    assert em.bucket_metric("ttft_seconds", math.inf) == "ttft_seconds_bucket:+Inf"
    assert em.bucket_metric("ttft_seconds", 1) == "ttft_seconds_bucket:1.0"


def test_unchanged_histograms_store_only_count_and_sum() -> None:
    from collectors.watch import ScrapeSource

    def page(count: int) -> str:
        return (
            f'vllm:time_to_first_token_seconds_bucket{{le="0.5"}} {count}\n'
            f'vllm:time_to_first_token_seconds_bucket{{le="+Inf"}} {count}\n'
            f"vllm:time_to_first_token_seconds_count {count}\n"
            f"vllm:time_to_first_token_seconds_sum {count * 0.1}\n"
            "vllm:num_requests_running 1\n"
        )

    src = ScrapeSource("http://h:1/metrics", raw="none")

    def metrics(text: str, ts: float) -> set[str]:
        return {r["metric"] for r in src.rows(parse(text), ts)["engine_samples"]}

    full = {"ttft_seconds_bucket:0.5", "ttft_seconds_bucket:+Inf", "ttft_seconds_count"}
    assert full <= metrics(page(3), 1.0)
    same = metrics(page(3), 2.0)  # nothing finished: buckets not stored again
    assert "ttft_seconds_count" in same and "requests_running" in same
    assert not any(m.startswith("ttft_seconds_bucket") for m in same)
    assert full <= metrics(page(4), 3.0)  # moved: stored in full
