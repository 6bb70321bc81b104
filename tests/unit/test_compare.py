"""analysis.compare: series, curves, Pareto frontier, bootstrap CIs (hand-computed cases)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from analysis import compare
from errors import ConfigError


def _runs() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run_id": ["a32", "a1", "a8", "b4"],
            "framework": ["sim", "sim", "sim", "vllm"],
            "model": ["m", "m", "m", "m"],
            "gpu_name": ["H100", "H100", "H100", "A100"],
            "gpu_count": [1.0, 1.0, 1.0, 2.0],
            "engine_params": [
                '{"prefix_caching": true, "max_batch_size": 256}',
                '{"max_batch_size": 256, "prefix_caching": true}',
                '{"max_batch_size": 256, "prefix_caching": true}',
                None,
            ],
            "arrival": ["concurrency", "concurrency", "concurrency", "poisson"],
            "concurrency": [32.0, 1.0, 8.0, None],
            "target_rate": [None, None, None, 4.0],
            "tpot_p50_ms": [20.0, 5.0, 10.0, 0.0],
        }
    )


def _row(i: int) -> dict[str, Any]:
    return {str(k): v for k, v in _runs().iloc[i].to_dict().items()}


def test_series_labels_by_grouping() -> None:
    row = _row(0)
    assert (
        compare.series_label(row, "configuration")
        == "sim · m · max_batch_size=256 prefix_caching=on"
    )
    assert compare.series_label(row, "framework") == "sim"
    assert compare.series_label(_row(3), "gpu") == "2× A100"
    with pytest.raises(ConfigError, match="configuration, framework, model, gpu"):
        compare.series_label(row, "colour")


def test_curves_sort_by_series_and_load() -> None:
    out = compare.curves(_runs(), "configuration")
    assert out["run_id"].tolist() == ["a1", "a8", "a32", "b4"]
    assert out["load"].tolist() == [1.0, 8.0, 32.0, 4.0]
    assert out["load_kind"].tolist() == ["concurrency"] * 3 + ["rate"]
    # interactivity = 1000 / median TPOT; undefined for TPOT 0
    assert out["output_tokens_per_s_per_user"].iloc[:3].tolist() == [200.0, 100.0, 50.0]
    assert np.isnan(out["output_tokens_per_s_per_user"].iloc[3])
    assert compare.load_axis_title(["concurrency", "rate"]).startswith("load")


def test_pareto_front() -> None:
    # (x, y): A(1, 10) B(2, 8) C(3, 3) D(1.5, 7) dominated by B; E(3, 3) ties C; F NaN
    x = [1.0, 2.0, 3.0, 1.5, 3.0, np.nan]
    y = [10.0, 8.0, 3.0, 7.0, 3.0, 9.0]
    assert compare.pareto_front(x, y).tolist() == [True, True, True, False, True, False]
    assert compare.pareto_front([1.0, 2.0], [1.0, 2.0]).tolist() == [False, True]


def test_bootstrap_is_seeded_and_detects_a_shift() -> None:
    rng = np.random.default_rng(1)
    base = rng.normal(100.0, 10.0, 2000)
    cand = base + 20.0  # every value 20 ms slower
    ci = compare.bootstrap_diff(base, cand, 50, n_boot=300, seed=7)
    assert ci.diff == pytest.approx(20.0)
    assert ci.low is not None and ci.high is not None
    assert ci.low > 0 and ci.verdict == "regressed"
    again = compare.bootstrap_diff(base, cand, 50, n_boot=300, seed=7)
    assert (again.low, again.high) == (ci.low, ci.high)
    better = compare.bootstrap_diff(cand, base, 50, n_boot=300, seed=7)
    assert better.verdict == "improved"


def test_bootstrap_ci_coverage_on_a_known_distribution() -> None:
    """Two samples from the same exponential(mean 10): the true P90 difference is 0. A 90% CI
    must contain 0 in about 90% of trials (binomial: 60 trials, accept 45–60)."""
    rng = np.random.default_rng(42)
    covered = 0
    trials = 60
    for t in range(trials):
        a = rng.exponential(10.0, 400)
        b = rng.exponential(10.0, 400)
        ci = compare.bootstrap_diff(a, b, 90, n_boot=300, confidence=0.9, seed=t)
        assert ci.low is not None and ci.high is not None
        covered += ci.low <= 0.0 <= ci.high
    assert 45 <= covered <= trials
    assert ci.low is not None and ci.high is not None
    # and the interval is not trivially wide: the P90 of exp(10) is 23.0 with SE ≈ 1.5
    assert ci.high - ci.low < 15


def test_bootstrap_not_enough_data_and_argument_checks() -> None:
    ci = compare.bootstrap_diff([1.0], [2.0, 3.0], 50)
    assert ci.verdict == "not enough data" and ci.diff == pytest.approx(1.5)
    with pytest.raises(ConfigError, match="percentile"):
        compare.bootstrap_diff([1.0, 2.0], [1.0, 2.0], 100)
    with pytest.raises(ConfigError, match="n_boot"):
        compare.bootstrap_diff([1.0, 2.0], [1.0, 2.0], 50, n_boot=1)


def test_compare_samples_table() -> None:
    base = {"ttft_ms": np.arange(1.0, 101.0), "tpot_ms": np.full(50, 5.0)}
    cand: dict[str, Any] = {
        "ttft_ms": np.arange(1.0, 101.0),
        "tpot_ms": np.full(50, 5.0),
        "e2e_ms": [1.0],
    }
    df = compare.compare_samples(base, cand, (50.0, 99.0), n_boot=50)
    assert df[["metric", "percentile"]].values.tolist() == [
        ["ttft_ms", 50.0],
        ["ttft_ms", 99.0],
        ["tpot_ms", 50.0],
        ["tpot_ms", 99.0],
    ]
    assert df["baseline"].tolist()[:2] == pytest.approx([50.5, 99.01])
    assert (df["diff"] == 0).all()
    # identical constant samples: interval [0, 0] → no significant change
    assert df["verdict"].iloc[2] == "no significant change"


# --- precision grouping and fair-comparison warnings -------------------------------------------


def test_precision_grouping_labels_weights_and_kv_cache() -> None:
    row = {"precision": "fp8", "kv_cache_dtype": "fp8"}
    assert compare.series_label(row, "precision") == "fp8 · fp8-kv"
    assert compare.series_label({"precision": "bf16"}, "precision") == "bf16"
    assert compare.series_label({"kv_cache_dtype": "auto"}, "precision") == "? · auto-kv"
    assert compare.series_label({"precision": None, "kv_cache_dtype": np.nan}, "precision") == "?"
    assert "precision" in compare.GROUPINGS


def _fair(**cols: list[Any]) -> pd.DataFrame:
    n = len(next(iter(cols.values())))
    base: dict[str, list[Any]] = {
        "run_id": [f"r{i}" for i in range(n)],
        "framework": ["sim"] * n,
        "model": ["m"] * n,
        "precision": ["bf16"] * n,
        "kv_cache_dtype": ["auto"] * n,
        "max_output_tokens": [256] * n,
        "workload": ["mixed"] * n,
        "gpu_name": ["H100"] * n,
        "gpu_count": [1.0] * n,
        "engine_params": [None] * n,
    }
    base.update(cols)
    return pd.DataFrame(base)


def test_matching_runs_do_not_warn_whatever_their_framework_and_engine_params() -> None:
    runs = _fair(
        framework=["sim", "vllm", "sglang"],
        engine_params=['{"max_batch_size": 8}', '{"max_batch_size": 64}', None],
    )
    assert compare.comparison_warnings(runs) == []
    assert compare.comparison_warnings(runs.iloc[:0]) == []


def test_each_differing_dimension_warns_with_its_values_and_runs() -> None:
    runs = _fair(
        model=["llama", "llama", "qwen"],
        precision=["fp8", "bf16", "bf16"],
        kv_cache_dtype=["fp8", "auto", "auto"],
        max_output_tokens=[256, 128, 256],
        workload=["mixed", "mixed", "short-in-short-out"],
        gpu_name=["H100", "H100", "H100"],
        gpu_count=[1.0, 2.0, 1.0],
    )
    found = compare.comparison_warnings(runs)
    assert [w.dimension for w in found] == [
        "model",
        "precision",
        "max output tokens",
        "workload",
        "GPU",
    ]
    model, precision, tokens, workload, gpu = found
    assert [(v.value, v.runs) for v in model.values] == [
        ("llama", ("r0", "r1")),
        ("qwen", ("r2",)),
    ]
    assert model.message == "Model differs: llama (2 runs), qwen (1 run)"
    assert [(v.value, v.runs) for v in precision.values] == [
        ("fp8 · fp8-kv", ("r0",)),
        ("bf16 · auto-kv", ("r1", "r2")),
    ]
    assert tokens.message == "Max output tokens differs: 256 (2 runs), 128 (1 run)"
    assert [v.value for v in workload.values] == ["mixed", "short-in-short-out"]
    assert gpu.message == "GPU differs: H100 (2 runs), 2× H100 (1 run)"


def test_the_kv_cache_dtype_alone_makes_precision_differ() -> None:
    runs = _fair(kv_cache_dtype=["auto", "fp8"])
    [w] = compare.comparison_warnings(runs)
    assert w.dimension == "precision"
    assert w.message == "Precision differs: bf16 · auto-kv (1 run), bf16 · fp8-kv (1 run)"


def test_unknown_values_warn_only_beside_known_ones() -> None:
    # precision unknown for 2 of 3 runs, the third's known: warn, naming the unknown share
    runs = _fair(precision=["fp8", None, None], kv_cache_dtype=[None, None, np.nan])
    [w] = compare.comparison_warnings(runs)
    assert w.message == "Precision unknown for 2 of 3 runs (the others: fp8)"
    assert [(v.value, v.runs) for v in w.values] == [("fp8", ("r0",)), ("unknown", ("r1", "r2"))]
    # unknown everywhere: nothing to say
    runs = _fair(
        precision=[None] * 3,
        kv_cache_dtype=[None] * 3,
        max_output_tokens=[None, pd.NA, np.nan],
        gpu_name=[None] * 3,
        gpu_count=[np.nan] * 3,
    )
    assert compare.comparison_warnings(runs) == []
    # two known values differ and one run does not say
    runs = _fair(model=["a", "b", None])
    [w] = compare.comparison_warnings(runs)
    assert w.message == "Model differs: a (1 run), b (1 run); unknown for 1 run"
    assert w.values[-1] == compare.DimensionValue("unknown", ("r2",))


def test_absent_columns_are_unknown() -> None:
    runs = pd.DataFrame({"run_id": ["a", "b"], "model": ["m", "m"]})
    assert compare.comparison_warnings(runs) == []
