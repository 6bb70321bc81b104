"""analysis.sweep_order: the prior's ranking, ordering, pruning and the efficient plan."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pytest

import seeds
from analysis.capacity import ModelShape
from analysis.perf_model import GpuSpec
from analysis.sweep_order import EfficientPlan, can_beat, order_points, prior_capacity
from errors import ConfigError

L40S = GpuSpec.from_entry(seeds.entry("gpus", "L40S-48GB"))
L4 = GpuSpec.from_entry(seeds.entry("gpus", "L4-24GB"))
H100 = GpuSpec.from_entry(seeds.entry("gpus", "H100-SXM-80GB"))
LLAMA8 = ModelShape.from_entry(seeds.entry("models", "llama-3.1-8b"))
LLAMA70 = ModelShape.from_entry(seeds.entry("models", "llama-3.1-70b"))
WL: dict[str, Any] = {"input_tokens": 1024, "output_tokens": 512}
SLO: tuple[float | None, float | None, float] = (2000.0, 100.0, 99.0)


def prior(
    gpu: GpuSpec = L40S,
    model: ModelShape = LLAMA8,
    slo: tuple[float | None, float | None, float] = SLO,
    wl: Mapping[str, Any] = WL,
    **params: object,
) -> float:
    return prior_capacity(params, gpu, model, wl, slo)


# --- the prior ---------------------------------------------------------------------------------


def test_prior_is_positive_and_finite() -> None:
    p = prior(max_batch_size=64)
    assert 0.1 < p < 100 and math.isfinite(p)


def test_prior_grows_with_batch_size_until_the_kv_binds() -> None:
    values = [prior(max_batch_size=b, kv_memory_fraction=0.9) for b in (8, 16, 32, 64, 128)]
    assert values == sorted(values)
    assert values[-1] > 2 * values[1]
    # With a small KV budget the batch is capped by memory: 64 and 128 seqs give the same prior.
    assert prior(max_batch_size=64, kv_memory_fraction=0.5) == pytest.approx(
        prior(max_batch_size=128, kv_memory_fraction=0.5)
    )


def test_prior_takes_the_kv_blocks_an_engine_was_given() -> None:
    # 2,048 blocks × 16 tokens = 32,768 tokens hold ~21 sequences of 1024 + 512/2 + 8 tokens:
    # fewer than max_batch_size 256, so the prior falls; as many blocks as the budget gives
    # changes nothing, and more blocks than 64 sequences need cannot raise a batch-64 prior
    free = prior(max_batch_size=256)
    small = prior(max_batch_size=256, num_gpu_blocks=2048)
    assert 0 < small < free / 2
    assert prior(max_batch_size=64, num_gpu_blocks=10**6) == pytest.approx(prior(max_batch_size=64))
    assert prior(max_batch_size=256, num_gpu_blocks=60) == 0.0  # 960 tokens: no request fits


def test_prior_grows_with_kv_memory_when_memory_binds() -> None:
    low = prior(max_batch_size=128, kv_memory_fraction=0.5)
    high = prior(max_batch_size=128, kv_memory_fraction=0.9)
    assert high > low


def test_prior_ranks_gpus_and_models() -> None:
    assert prior(gpu=H100) > prior(gpu=L40S)
    assert prior(model=LLAMA70, gpu=H100, tensor_parallel=4) > 0
    assert prior(model=LLAMA70, gpu=H100, tensor_parallel=4) < prior(gpu=H100)


def test_prior_is_zero_when_it_cannot_serve() -> None:
    assert prior(model=LLAMA70, gpu=L4) == 0.0  # does not fit
    assert prior(gpu=L4, slo=(2000.0, 50.0, 99.0)) == 0.0  # one decode step alone is > 50 ms
    assert prior(max_model_len=1024) == 0.0  # 1024 in + 512 out do not fit
    assert prior(ctx_size=8192, max_batch_size=8) == 0.0  # 1024 tokens per llama.cpp slot
    assert prior(ctx_size=8192 * 8, max_batch_size=8) > 0.0


def test_prior_tighter_slo_lowers_it() -> None:
    loose = prior(slo=(2000.0, 100.0, 90.0))
    tight = prior(slo=(2000.0, 100.0, 99.0))
    tighter = prior(slo=(2000.0, 70.0, 99.0))
    assert loose > tight > tighter > 0
    assert prior(slo=(None, None, 99.0)) >= loose


def test_prefix_caching_helps_only_with_shared_prefixes() -> None:
    shared = {"input_tokens": 4096, "output_tokens": 64, "prefix_tokens": 3072}
    slo = (500.0, 100.0, 99.0)
    on = prior(wl=shared, slo=slo, prefix_caching=True)
    off = prior(wl=shared, slo=slo, prefix_caching=False)
    assert on > off
    assert prior(prefix_caching=True) == prior(prefix_caching=False)


def test_workload_lengths_accept_distributions() -> None:
    dist = {"input_tokens": {"dist": "lognormal", "mean": 1024}, "output_tokens": {"mean": 512}}
    assert prior(wl=dist) == prior()
    with pytest.raises(ConfigError, match="input_tokens"):
        prior(wl={"output_tokens": 5})
    with pytest.raises(ConfigError, match="percentile"):
        prior(slo=(1.0, 1.0, 50.0))


# --- ordering and pruning ----------------------------------------------------------------------


def test_order_points_best_prior_first_ties_in_grid_order() -> None:
    pts = [{"a": i} for i in range(5)]
    assert order_points(pts, [1.0, 3.0, 2.0, 3.0, 0.0]) == [1, 3, 2, 0, 4]
    with pytest.raises(ConfigError):
        order_points(pts, [1.0])


def test_can_beat() -> None:
    assert can_beat(8.0, 10.0, optimism=0.25)  # 8 × 1.25 = 10 ≥ 10
    assert not can_beat(7.9, 10.0, optimism=0.25)
    assert can_beat(10.0, 10.0, optimism=0.0)
    with pytest.raises(ConfigError):
        can_beat(1.0, 1.0, optimism=-0.1)


def test_efficient_plan_hand_checked() -> None:
    # priors:       0    1    2    3    4    5
    plan = EfficientPlan.from_priors([2.0, 6.0, 4.0, 5.0, 1.0, 3.0])
    assert plan.order() == [1, 3, 2, 5, 0, 4]
    measured: dict[int, float | None] = {}
    assert plan.next_point(measured) == 1
    measured[1] = 6.6  # ratio 1.1; one measurement: nothing pruned yet
    assert plan.optimism(measured) == math.inf
    assert plan.next_point(measured) == 3
    measured[3] = 5.5  # ratio 1.1 → optimism max(0.25, 1.1 × 1.1 − 1 = 0.21) = 0.25
    assert plan.optimism(measured) == pytest.approx(0.25)
    assert plan.incumbent(measured) == (1, 6.6)
    # 4 × 1.25 = 5 < 6.6: point 2 and everything after it are pruned
    assert plan.next_point(measured) is None
    assert plan.pruned(measured) == [2, 5, 0, 4]


def test_efficient_plan_optimism_follows_the_prior_error() -> None:
    plan = EfficientPlan.from_priors([2.0, 6.0, 4.0, 5.0, 1.0, 3.0])
    # The prior is pessimistic by 2×: optimism 1.1 × 2 − 1 = 1.2, so 4 × 2.2 = 8.8 < 12 is
    # pruned but a point with prior 6 would not be.
    measured: dict[int, float | None] = {1: 12.0, 3: 10.0}
    assert plan.optimism(measured) == pytest.approx(1.2)
    assert plan.next_point(measured) is None
    plan2 = EfficientPlan.from_priors([2.0, 6.0, 5.5, 5.0, 1.0, 3.0])
    assert plan2.next_point({1: 12.0, 3: 10.0}) == 2  # 5.5 × 2.2 = 12.1 ≥ 12


def test_efficient_plan_no_capacity_and_zero_priors() -> None:
    plan = EfficientPlan.from_priors([0.0, 3.0, 2.0])
    # nothing passed anywhere yet: no incumbent, keep going in prior order
    assert plan.next_point({1: None}) == 2
    assert plan.next_point({1: None, 2: None}) == 0
    assert plan.next_point({1: None, 2: None, 0: None}) is None
    # a zero prior (does not fit) is pruned once anything has a capacity
    assert plan.pruned({1: 3.0, 2: 2.5}) == [0]


def test_expected_start_uses_the_median_ratio() -> None:
    plan = EfficientPlan.from_priors([2.0, 4.0, 5.0, 1.0])
    assert plan.expected(0, {}) is None
    assert plan.expected(0, {2: 10.0}) == pytest.approx(4.0)
    assert plan.expected(0, {2: 10.0, 1: 6.0, 3: None}) == pytest.approx(2.0 * 1.75)


def test_plan_validation() -> None:
    with pytest.raises(ConfigError):
        EfficientPlan.from_priors([1.0, -1.0])
    with pytest.raises(ConfigError):
        EfficientPlan.from_priors([1.0], margin=0.5)


def test_prior_for_moe_and_mla_models() -> None:
    import dataclasses

    qwen = ModelShape.from_entry(seeds.entry("models", "qwen3-30b-a3b"))
    dense = dataclasses.replace(
        qwen, experts=0, experts_per_token=0, expert_params_b=0.0, active_params_b=None
    )
    tight = (2000.0, 20.0, 99.0)  # a 20 ms TPOT: the dense 30B model's step alone is ~32 ms
    moe_prior = prior(gpu=H100, model=qwen, slo=tight)
    assert moe_prior > 0.5
    assert prior(gpu=H100, model=dense, slo=tight) == 0.0
    # DeepSeek-V3 (MLA, FP8) fits 8 × H200 and not one
    h200 = GpuSpec.from_entry(seeds.entry("gpus", "H200-SXM-141GB"))
    ds = ModelShape.from_entry(seeds.entry("models", "deepseek-v3"))
    assert prior(gpu=h200, model=ds, tensor_parallel=8) > 0.0
    assert prior(gpu=h200, model=ds, tensor_parallel=1) == 0.0


def test_prior_reads_weight_precision_and_kv_dtype() -> None:
    base = prior(gpu=L4, model=LLAMA8, max_batch_size=64)
    # INT4 weights (0.515625 B with group scales) leave more KV and read fewer bytes per step
    assert prior(gpu=L4, model=LLAMA8, max_batch_size=64, precision="int4") > base
    assert prior(gpu=L4, model=LLAMA8, max_batch_size=64, weight_dtype_bytes=0.515625) > base
    with pytest.raises(ConfigError, match="precision 'int3'"):
        prior(gpu=L4, model=LLAMA8, precision="int3")
