"""analysis/perf_model.py against values computed by hand."""

from __future__ import annotations

import math

import pytest

import seeds
from analysis import perf_model as pm
from analysis.capacity import ModelShape
from analysis.perf_model import Calibration, Deployment, GpuSpec
from errors import ConfigError

GIB = 1024**3
IDEAL = Calibration(eta_bw=1.0, eta_fl=1.0, overhead_s=0.0, overhead_per_seq_s=0.0, allreduce_s=0.0)


def gpu(name: str) -> GpuSpec:
    return GpuSpec.from_entry(seeds.entry("gpus", name))


def model(name: str) -> ModelShape:
    return ModelShape.from_entry(seeds.entry("models", name))


def test_kv_bytes_per_token_by_hand() -> None:
    # 2 (K,V) × layers × kv_heads × head_dim × dtype bytes
    assert pm.kv_bytes_per_token(model("llama-3.1-8b")) == 2 * 32 * 8 * 128 * 2 == 131072
    assert pm.kv_bytes_per_token(model("llama-3.1-70b")) == 2 * 80 * 8 * 128 * 2 == 327680
    assert pm.kv_bytes_per_token(model("llama-3.1-70b"), 1.0) == 163840
    assert pm.kv_bytes_per_token(model("qwen2.5-0.5b")) == 2 * 24 * 2 * 64 * 2 == 12288
    assert pm.kv_bytes_per_token(model("smollm2-135m")) == 2 * 30 * 3 * 64 * 2 == 23040


def test_weight_bytes() -> None:
    assert pm.weight_bytes(model("llama-3.1-8b")) == pytest.approx(8.03e9 * 2)
    assert pm.weight_bytes(model("llama-3.1-70b"), 1.0) == pytest.approx(70.55e9)


def test_kv_blocks_by_hand_h100_8b() -> None:
    dep = Deployment(gpu=gpu("H100-SXM-80GB"), model=model("llama-3.1-8b"))
    # 0.9 × 81,559 MiB − 16.06 GB of weights − (1 GiB + 8192 tokens × 4096 × 24 B)
    budget = 0.9 * 85520809984 - 16.06e9 - (GIB + 8192 * 4096 * 24)
    assert pm.kv_budget_bytes(dep) == pytest.approx(budget)
    assert pm.kv_blocks(dep) == math.floor(budget / (16 * 131072)) == 28147
    assert pm.kv_capacity_tokens(dep) == 28147 * 16


def test_tensor_parallel_splits_weights_and_kv() -> None:
    one = Deployment(gpu=gpu("H100-SXM-80GB"), model=model("llama-3.1-70b"), tp=4)
    per_gpu_weights = 70.55e9 * 2 / 4
    acts = GIB + 8192 * 8192 * 24 / 4
    budget = 0.9 * 85520809984 - per_gpu_weights - acts
    assert pm.kv_budget_bytes(one) == pytest.approx(budget)
    assert pm.kv_bytes_per_token_per_gpu(one) == 327680 / 4
    assert pm.kv_blocks(one) == math.floor(budget / (16 * 327680 / 4))


def test_model_that_does_not_fit_raises_config_error() -> None:
    dep = Deployment(gpu=gpu("L4-24GB"), model=model("llama-3.1-70b"))
    with pytest.raises(ConfigError) as err:
        pm.kv_blocks(dep)
    assert "does not fit" in str(err.value)
    assert err.value.hint and "--tp" in err.value.hint


def test_decode_step_is_memory_bound_by_hand() -> None:
    dep = Deployment(gpu=gpu("H100-SXM-80GB"), model=model("llama-3.1-8b"), calibration=IDEAL)
    t = pm.iteration_time(dep, num_seqs=1, new_tokens=1, kv_read_tokens=1000, attn_pairs=1001)
    # (16.06e9 B of weights + 1000 tokens × 131072 B) / 3.35e12 B/s
    assert t == pytest.approx((16.06e9 + 1000 * 131072) / 3.35e12)
    assert t == pytest.approx(4.8332e-3, rel=1e-4)


def test_prefill_is_compute_bound_by_hand() -> None:
    dep = Deployment(gpu=gpu("H100-SXM-80GB"), model=model("llama-3.1-8b"), calibration=IDEAL)
    # 2 × 8.03e9 × 4096 + 4 × 32 layers × 32 heads × 128 × (4096 × 4097 / 2) pairs
    flops = 2 * 8.03e9 * 4096 + 4 * 32 * 32 * 128 * (4096 * 4097 / 2)
    assert pm.prefill_pairs(4096) == 4096 * 4097 / 2
    assert pm.prefill_time(dep, 4096) == pytest.approx(flops / 989.5e12)
    assert pm.prefill_time(dep, 4096) == pytest.approx(70.93e-3, rel=1e-3)


def test_prefill_is_chunked_by_max_batched_tokens() -> None:
    dep = Deployment(
        gpu=gpu("H100-SXM-80GB"),
        model=model("llama-3.1-8b"),
        calibration=Calibration(eta_bw=1.0, eta_fl=1.0, overhead_s=1e-3, overhead_per_seq_s=0.0),
        max_batched_tokens=1024,
    )
    # four chunks: four overheads, and later chunks attend to the earlier ones
    chunks = [
        pm.iteration_time(
            dep,
            num_seqs=1,
            new_tokens=1024,
            kv_read_tokens=done + 1024,
            attn_pairs=pm.prefill_pairs(1024, done),
        )
        for done in (0, 1024, 2048, 3072)
    ]
    assert pm.prefill_time(dep, 4096) == pytest.approx(sum(chunks))
    assert chunks[3] > chunks[0]
    assert pm.prefill_pairs(1024, 3072) == 1024 * 3072 + 1024 * 1025 / 2


def test_overheads_and_tp_communication_add_up() -> None:
    calib = Calibration(
        eta_bw=1.0,
        eta_fl=1.0,
        overhead_s=2e-3,
        overhead_per_seq_s=10e-6,
        allreduce_s=20e-6,
        link_bytes_s=450e9,
    )
    m = model("llama-3.1-70b")
    dep = Deployment(gpu=gpu("H200-SXM-141GB"), model=m, tp=4, calibration=calib)
    t = pm.iteration_time(dep, num_seqs=8, new_tokens=8, kv_read_tokens=8 * 100, attn_pairs=808)
    mem = (70.55e9 * 2 / 4 + 800 * 327680 / 4) / 4.8e12
    comm = 2 * 80 * (20e-6 + 8 * 8192 * 2 * 2 * 3 / 4 / 450e9)
    assert t == pytest.approx(mem + 2e-3 + 8 * 10e-6 + comm)


def test_fp8_uses_fp8_peak_only_where_the_gpu_has_it() -> None:
    h100 = Deployment(gpu=gpu("H100-SXM-80GB"), model=model("llama-3.1-8b"), weight_dtype_bytes=1)
    a100 = Deployment(gpu=gpu("A100-SXM-80GB"), model=model("llama-3.1-8b"), weight_dtype_bytes=1)
    assert h100.peak_flops == 1979e12
    assert a100.peak_flops == 312e12
    assert h100.kv_bytes_per_elem == 1.0  # KV follows the weights unless set


def test_decode_step_grows_with_batch_and_context() -> None:
    dep = Deployment(gpu=gpu("H100-SXM-80GB"), model=model("llama-3.1-8b"))
    assert pm.decode_step_time(dep, 64, 512) > pm.decode_step_time(dep, 1, 512)
    assert pm.decode_step_time(dep, 64, 4096) > pm.decode_step_time(dep, 64, 512)
    # a huge batch turns compute bound: time keeps growing with the batch
    assert pm.decode_step_time(dep, 4096, 128) > pm.decode_step_time(dep, 1024, 128) * 2


def test_empty_iteration_takes_no_time() -> None:
    dep = Deployment(gpu=gpu("H100-SXM-80GB"), model=model("llama-3.1-8b"))
    assert pm.iteration_time(dep, num_seqs=0, new_tokens=0, kv_read_tokens=0, attn_pairs=0) == 0
