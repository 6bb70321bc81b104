"""analysis.plan against hand arithmetic: replicas, GPUs, cost per hour and per 1M tokens,
headroom, measured-vs-model labelling with the prediction's error, the memory rows and the
options that do not fit (weights, KV cache, TP); and services.views.plan's spec round trip and
URL parsing (a bad value is a message, never an exception)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pytest

from analysis import plan as planner
from analysis.capacity import ModelShape
from analysis.perf_model import GIB, GpuSpec
from errors import InputError
from services.views.plan import PlanSelection, PlanSpec, spec_params

# Llama-3.1-8B's shape (seeds/models.toml) and a GPU of exactly 80 GiB.
LLAMA_8B = ModelShape(
    name="llama-3.1-8b",
    params_b=8.0,
    layers=32,
    hidden_size=4096,
    heads=32,
    kv_heads=8,
    head_dim=128,
)
GPU_80 = GpuSpec(name="G80", memory_bytes=80 * GIB, bandwidth_bytes_s=3.35e12, bf16_tflops=989.0)
GPU_16 = GpuSpec(name="G16", memory_bytes=16 * GIB, bandwidth_bytes_s=3.35e12, bf16_tflops=989.0)
LENGTHS = planner.Lengths(1000, 200)


# --- arithmetic ----------------------------------------------------------------------------------


def test_replicas_round_up_the_peak_with_headroom() -> None:
    # 40 req/s × 1.2 = 48 req/s at 10 req/s per replica: 4.8 → 5 replicas
    assert planner.replicas_needed(40, 0.2, 10.0) == 5
    # exactly divisible: 48 / 12 = 4, not 5 (no float round-up)
    assert planner.replicas_needed(40, 0.2, 12.0) == 4
    assert planner.replicas_needed(40, 0.0, 12.0) == 4  # 3.33 → 4
    assert planner.replicas_needed(0.5, 0.0, 100.0) == 1
    with pytest.raises(ValueError):
        planner.replicas_needed(40, 0.2, 0.0)


def test_cost_per_hour_and_per_million_tokens() -> None:
    assert planner.cost_per_hour(8, 2.5) == 20.0
    assert planner.cost_per_hour(8, None) is None
    # $20/hour at 15 req/s × 200 output tokens = 10.8M tokens/hour → $1.85185 per 1M
    assert planner.cost_per_million_tokens(20.0, 15.0, 200) == pytest.approx(20 / 10.8)
    # input + output: 15 × 3600 × 1200 = 64.8M tokens/hour → $0.308642 per 1M
    assert planner.cost_per_million_tokens(20.0, 15.0, 1200) == pytest.approx(20 / 64.8)
    assert planner.cost_per_million_tokens(None, 15.0, 200) is None


def test_prediction_error_is_relative_to_the_measurement() -> None:
    assert planner.prediction_error(12.0, 10.0) == pytest.approx(0.2)
    assert planner.prediction_error(8.0, 10.0) == pytest.approx(-0.2)
    assert planner.prediction_error(None, 10.0) is None
    assert planner.prediction_error(8.0, 0.0) is None


def test_prediction_error_against_a_measured_bracket() -> None:
    # the capacity lies between the last passing load (10 req/s) and the first failing (16)
    assert planner.prediction_error(12.0, 10.0, 16.0) == 0.0
    assert planner.prediction_error(16.0, 10.0, 16.0) == 0.0
    assert planner.prediction_error(20.0, 10.0, 16.0) == pytest.approx(0.25)
    assert planner.prediction_error(8.0, 10.0, 16.0) == pytest.approx(-0.2)
    # an upper bound below the measurement (noise) is ignored
    assert planner.prediction_error(12.0, 10.0, 9.0) == pytest.approx(0.2)


def test_demand_and_lengths_reject_what_cannot_be_planned() -> None:
    assert planner.Demand(40, 15, 0.25).sized_qps == 50.0
    with pytest.raises(InputError, match="peak QPS is -1"):
        planner.Demand(-1, 1)
    with pytest.raises(InputError, match="above the peak"):
        planner.Demand(4, 5)
    with pytest.raises(InputError, match=r"headroom is -0\.1"):
        planner.Demand(4, 2, -0.1)
    with pytest.raises(InputError, match="average QPS is nan"):
        planner.Demand(4, math.nan)
    with pytest.raises(InputError, match="input mean is 0"):
        planner.Lengths(0, 100)
    assert planner.Lengths(1000.4, 199.8).tokens_per_sequence == 1201


# --- memory --------------------------------------------------------------------------------------


def test_memory_row_against_hand_arithmetic() -> None:
    row = planner.memory_row(LLAMA_8B, GPU_80, 2, "fp16", LENGTHS, planner.Engine())
    weights = 8e9 * 2  # 16.0e9 B = 14.90 GiB
    assert row.weight_gib == pytest.approx(weights / GIB)
    assert row.weight_gib_per_gpu == pytest.approx(weights / 2 / GIB)
    # 2 × 32 layers × (8 KV heads / TP 2) × 128 × 2 B = 65,536 B per token per GPU
    assert row.kv_bytes_per_token == 65536
    acts = GIB + 8192 * 4096 * 24 / 2  # perf_model.activation_bytes at TP 2
    budget = 0.9 * 80 * GIB - weights / 2 - acts
    assert row.kv_budget_gib == pytest.approx(budget / GIB)
    # 1200 tokens = 75 blocks of 16; blocks = floor(budget / (16 × 65,536))
    assert row.max_sequences == math.floor(budget / (16 * 65536)) // 75
    assert row.fits and row.why_not == ""


def test_weights_larger_than_the_memory_fraction_do_not_fit() -> None:
    row = planner.memory_row(LLAMA_8B, GPU_16, 1, "fp16", LENGTHS, planner.Engine())
    assert not row.fits and row.reason == "weights"
    assert row.why_not == (
        "weights: 14.9 GiB at FP16/BF16 are 14.9 GiB per GPU at TP 1, more than "
        "0.9 × 16.0 GiB = 14.4 GiB"
    )
    # INT4: 8e9 × (0.5 + 2/128) B = 3.84 GiB fits
    int4 = planner.memory_row(LLAMA_8B, GPU_16, 1, "int4", LENGTHS, planner.Engine())
    assert int4.weight_gib == pytest.approx(8e9 * 0.515625 / GIB)
    assert int4.fits and int4.max_sequences > 0


def test_weights_that_leave_no_room_for_one_sequence_are_a_kv_problem() -> None:
    # INT8 weights 7.45 GiB + 1.75 GiB activations on 16 GiB at fraction 0.6 (9.6 GiB): 0.4 GiB
    # of KV holds 3,200 tokens at 128 KiB, fewer than one 100k-token sequence
    long = planner.Lengths(99_000, 1_000)
    row = planner.memory_row(
        LLAMA_8B, GPU_16, 1, "int8", long, planner.Engine(kv_memory_fraction=0.6)
    )
    assert not row.fits and row.reason == "KV cache"
    assert "less than one sequence of 100000 tokens at 128 KiB per token" in row.why_not


def test_tp_that_does_not_split_the_heads_does_not_fit() -> None:
    row = planner.memory_row(LLAMA_8B, GPU_80, 3, "fp16", LENGTHS, planner.Engine())
    assert not row.fits and row.reason == "TP"


# --- options -------------------------------------------------------------------------------------


class FakeModel:
    """A prediction of fixed req/s per replica per TP, recording what it was asked."""

    def __init__(self, per_tp: Mapping[int, float]) -> None:
        self.per_tp = per_tp
        self.asked: list[tuple[str, int, str, dict[str, Any], tuple[float, float]]] = []

    def __call__(
        self,
        gpu: GpuSpec,
        tp: int,
        precision: str,
        params: Mapping[str, Any],
        workload: tuple[float, float],
    ) -> float:
        self.asked.append((gpu.name, tp, precision, dict(params), workload))
        return self.per_tp.get(tp, 0.0)


def _inputs(**kw: Any) -> planner.PlanInputs:
    base: dict[str, Any] = {
        "shape": LLAMA_8B,
        "gpus": (GPU_80,),
        "tps": (1, 2),
        "precisions": ("fp16",),
        "demand": planner.Demand(40, 15, 0.2),
        "lengths": LENGTHS,
        "prices": {"G80": 2.5},
    }
    return planner.PlanInputs(**(base | kw))


def test_modelled_options_hand_computed() -> None:
    model = FakeModel({1: 10.0, 2: 25.0})
    options = planner.plan_options(_inputs(), [], model)
    by_tp = {o.tp: o for o in options}
    one, two = by_tp[1], by_tp[2]
    assert one.label == two.label == "model"
    # TP1: 48 / 10 → 5 replicas, 5 GPUs, $12.50/hour; TP2: 48 / 25 → 2 replicas, 4 GPUs, $10
    assert (one.replicas, one.gpus, one.cost_per_hour) == (5, 5, 12.5)
    assert (two.replicas, two.gpus, two.cost_per_hour) == (2, 4, 10.0)
    assert two.cost_per_1m_output == pytest.approx(10.0 / (15 * 3600 * 200) * 1e6)
    assert two.cost_per_1m_total == pytest.approx(10.0 / (15 * 3600 * 1200) * 1e6)
    assert [o.tp for o in options] == [2, 1]  # cheapest first
    assert planner.best_option(options) == two
    assert one.error is None and one.measured_rps is None and one.predicted_rps == 10.0
    # the model is asked at the plan's lengths and engine, with the KV dtype's bytes
    assert model.asked[0][4] == (1000, 200)
    assert model.asked[0][3]["kv_dtype_bytes"] == 2.0
    assert model.asked[0][3]["tensor_parallel"] == 1


def test_more_headroom_needs_more_replicas() -> None:
    model = FakeModel({1: 10.0})
    none = planner.plan_options(_inputs(tps=(1,), demand=planner.Demand(40, 15, 0.0)), [], model)
    half = planner.plan_options(_inputs(tps=(1,), demand=planner.Demand(40, 15, 0.5)), [], model)
    assert none[0].replicas == 4 and half[0].replicas == 6


def test_a_measurement_replaces_the_model_and_shows_its_error() -> None:
    model = FakeModel({1: 12.0, 2: 25.0})
    measured = planner.Measurement(
        config="vllm · llama-3.1-8b · max_batch_size=64",
        gpu="G80",
        tp=1,
        precision="fp16",
        capacity_rps=8.0,
        source="runs r1, r2",
        engine_params=(("max_batch_size", 64),),
        input_mean=1500.0,
        output_mean=210.0,
    )
    options = planner.plan_options(_inputs(), [measured], model)
    m = next(o for o in options if o.tp == 1)
    assert m.label == "measured" and m.config.startswith("vllm")
    assert m.capacity_rps == 8.0 and m.measured_rps == 8.0 and m.predicted_rps == 12.0
    assert m.error == pytest.approx(0.5)  # (12 − 8) / 8
    assert (m.replicas, m.gpus) == (6, 6)  # 48 / 8
    assert m.source == "runs r1, r2"
    # predicted at the measurement's own parameters and lengths
    asked = next(a for a in model.asked if a[1] == 1)
    assert asked[3]["max_batch_size"] == 64 and asked[4] == (1500.0, 210.0)
    assert m.note == "measured at mean input 1500 tokens (the plan: 1000)"
    # the unmeasured TP 2 stays the model's
    assert next(o for o in options if o.tp == 2).label == "model"


def test_options_that_do_not_fit_or_serve_nothing_are_kept_and_explained() -> None:
    options = planner.plan_options(
        _inputs(gpus=(GPU_16,), tps=(1, 2)), [], FakeModel({1: 10.0, 2: 0.0})
    )
    by_tp = {o.tp: o for o in options}
    assert by_tp[1].label == "does not fit" and by_tp[1].note.startswith("weights:")
    assert by_tp[1].gpus is None and by_tp[1].cost_per_hour is None
    assert by_tp[2].label == "model" and by_tp[2].capacity_rps is None
    assert by_tp[2].note == "the model finds no load meeting the SLO at these lengths"
    assert planner.best_option(options) is None


def test_run_precisions_map_onto_the_plan() -> None:
    assert planner.plan_precision(None) == "fp16"
    assert planner.plan_precision("bf16") == "fp16"
    assert planner.plan_precision("awq") == "int4"
    assert planner.plan_precision("w8a8") == "int8"
    assert planner.plan_precision("bitsandbytes") is None


def test_the_performance_model_gives_more_capacity_to_more_memory() -> None:
    """Same bandwidth and compute, 16 vs 80 GiB: the KV cache holds fewer sequences."""
    slo = planner.slo_targets(500.0, 50.0, 99.0, 1000)
    params = tuple(sorted(planner.Engine().params(1).items()))
    small = planner.predicted_capacity(GPU_16, LLAMA_8B, "int4", params, (1000, 200), slo)
    big = planner.predicted_capacity(GPU_80, LLAMA_8B, "int4", params, (1000, 200), slo)
    assert 0 < small < big
    assert planner.predicted_capacity(GPU_16, LLAMA_8B, "fp16", params, (1000, 200), slo) == 0


def test_length_conditioned_ttft_is_taken_at_the_mean_input() -> None:
    assert planner.slo_targets(
        None, 40.0, 95.0, 2000, ttft_base_ms=200.0, ttft_ms_per_1k_input=100.0
    ) == (400.0, 40.0, 95.0)


# --- the spec and the URL ------------------------------------------------------------------------


def test_spec_round_trips_through_json_and_the_url() -> None:
    spec = PlanSpec(
        model="llama-3.1-70b",
        peak_qps=40,
        avg_qps=15,
        gpus=("H100-SXM-80GB", "L4-24GB"),
        tps=(2, 4),
        precisions=("int8",),
        headroom=0.3,
        lengths="run:abc",
    )
    assert PlanSpec.from_json(spec.to_json()) == spec
    assert PlanSelection.from_params(spec_params(spec)) == PlanSelection(spec=spec)
    params = spec_params(spec)
    assert params["gpus"] == "H100-SXM-80GB,L4-24GB" and params["tp"] == "2,4"


def test_no_url_parameters_give_the_default_plan() -> None:
    assert PlanSelection.from_params({}) == PlanSelection()


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"peak": "-3", "avg": "1"}, "peak QPS is -3.0"),
        ({"peak": "abc"}, "peak is 'abc'; accepted: a number"),
        ({"peak": "4", "avg": "8"}, "average QPS 8 is above the peak 4"),
        ({"tp": "1,x"}, "tp 'x' is not a whole number"),
        ({"precision": "fp3"}, "precision fp3; accepted: fp16, fp8, int8, int4"),
        ({"lengths": "file:x"}, "lengths 'file:x'; accepted: typed, run:<run id>"),
        ({"kvfrac": "1.5"}, "kv_memory_fraction is 1.5"),
    ],
)
def test_bad_url_values_become_a_message(params: dict[str, str], message: str) -> None:
    selection = PlanSelection.from_params(params)
    assert selection.problem is not None and message in selection.problem
    assert selection.spec == PlanSpec()


def test_a_spec_with_unknown_keys_is_refused() -> None:
    with pytest.raises(InputError, match="unknown keys: budget"):
        PlanSpec.from_json('{"model": "x", "budget": 3}')


def test_side_by_side_puts_tp_and_precision_in_one_grid() -> None:
    from services.views.plan import PlanView, side_by_side

    options = planner.plan_options(
        _inputs(gpus=(GPU_16,), tps=(1, 2), precisions=("fp16", "int4")),
        [],
        FakeModel({1: 10.0, 2: 25.0}),
    )
    view = PlanView(spec=PlanSpec(tps=(1, 2), precisions=("fp16", "int4")), options=tuple(options))
    grid = side_by_side(view).set_index(["GPU", "TP"])
    assert list(grid.columns) == ["FP16/BF16", "INT4"]
    assert grid.loc[("G16", 1), "FP16/BF16"] == "does not fit: weights"
    assert grid.loc[("G16", 1), "INT4"] == "5 (model)"  # ceil(48 / 10)
    assert grid.loc[("G16", 2), "INT4"] == "4 (model)"  # 2 replicas × TP 2


def test_the_best_option_is_the_cheapest_priced_one_else_the_fewest_gpus() -> None:
    gpu_b = GpuSpec(name="B", memory_bytes=80 * GIB, bandwidth_bytes_s=3e12, bf16_tflops=900.0)
    model = FakeModel({1: 10.0})
    # A: 5 GPUs at $3 = $15/hour; B: 5 GPUs, no price; C (G16 INT4): 5 GPUs at $2 = $10/hour
    priced = _inputs(
        gpus=(GPU_80, gpu_b, GPU_16),
        tps=(1,),
        precisions=("int4",),
        prices={"G80": 3.0, "G16": 2.0},
    )
    best = planner.best_option(planner.plan_options(priced, [], model))
    assert best is not None and (best.gpu, best.cost_per_hour) == ("G16", 10.0)
    unpriced = planner.best_option(
        planner.plan_options(_inputs(tps=(1, 2), prices={}), [], FakeModel({1: 10.0, 2: 30.0}))
    )
    assert unpriced is not None and (unpriced.tp, unpriced.gpus) == (2, 4)  # 2 × TP2 < 5 × TP1
