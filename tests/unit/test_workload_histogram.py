"""The ``histogram`` length distribution: draws, expected value, strict validation."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from collectors.loadgen.prompts import Calibration
from collectors.loadgen.workloads import Length, RequestFactory, parse_length, parse_workload
from errors import ConfigError

SPEC = {"dist": "histogram", "edges": [0, 10, 100, 1000], "weights": [1, 3, 6]}


def test_draws_follow_the_weights_and_stay_inside_their_buckets() -> None:
    length = parse_length(SPEC, where="w.input_tokens")
    rng = random.Random(11)
    draws = [length.sample(rng) for _ in range(20_000)]
    assert min(draws) >= 1 and max(draws) <= 1000
    shares = Counter(0 if d <= 10 else 1 if d <= 100 else 2 for d in draws)
    for bucket, weight in enumerate((0.1, 0.3, 0.6)):
        # binomial sd at n = 20k is ≤ 0.0035: 0.015 is over 4 sd
        assert shares[bucket] / len(draws) == pytest.approx(weight, abs=0.015)
    # uniform inside a bucket: (100, 1000] has mean 550.5
    top = [d for d in draws if d > 100]
    assert sum(top) / len(top) == pytest.approx(550.5, rel=0.02)
    # both ends of a bucket are reachable: 1 and 10 in (0, 10]
    assert {1, 10} <= set(draws)


def test_expected_is_the_exact_mean_of_the_whole_numbers_drawn() -> None:
    length = parse_length(SPEC, where="w")
    # (0,10] → 1..10 mean 5.5; (10,100] → 11..100 mean 55.5; (100,1000] → 101..1000 mean 550.5
    assert length.expected == pytest.approx(0.1 * 5.5 + 0.3 * 55.5 + 0.6 * 550.5)
    assert (length.min, length.max) == (1, 1000)
    rng = random.Random(3)
    mean = sum(length.sample(rng) for _ in range(20_000)) / 20_000
    assert mean == pytest.approx(length.expected, rel=0.02)


def test_zero_weight_buckets_are_never_drawn_and_bound_min_max() -> None:
    length = parse_length(
        {"dist": "histogram", "edges": [0, 50, 60, 5000], "weights": [0, 1, 0]}, where="w"
    )
    assert (length.min, length.max) == (51, 60)
    rng = random.Random(5)
    assert {length.sample(rng) for _ in range(2000)} <= set(range(51, 61))
    assert length.expected == pytest.approx(55.5)


def test_length_stays_frozen_and_hashable() -> None:
    a = parse_length(SPEC, where="w")
    b = parse_length(dict(SPEC), where="w")
    assert a == b and hash(a) == hash(b)
    assert isinstance(a.edges, tuple) and isinstance(a.weights, tuple)
    with pytest.raises(AttributeError):
        a.mean = 3.0  # type: ignore[misc]


def test_a_workload_with_histogram_lengths_builds_requests_deterministically() -> None:
    wl = parse_workload(
        {
            "name": "prod",
            "input_tokens": SPEC,
            "output_tokens": {"dist": "histogram", "edges": [0, 16, 64], "weights": [1, 1]},
        }
    )
    f1 = RequestFactory(workload=wl, dataset=None, calibration=Calibration(), seed=4)
    f2 = RequestFactory(workload=wl, dataset=None, calibration=Calibration(), seed=4)
    c1, c2 = f1.conversation(17), f2.conversation(17)
    assert c1.turns[0].max_tokens == c2.turns[0].max_tokens
    assert 1 <= c1.turns[0].max_tokens <= 64
    assert c1.turns[0].target_input_tokens == c2.turns[0].target_input_tokens


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"dist": "histogram", "edges": [0, 10], "weights": [1, 2]}, "n + 1 edges"),
        ({"dist": "histogram", "edges": [0, 10, 5], "weights": [1, 2]}, "strictly ascending"),
        ({"dist": "histogram", "edges": [-1, 10], "weights": [1]}, "≥ 0"),
        ({"dist": "histogram", "edges": [0, 10], "weights": [-1]}, "positive sum"),
        ({"dist": "histogram", "edges": [0, 10], "weights": [0]}, "positive sum"),
        ({"dist": "histogram", "edges": [0, 10, float("inf")], "weights": [1, 1]}, "finite"),
        ({"dist": "histogram", "edges": "0,10", "weights": [1]}, "list of numbers"),
        ({"dist": "histogram", "edges": [0, True], "weights": [1]}, "list of numbers"),
        ({"dist": "histogram", "weights": [1]}, "'edges' must be a list"),
        ({"dist": "histogram", "edges": [0, 10], "weights": [1], "mean": 4}, "unknown key"),
        ({"dist": "histogram", "edges": [1.2, 1.8, 5], "weights": [1, 1]}, "(1.2, 1.8]"),
    ],
)
def test_bad_histograms_name_the_workload_key_and_what_is_accepted(
    spec: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        parse_workload({"name": "prod", "input_tokens": spec, "output_tokens": 8})
    text = str(err.value)
    assert "workload 'prod'.input_tokens" in text
    assert message in text


def test_a_bad_histogram_error_shows_the_accepted_form() -> None:
    with pytest.raises(ConfigError) as err:
        parse_length({"dist": "histogram", "edges": [0, 10, 5], "weights": [1, 1]}, where="w")
    assert err.value.hint is not None and 'dist = "histogram"' in err.value.hint


def test_other_dists_are_unchanged() -> None:
    assert parse_length({"dist": "uniform", "min": 3, "max": 9}, where="w") == Length(
        "uniform", 6.0, 0.0, 3, 9
    )
