"""Token lengths are bounded where they enter (issue 24, case 7): a production histogram's
``le="1e300"`` bucket is refused by ``workload from-metrics`` instead of written (bench then
crashed with OverflowError), its +Inf bucket is closed at most at ``MAX_REQUEST_TOKENS``, and a
workload's lengths (fixed, min/max/mean/sd, histogram edges) are refused above it."""

from __future__ import annotations

import math
import random

import pytest

from analysis.length_mix import LengthDist
from collectors.loadgen.traces import MAX_REQUEST_TOKENS
from collectors.loadgen.workloads import parse_length
from errors import ConfigError, InputError
from services.commands.workload import close_histogram


def test_a_bucket_bound_of_1e300_holding_requests_is_refused() -> None:
    d = LengthDist((128.0, 1e300, math.inf), (5.0, 3.0, 0.0))
    with pytest.raises(InputError, match='bucket bound le="1e\\+300", above the 2,097,152'):
        close_histogram(d, side="prompt", inf_max=None)


def test_an_empty_absurd_bucket_at_the_end_is_dropped_as_before() -> None:
    d = LengthDist((128.0, 512.0, 1e300, math.inf), (5.0, 3.0, 0.0, 0.0))
    h = close_histogram(d, side="prompt", inf_max=None)
    assert h.edges == (0.0, 128.0, 512.0)


def test_the_inf_bucket_is_closed_within_the_bound() -> None:
    d = LengthDist((2_000_000.0, math.inf), (5.0, 1.0))
    h = close_histogram(d, side="prompt", inf_max=None)
    assert h.edges[-1] == MAX_REQUEST_TOKENS and "at most 2,097,152" in h.inf_note
    with pytest.raises(InputError, match="--inf-max 3000000 is above the 2,097,152"):
        close_histogram(d, side="prompt", inf_max=3_000_000)
    full = LengthDist((float(MAX_REQUEST_TOKENS), math.inf), (5.0, 1.0))
    with pytest.raises(InputError, match="holds requests above 2097152 tokens"):
        close_histogram(full, side="output", inf_max=None)


@pytest.mark.parametrize(
    "spec",
    [
        1e300,
        float("nan"),
        {"dist": "fixed", "value": 1e300},
        {"dist": "uniform", "min": 1, "max": float("inf")},
        {"dist": "lognormal", "mean": 100, "sd": 1e300},
        {"dist": "lognormal", "mean": 1e-300, "sd": 100},
        {"dist": "normal", "mean": 1e300, "sd": 1},
        {"dist": "histogram", "edges": [0, 10, 1e300], "weights": [1, 1]},
    ],
)
def test_absurd_workload_lengths_are_refused_where_they_enter(spec: object) -> None:
    with pytest.raises(ConfigError):
        parse_length(spec, where="w.input_tokens")


def test_lengths_at_the_bound_still_draw() -> None:
    rng = random.Random(0)
    for spec in (
        MAX_REQUEST_TOKENS,
        {"dist": "lognormal", "mean": 1, "sd": MAX_REQUEST_TOKENS, "max": MAX_REQUEST_TOKENS},
        {"dist": "histogram", "edges": [0, 10, MAX_REQUEST_TOKENS], "weights": [1, 1]},
    ):
        n = parse_length(spec, where="w").sample(rng)
        assert 1 <= n <= MAX_REQUEST_TOKENS
