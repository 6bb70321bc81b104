"""Arrival processes: mean rate, variability (CV) and seeding, with statistical tolerances."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest

from collectors.loadgen import arrivals
from errors import InputError

N = 20_000


def sample(kind: str, rate: float, burstiness: float = 1.0, seed: int = 1) -> list[float]:
    return list(itertools.islice(arrivals.intervals(kind, rate, burstiness, seed=seed), N))


@pytest.mark.parametrize(
    ("kind", "burstiness", "cv"),
    [("constant", 1.0, 0.0), ("poisson", 1.0, 1.0), ("gamma", 0.25, 2.0), ("gamma", 4.0, 0.5)],
)
def test_rate_and_variability(kind: str, burstiness: float, cv: float) -> None:
    rate = 8.0
    xs = sample(kind, rate, burstiness)
    mean = statistics.fmean(xs)
    # the mean interval of N draws is within ~4 standard errors of 1/rate
    tol = 4 * (cv / rate) / math.sqrt(N) + 1e-12
    assert abs(mean - 1 / rate) <= tol
    assert statistics.pstdev(xs) / mean == pytest.approx(cv, abs=0.05)


def test_gamma_with_burstiness_one_is_poisson_like() -> None:
    xs = sample("gamma", 5.0, 1.0)
    assert statistics.pstdev(xs) / statistics.fmean(xs) == pytest.approx(1.0, abs=0.05)


def test_seeded_and_offsets() -> None:
    assert sample("poisson", 3.0, seed=7)[:50] == sample("poisson", 3.0, seed=7)[:50]
    assert sample("poisson", 3.0, seed=7)[:50] != sample("poisson", 3.0, seed=8)[:50]
    offs = list(itertools.islice(arrivals.offsets("constant", 4.0, seed=0), 5))
    assert offs == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])


def test_bad_arguments_name_the_choices() -> None:
    with pytest.raises(InputError, match="poisson, gamma, constant"):
        next(arrivals.intervals("bursty", 1.0, seed=0))
    with pytest.raises(InputError, match="> 0"):
        next(arrivals.intervals("poisson", 0.0, seed=0))
    with pytest.raises(InputError, match="burstiness"):
        next(arrivals.intervals("gamma", 1.0, 0.0, seed=0))
