"""Length distributions and their KS distance, against hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis import length_mix as lm

INF = math.inf


def test_from_buckets_turns_cumulative_pairs_into_per_bucket_counts() -> None:
    # any order, cumulative; a rounding dip (9 after 10) is made monotone
    d = lm.from_buckets([(INF, 20.0), (100.0, 4.0), (1000.0, 10.0), (500.0, 10.0), (2000.0, 9.0)])
    assert d.edges == (100.0, 500.0, 1000.0, 2000.0, INF)
    assert d.counts == (4.0, 6.0, 0.0, 0.0, 10.0)
    assert d.total == 20.0
    assert d.shares == (0.2, 0.3, 0.0, 0.0, 0.5)
    assert d.lowers == (0.0, 100.0, 500.0, 1000.0, 2000.0)
    assert d.open_ended


def test_from_buckets_empty() -> None:
    d = lm.from_buckets([])
    assert d.total == 0.0 and d.edges == ()
    assert math.isnan(d.quantile(0.5)) and math.isnan(d.mean_estimate)
    assert lm.describe(d) == "no requests (n = 0)"


def test_from_lengths_bins_as_prometheus_le_and_adds_inf() -> None:
    # (0,10] (10,100] (100,inf]: 10 is in the first bucket (le is inclusive), 11 in the second
    d = lm.from_lengths([1, 10, 11, 100, 101, 5000, float("nan")], [10, 100])
    assert d.edges == (10.0, 100.0, INF)
    assert d.counts == (2.0, 2.0, 2.0)


def test_cdf_is_piecewise_uniform_and_flat_in_the_inf_bucket() -> None:
    # 10 in (0,100], 30 in (100,300], 60 in (300,inf]
    d = lm.LengthDist((100.0, 300.0, INF), (10.0, 30.0, 60.0))
    assert d.cdf(50.0) == pytest.approx(0.05)
    assert d.cdf(100.0) == pytest.approx(0.10)
    assert d.cdf(200.0) == pytest.approx(0.25)
    assert d.cdf(300.0) == pytest.approx(0.40)
    assert d.cdf(10_000.0) == pytest.approx(0.40)  # the +Inf mass lies beyond every finite edge
    assert d.cdf(INF) == pytest.approx(1.0)


def test_mean_and_quantiles_hand_computed() -> None:
    d = lm.LengthDist((100.0, 300.0, 1000.0), (10.0, 30.0, 60.0))
    # midpoints 50, 200, 650 weighted 0.1, 0.3, 0.6 = 5 + 60 + 390
    assert d.mean_estimate == pytest.approx(455.0)
    # P50: rank 50, 40 below 300, 10 of 60 into (300,1000] → 300 + 700/6
    assert d.quantile(0.5) == pytest.approx(300.0 + 700.0 / 6.0)
    # P25: rank 25, 15 of 30 into (100,300] → 200
    assert d.quantile(0.25) == pytest.approx(200.0)
    # the +Inf bucket counts at its lower bound in the mean
    e = lm.LengthDist((100.0, INF), (50.0, 50.0))
    assert e.mean_estimate == pytest.approx(0.5 * 50 + 0.5 * 100)


def test_distance_same_shares_is_zero_and_disjoint_is_one() -> None:
    a = lm.LengthDist((100.0, 200.0, INF), (1.0, 3.0, 0.0))
    b = lm.LengthDist((100.0, 200.0, INF), (10.0, 30.0, 0.0))
    assert lm.distance(a, b) == 0.0
    low = lm.LengthDist((100.0, 200.0), (5.0, 0.0))
    high = lm.LengthDist((100.0, 200.0), (0.0, 5.0))
    assert lm.distance(low, high) == pytest.approx(1.0)
    assert lm.distance(high, low) == pytest.approx(1.0)


def test_distance_on_different_edges_is_evaluated_at_their_union() -> None:
    # a: uniform on (0,200]. b: all in (0,100] ∪ half each of (0,100] and (100,400]
    a = lm.LengthDist((200.0,), (10.0,))
    b = lm.LengthDist((100.0, 400.0), (5.0, 5.0))
    # union of edges {100, 200, 400}: F_a = .5, 1, 1; F_b = .5, .5 + .5·(100/300), 1
    expected = 1.0 - (0.5 + 0.5 / 3.0)
    assert lm.distance(a, b) == pytest.approx(expected)
    assert lm.distance(b, a) == pytest.approx(expected)


def test_distance_counts_the_inf_mass_beyond_finite_edges() -> None:
    # a has 40 % above 300 (open); b has all below 300: gap of 0.4 at 300
    a = lm.LengthDist((300.0, INF), (6.0, 4.0))
    b = lm.LengthDist((300.0,), (10.0,))
    assert lm.distance(a, b) == pytest.approx(0.4)


def test_distance_of_an_empty_distribution_is_nan() -> None:
    a = lm.LengthDist((100.0,), (0.0,))
    b = lm.LengthDist((100.0,), (3.0,))
    assert math.isnan(lm.distance(a, b))


def test_distance_of_binned_samples_shrinks_with_sample_size() -> None:
    rng = np.random.default_rng(7)
    edges = [50, 100, 200, 500, 1000, 2000, 5000]
    x = rng.lognormal(6.0, 0.8, 50_000)
    y = rng.lognormal(6.0, 0.8, 50_000)
    z = rng.lognormal(7.0, 0.8, 50_000)
    same = lm.distance(lm.from_lengths(x, edges), lm.from_lengths(y, edges))
    other = lm.distance(lm.from_lengths(x, edges), lm.from_lengths(z, edges))
    assert same < 0.02
    assert other > lm.MATERIAL_DISTANCE


def test_describe_reads_p50_p90_and_n() -> None:
    d = lm.LengthDist((100.0, 300.0, 1000.0), (10.0, 30.0, 60.0))
    p50 = round(300.0 + 700.0 / 6.0)
    p90 = round(300.0 + 700.0 * 50.0 / 60.0)
    assert lm.describe(d) == f"P50 ≈ {p50}, P90 ≈ {p90} tokens (n = 100)"
    big = lm.LengthDist((1000.0, 4096.0, INF), (6000.0, 345.0, 6000.0))
    assert (
        lm.describe(big, unit="tok") == "P50 ≈ 2 548, P90 > 4 096 tok (n = 12 345)"
    )  # 1000 + 3096 · 172.5/345


@pytest.mark.parametrize(
    ("edges", "counts"),
    [
        ((100.0, 50.0), (1.0, 1.0)),
        ((100.0,), (-1.0,)),
        ((100.0, 200.0), (1.0,)),
        ((INF, 100.0), (1.0, 1.0)),
    ],
)
def test_bad_distributions_are_refused(edges: tuple[float, ...], counts: tuple[float, ...]) -> None:
    with pytest.raises(ValueError):
        lm.LengthDist(edges, counts)
