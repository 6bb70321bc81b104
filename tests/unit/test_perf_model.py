"""analysis/perf_model.py against values computed by hand."""

from __future__ import annotations

import dataclasses
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


# --- MoE / MLA / precision physics ---------------------------------------------------------------


def _as_dense(m: ModelShape) -> ModelShape:
    """The same model with every parameter read each step (a dense model of the same size)."""
    return dataclasses.replace(
        m, experts=0, experts_per_token=0, expert_params_b=0.0, active_params_b=None
    )


def test_moe_decode_at_batch_1_reads_the_active_parameters() -> None:
    q = model("qwen3-30b-a3b")
    dep = Deployment(gpu=gpu("H100-SXM-80GB"), model=q, calibration=IDEAL)
    # batch 1: dense part (30.53 − 128 × 0.226492416 = 1.5390B) + 8 experts × 0.226492416B
    # = 3.3509B parameters × 2 bytes, plus the KV of 512 tokens × 98,304 B, at 3.35 TB/s
    params = (30.53 - 128 * 0.226492416) + 8 * 0.226492416
    kv = 2 * 48 * 4 * 128 * 2  # 98,304 bytes per token
    expected = (params * 1e9 * 2 + 512 * kv) / 3.35e12
    assert pm.decode_step_time(dep, 1, 512) == pytest.approx(expected)
    # a prefill chunk of 8,192 tokens touches every expert: all 30.53B are read
    t = pm.iteration_time(dep, num_seqs=1, new_tokens=8192, kv_read_tokens=8192, attn_pairs=1.0)
    flops = 2 * 3.3e9 * 8192 + 4 * 48 * 32 * 128
    assert t == pytest.approx(max((30.53e9 * 2 + 8192 * kv) / 3.35e12, flops / 989.5e12), rel=1e-6)


def test_moe_decode_is_faster_than_a_dense_model_of_the_same_size_until_batches_grow() -> None:
    q = model("qwen3-30b-a3b")
    moe = Deployment(gpu=gpu("H100-SXM-80GB"), model=q)
    dense = Deployment(gpu=gpu("H100-SXM-80GB"), model=_as_dense(q))
    ratios = [
        pm.decode_step_time(moe, b, 512) / pm.decode_step_time(dense, b, 512)
        for b in (1, 8, 64, 256)
    ]
    # batch 1 reads ~3.35B of 30.53B parameters: several times faster than the dense model
    assert ratios[0] < 0.25
    # ... and the gap closes as more tokens touch more experts (E(1 − (1 − k/E)^B) → E)
    assert ratios == sorted(ratios)
    assert ratios[-1] == pytest.approx(1.0, abs=0.01)
    # memory holds every expert either way: the same KV capacity
    assert pm.kv_capacity_tokens(moe) == pm.kv_capacity_tokens(dense)


def test_mla_kv_capacity_follows_the_latent_formula() -> None:
    ds = model("deepseek-v3")
    dep = Deployment(gpu=gpu("H200-SXM-141GB"), model=ds, tp=8)
    # FP8 checkpoint, but the KV cache stays BF16 (the model's compute dtype)
    assert dep.kv_bytes_per_elem == 2.0
    # (512 + 64) × 61 × 2 = 70,272 bytes per token on EVERY one of the 8 ranks (replicated)
    assert pm.kv_bytes_per_token_per_gpu(dep) == (512 + 64) * 61 * 2 == 70_272
    # budget per GPU: 0.9 × 143,771 MiB − 671e9 × 1 B / 8 − (1 GiB + 8192 × 7168 × 24 / 8)
    budget = 0.9 * 150755819520 - 671e9 / 8 - (GIB + 8192 * 7168 * 24 / 8)
    assert pm.kv_budget_bytes(dep) == pytest.approx(budget)
    assert pm.kv_capacity_tokens(dep) == math.floor(budget / (16 * 70_272)) * 16
    # FP8 KV halves it: twice the tokens (±1 block of rounding)
    fp8 = dataclasses.replace(dep, kv_dtype_bytes=1.0)
    assert pm.kv_capacity_tokens(fp8) == math.floor(budget / (16 * 35_136)) * 16


def test_mla_attention_flops_per_pair() -> None:
    ds = model("deepseek-v3")
    # non-absorbed: 2 × 61 × 128 × (128 + 64) for QKᵀ + 2 × 61 × 128 × 128 for PV
    assert pm.attention_flops_per_pair(ds) == 2 * 61 * 128 * 192 + 2 * 61 * 128 * 128
    assert pm.attention_flops_per_pair(model("llama-3.1-8b")) == 4 * 32 * 32 * 128


def test_mixed_precision_checkpoint_and_overrides() -> None:
    go = model("gpt-oss-120b")
    # BF16 dense part (116.83 − 128 × 0.89610624 = 2.12844B) + MXFP4 experts at 0.53125 B
    stored = (116.83 - 128 * 0.89610624) * 2 + 128 * 0.89610624 * 0.53125
    assert pm.weight_bytes(go) == pytest.approx(stored * 1e9)
    assert pm.weight_bytes(go) / GIB == pytest.approx(60.71, abs=0.01)  # the card's 60.8 GiB
    # an explicit precision applies to every parameter: INT4 with group scales 0.515625 B
    assert pm.weight_bytes(go, 0.515625) == pytest.approx(116.83e9 * 0.515625)


def test_precision_picks_the_tensor_peak() -> None:
    m = model("llama-3.1-8b")

    def peak(g: str, precision: str) -> float:
        return Deployment(
            gpu=gpu(g),
            model=m,
            weight_dtype_bytes=pm.capacity.bytes_per_param(precision),
            weight_precision=precision,
        ).peak_flops

    assert peak("A100-SXM-80GB", "int8") == 624e12  # W8A8 on the INT8 tensor cores
    assert peak("A100-SXM-80GB", "fp8") == 312e12  # no FP8 on Ampere: BF16 kernels
    assert peak("H100-SXM-80GB", "fp8") == 1979e12
    assert peak("H100-SXM-80GB", "int4") == 989.5e12  # weight-only: dequantised to BF16
    assert peak("Jetson-AGX-Orin-64GB", "int8") == 85e12
    # INT4 weights keep a 16-bit KV cache; an FP8 override sets the KV dtype too
    int4 = Deployment(gpu=gpu("H100-SXM-80GB"), model=m, weight_dtype_bytes=0.515625)
    assert int4.kv_bytes_per_elem == 2.0
    assert pm.kv_budget_bytes(int4) == pytest.approx(
        0.9 * 85520809984 - 8.03e9 * 0.515625 - (GIB + 8192 * 4096 * 24)
    )
