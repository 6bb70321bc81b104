"""analysis.metrics against hand-computed values (DESIGN §5)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis import metrics


def test_request_tpot() -> None:
    # (E2E − TTFT) / (output_tokens − 1) = (1000 − 100) / 9
    assert metrics.request_tpot_ms(1000.0, 100.0, 10) == pytest.approx(100.0)
    assert metrics.request_tpot_ms(1000.0, 100.0, 1) is None
    assert metrics.request_tpot_ms(None, 100.0, 10) is None


@pytest.mark.parametrize(
    ("values", "p", "expected"),
    [
        ([1, 2, 3, 4], 50, 2.5),  # midway between ranks 2 and 3
        ([1, 2, 3, 4], 99, 3.97),  # rank 0.99 × 3 = 2.97 → 3 + 0.97 × (4 − 3)
        ([10, 20, 30, 40, 50], 90, 46.0),  # rank 3.6 → 40 + 0.6 × 10
        ([10, 20, 30, 40, 50], 0, 10.0),
        ([10, 20, 30, 40, 50], 100, 50.0),
        ([7], 99, 7.0),
        ([3, None, 1, float("nan"), 2], 50, 2.0),  # missing values ignored, order irrelevant
    ],
)
def test_percentile_linear_interpolation(
    values: list[float | None], p: float, expected: float
) -> None:
    assert metrics.percentile(values, p) == pytest.approx(expected)


def test_percentile_of_nothing_is_none() -> None:
    assert metrics.percentile([], 50) is None
    assert metrics.percentile([None, float("nan")], 99) is None


def test_percentile_rejects_out_of_range() -> None:
    with pytest.raises(ValueError, match=r"0\.\.100"):
        metrics.percentile([1.0], 101)


def test_percentile_accepts_a_series() -> None:
    assert metrics.percentile(pd.Series([4.0, 1.0, 2.0, 3.0]), 25) == pytest.approx(1.75)


@pytest.mark.parametrize(
    ("p", "n", "low"),
    [
        (99, 99, True),
        (99, 100, False),
        (99, 5000, False),
        (99.9, 999, True),
        (99.9, 1000, False),
        (50, 1, True),
        (50, 2, False),
        (90, 9, True),
        (90, 10, False),
    ],
)
def test_low_confidence(p: float, n: int, low: bool) -> None:
    assert metrics.low_confidence(p, n) is low


def test_p99_needs_100_samples() -> None:
    assert metrics.min_samples_for(99) == metrics.LOW_CONFIDENCE_P99_SAMPLES == 100


def test_distribution() -> None:
    d = metrics.distribution([1.0, 2.0, 3.0, 4.0, None])
    assert d.n == 4
    assert d.mean == pytest.approx(2.5)
    assert (d.p50, d.p90, d.p95, d.p99) == pytest.approx((2.5, 3.7, 3.85, 3.97))
    assert d.p99_low_confidence
    assert not metrics.distribution(np.arange(100.0)).p99_low_confidence
    empty = metrics.distribution([])
    assert empty.n == 0 and empty.p50 is None and empty.p99_low_confidence


def test_interactivity() -> None:
    assert metrics.interactivity_tok_s(20.0) == pytest.approx(50.0)
    assert metrics.interactivity_tok_s(0.0) is None
    assert metrics.interactivity_tok_s(None) is None


def _requests() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "status": ["ok", "ok", "ok", "ok", "error", "timeout"],
            "sent_at": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
            "done_at": [2.0, 3.0, 4.0, 5.0, 4.5, 10.0],
            "input_tokens": [100, 200, 300, 400, 500, 600],
            "output_tokens": [10, 20, 30, 40, 0, 5],
            "ttft_ms": [10.0, 20.0, 30.0, 40.0, None, 999.0],
            "tpot_ms": [5.0, 5.0, 10.0, 10.0, None, 50.0],
            "e2e_ms": [100.0, 200.0, 300.0, 400.0, 500.0, 5000.0],
        }
    )


def test_run_summary_counts_successful_requests_over_the_duration() -> None:
    s = metrics.run_summary(_requests(), duration_s=20.0, gpu_count=2)
    assert (s.requests, s.ok, s.errors) == (6, 4, 2)
    assert s.error_rate == pytest.approx(2 / 6)
    assert s.input_tokens == 1000 and s.output_tokens == 100
    assert s.request_throughput == pytest.approx(4 / 20)
    assert s.output_throughput == pytest.approx(100 / 20)
    assert s.total_token_throughput == pytest.approx(1100 / 20)
    assert s.output_throughput_per_gpu == pytest.approx(100 / 20 / 2)
    # latencies of successful requests only: the timeout's 999 ms TTFT is left out
    assert s.ttft_ms.n == 4
    assert s.ttft_ms.p50 == pytest.approx(25.0)
    assert s.ttft_ms.p99 == pytest.approx(39.7)
    assert s.tpot_ms.p50 == pytest.approx(7.5)
    assert s.interactivity_tok_s == pytest.approx(1000 / 7.5)
    assert s.e2e_ms.mean == pytest.approx(250.0)


def test_run_summary_duration_defaults_to_first_send_to_last_completion() -> None:
    s = metrics.run_summary(_requests())
    assert s.duration_s == pytest.approx(10.0)
    assert s.output_throughput == pytest.approx(10.0)
    assert s.output_throughput_per_gpu is None


def test_run_summary_of_an_empty_run() -> None:
    s = metrics.run_summary(pd.DataFrame({"status": pd.Series([], dtype="object")}))
    assert (s.requests, s.ok, s.errors, s.error_rate) == (0, 0, 0, None)
    assert s.duration_s is None and s.output_throughput is None
    assert s.ttft_ms.n == 0 and s.interactivity_tok_s is None
    assert math.isclose(s.output_tokens, 0)


def test_requests_tpot_ms_is_request_tpot_ms_over_arrays() -> None:
    # (100 − 20) / (5 − 1) = 20; (100 − 20) / (2 − 1) = 80; 1 token, no E2E, no TTFT → undefined
    e2e = np.array([100.0, 100.0, 100.0, np.nan, 100.0])
    ttft = np.array([20.0, 20.0, 20.0, 20.0, np.nan])
    out = np.array([5.0, 2.0, 1.0, 5.0, 5.0])
    got = metrics.requests_tpot_ms(e2e, ttft, out)
    assert got[:2].tolist() == [20.0, 80.0]
    assert np.isnan(got[2:]).all()
    one_by_one = [
        metrics.request_tpot_ms(None if np.isnan(e) else e, None if np.isnan(t) else t, int(o))
        for e, t, o in zip(e2e, ttft, out, strict=True)
    ]
    assert [np.nan if v is None else v for v in one_by_one][:2] == got[:2].tolist()
    assert one_by_one[2:] == [None, None, None]
