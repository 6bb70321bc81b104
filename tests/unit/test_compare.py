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
