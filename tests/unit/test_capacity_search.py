"""analysis.capacity_search on synthetic SLO curves (ratio = f(load / true capacity))."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest

from analysis.capacity_search import Probe, SearchPlan, SearchResult, next_load, search_result
from errors import ConfigError

Curve = Callable[[float], float]


def linear(cap: float) -> Curve:
    return lambda load: load / cap


def knee(cap: float) -> Curve:
    """A latency curve with a floor and a knee: r(0) = 0.3, r(cap) = 1, convex."""
    return lambda load: 0.3 + 0.7 * (load / cap) ** 3


def noisy(curve: Curve, sigma: float, seed: int) -> Curve:
    rng = random.Random(seed)
    return lambda load: curve(load) * (1.0 + rng.gauss(0.0, sigma))


def run(plan: SearchPlan, curve: Curve) -> tuple[SearchResult, list[Probe]]:
    probes: list[Probe] = []
    while (load := next_load(plan, probes)) is not None:
        assert load not in [p.load for p in probes], "a measured load was proposed again"
        if plan.kind == "concurrency":
            assert load == int(load)
        r = curve(load)
        probes.append(Probe(load, r <= 1.0, r, run_id=f"run-{len(probes)}"))
        assert len(probes) <= plan.max_runs
    return search_result(plan, probes), probes


# --- hand-worked sequences ---------------------------------------------------------------------
#
# rate, low 0.5, high 64, precision 0.1, true capacity 10 (ratio = load / 10, noise-free):
#   1. start = √(0.5 × 64) = √32 = 5.657            → ratio 0.5657, pass
#      bracketing jump: estimate 5.657 / 0.5657 = 10, × (1 + 0.5 × 0.1) = 10.5
#   2. 10.5                                          → ratio 1.05, fail: bracket [5.657, 10.5]
#      interpolated crossing = 5.657 + (1 − 0.5657)/(1.05 − 0.5657) × (10.5 − 5.657) = 10.0;
#      hi is nearer in log-load (ln 1.05 < ln 1.77), so nudge down: 10 × (1 − 0.4 × 0.1) = 9.6
#   3. 9.6                                           → ratio 0.96, pass: bracket [9.6, 10.5],
#      10.5 / 9.6 − 1 = 0.094 ≤ 0.1: done after 3 runs; capacity (slo.capacity's interpolation
#      between 9.6 @ 0.96 and 10.5 @ 1.05) = 9.6 + 0.04/0.09 × 0.9 = 10.0.
#
# concurrency, low 1, high 256, true capacity 37:
#   1. start = √256 = 16                             → ratio 0.4324, pass
#      jump: 16 / 0.4324 × 1.05 = 38.85 → 39
#   2. 39                                            → ratio 1.054, fail: bracket [16, 39]
#      crossing = 16 + (1 − 0.4324)/(1.0541 − 0.4324) × 23 = 37.0; nudge down 37 × 0.96 = 35.5
#   3. 36                                            → ratio 0.973, pass: [36, 39], 39/36 − 1 =
#      0.083 ≤ 0.1: done after 3 runs; capacity 36 + 0.027/0.081 × 3 = 37.0.


def test_hand_worked_rate_sequence() -> None:
    plan = SearchPlan("rate", 0.5, 64.0)
    result, probes = run(plan, linear(10.0))
    loads = [p.load for p in probes]
    assert loads == pytest.approx([math.sqrt(32.0), 10.5, 9.6])
    assert [p.passed for p in probes] == [True, False, True]
    assert result.converged and result.interpolated
    assert result.capacity == pytest.approx(10.0)
    assert result.measured == pytest.approx(9.6)
    assert result.first_failing == pytest.approx(10.5)
    assert result.runs_used == 3
    assert "within 10%" in result.note


def test_hand_worked_concurrency_sequence() -> None:
    plan = SearchPlan("concurrency", 1, 256)
    result, probes = run(plan, linear(37.0))
    assert [p.load for p in probes] == [16.0, 39.0, 36.0]
    assert result.converged
    assert result.capacity == pytest.approx(37.0)
    assert (result.measured, result.first_failing) == (36.0, 39.0)


# --- convergence over many capacities ------------------------------------------------------------


@pytest.mark.parametrize("cap", [0.7, 1.3, 3.0, 7.7, 12.0, 25.0, 48.0, 63.0])
@pytest.mark.parametrize("shape", [linear, knee])
def test_rate_converges_within_precision(cap: float, shape: Callable[[float], Curve]) -> None:
    plan = SearchPlan("rate", 0.5, 64.0, precision=0.1, max_runs=8)
    result, _probes = run(plan, shape(cap))
    assert result.converged, result.note
    assert result.runs_used <= plan.max_runs
    assert result.measured is not None and result.first_failing is not None
    assert result.measured <= cap <= result.first_failing
    assert result.first_failing / result.measured - 1.0 <= 0.1 + 1e-9
    assert result.capacity == pytest.approx(cap, rel=0.1)


@pytest.mark.parametrize("cap", [2.5, 9.0, 17.0, 40.0, 100.0, 230.0])
@pytest.mark.parametrize("shape", [linear, knee])
def test_concurrency_converges(cap: float, shape: Callable[[float], Curve]) -> None:
    plan = SearchPlan("concurrency", 1, 256, precision=0.1, max_runs=8)
    result, probes = run(plan, shape(cap))
    assert result.converged, result.note
    assert result.measured is not None and result.first_failing is not None
    assert result.measured <= cap <= result.first_failing
    gap = result.first_failing - result.measured
    assert gap <= 1 or result.first_failing / result.measured - 1.0 <= 0.1 + 1e-9
    assert all(p.load == int(p.load) for p in probes)


def test_linear_curves_need_few_runs() -> None:
    """The ratio-guided jumps: a noise-free linear curve is found in at most 4 runs while the
    capacity is within two 4× steps of the start (√(0.25 × 128) = 5.66), 5 beyond."""
    plan = SearchPlan("rate", 0.25, 128.0)
    for cap in (0.4, 1.0, 2.2, 5.0, 9.9, 31.0, 77.0):
        result, _ = run(plan, linear(cap))
        assert result.converged and result.runs_used <= 4, (cap, result)
    result, _ = run(plan, linear(120.0))
    assert result.converged and result.runs_used == 5


@pytest.mark.parametrize("seed", range(12))
def test_noisy_curves_stay_within_cap_and_near_truth(seed: int) -> None:
    rng = random.Random(1000 + seed)
    cap = math.exp(rng.uniform(math.log(1.0), math.log(60.0)))
    plan = SearchPlan("rate", 0.5, 64.0, precision=0.1, max_runs=8)
    result, _ = run(plan, noisy(knee(cap), 0.03, seed))
    assert result.runs_used <= 8
    assert result.capacity is not None
    # 3 % noise on the ratio near the knee (slope 3 × 0.7 = 2.1 in load) moves the crossing by
    # ≈ 1.5 %: the estimate stays well within precision + noise of the truth.
    assert result.capacity == pytest.approx(cap, rel=0.15)


def test_max_runs_caps_the_search() -> None:
    plan = SearchPlan("rate", 0.01, 1000.0, precision=0.01, max_runs=3)
    result, probes = run(plan, knee(0.05))
    assert len(probes) == 3
    assert not result.converged
    assert "max_runs" in result.note


# --- the ends of the range ---------------------------------------------------------------------


def test_capacity_beyond_high() -> None:
    plan = SearchPlan("rate", 1.0, 16.0)
    result, probes = run(plan, linear(500.0))
    assert probes[-1].load == 16.0 and probes[-1].passed
    assert result.converged
    assert result.capacity == 16.0 and not result.interpolated
    assert result.first_failing is None
    assert "at least" in result.note


def test_failing_already_at_low() -> None:
    plan = SearchPlan("rate", 2.0, 32.0)
    result, probes = run(plan, linear(0.5))
    assert probes[-1].load == 2.0 and not probes[-1].passed
    assert result.converged
    assert result.capacity is None and result.measured is None
    assert result.first_failing == 2.0
    assert "fails already at low" in result.note


def test_concurrency_capacity_below_two() -> None:
    plan = SearchPlan("concurrency", 1, 64)
    result, _probes = run(plan, linear(1.5))
    assert result.converged
    assert (result.measured, result.first_failing) == (1.0, 2.0)


# --- odd verdicts ------------------------------------------------------------------------------


def test_non_monotone_point_is_noted() -> None:
    plan = SearchPlan("rate", 1.0, 64.0)
    probes = [
        Probe(8.0, True, 0.8),
        Probe(16.0, False, 1.3),
        Probe(32.0, True, 0.95),  # passes again above a failure
    ]
    # The bracket ignores the pass above the first failure.
    nxt = next_load(plan, probes)
    assert nxt is not None and 8.0 < nxt < 16.0
    result = search_result(plan, probes)
    assert result.measured == 8.0 and result.first_failing == 16.0
    assert "passes again at 32" in result.note


def test_no_verdict_counts_as_failure() -> None:
    plan = SearchPlan("rate", 1.0, 64.0)
    probes = [Probe(8.0, True, 0.5), Probe(16.0, None, None)]
    nxt = next_load(plan, probes)
    # no ratio at the failure: geometric midpoint of the bracket
    assert nxt == pytest.approx(math.sqrt(8.0 * 16.0))
    result = search_result(plan, probes)
    assert result.first_failing == 16.0 and result.measured == 8.0
    assert not result.interpolated and result.capacity == 8.0
    assert "no verdict at 16: counted as failing" in result.note


def test_no_verdict_at_first_probe_steps_down_blind() -> None:
    plan = SearchPlan("rate", 1.0, 64.0)
    assert next_load(plan, [Probe(8.0, None, None)]) == pytest.approx(4.0)


def test_infinite_ratio_is_not_used_to_jump() -> None:
    plan = SearchPlan("rate", 1.0, 64.0)
    assert next_load(plan, [Probe(8.0, False, math.inf)]) == pytest.approx(4.0)


def test_tiny_ratio_jumps_at_most_max_step() -> None:
    plan = SearchPlan("rate", 1.0, 1000.0, start=2.0)
    assert next_load(plan, [Probe(2.0, True, 0.001)]) == pytest.approx(8.0)


def test_start_and_empty_result() -> None:
    assert next_load(SearchPlan("rate", 1.0, 100.0), []) == pytest.approx(10.0)
    assert next_load(SearchPlan("rate", 1.0, 100.0, start=3.0), []) == 3.0
    assert next_load(SearchPlan("concurrency", 1, 100), []) == 10.0
    result = search_result(SearchPlan("rate", 1.0, 2.0), [])
    assert result.capacity is None and result.runs_used == 0 and not result.converged


def test_same_outcome_twice_falls_back_to_midpoint() -> None:
    plan = SearchPlan("rate", 1.0, 64.0, precision=0.01)
    probes = [
        Probe(4.0, True, 0.5),
        Probe(32.0, False, 2.0),
        Probe(10.0, True, 0.8),
        Probe(15.0, True, 0.9),
    ]
    assert next_load(plan, probes) == pytest.approx(math.sqrt(15.0 * 32.0))


def test_narrow_bracket_closes_in_one_run_either_way() -> None:
    plan = SearchPlan("rate", 1.0, 64.0, precision=0.1)
    probes = [Probe(10.0, True, 0.9), Probe(11.5, False, 1.1)]
    x = next_load(plan, probes)
    assert x is not None
    for outcome in (True, False):
        done = [*probes, Probe(x, outcome, 1.0)]
        assert next_load(plan, done) is None
        assert search_result(plan, done).converged


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"kind": "qps", "low": 1.0, "high": 2.0}, "kind"),
        ({"kind": "rate", "low": 0.0, "high": 2.0}, "low"),
        ({"kind": "rate", "low": 2.0, "high": 2.0}, "high"),
        ({"kind": "rate", "low": 1.0, "high": 2.0, "precision": 0.0}, "precision"),
        ({"kind": "rate", "low": 1.0, "high": 2.0, "precision": 1.0}, "precision"),
        ({"kind": "rate", "low": 1.0, "high": 2.0, "max_runs": 1}, "max_runs"),
        ({"kind": "rate", "low": 1.0, "high": 2.0, "start": 3.0}, "start"),
        ({"kind": "concurrency", "low": 1, "high": 1.4}, "concurrency"),
        ({"kind": "rate", "low": math.nan, "high": 2.0}, "low"),
    ],
)
def test_plan_validation(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        SearchPlan(**kwargs)  # type: ignore[arg-type]


def test_a_timed_rate_level_too_short_for_its_percentile_runs_the_minimum_sample() -> None:
    """Issue 24 case 12: 8 s at 2 req/s is 16 requests, too few for a P99 (100)."""
    from analysis.capacity_search import sample_requests

    assert sample_requests("rate", [2.0], 8.0, 100) == 100
    assert sample_requests("rate", [2.0, 20.0], 8.0, 100) == 160  # the fastest keeps its 8 s
    assert sample_requests("rate", [20.0], 8.0, 100) is None  # 160 requests: enough
    assert sample_requests("concurrency", [2.0], 8.0, 100) is None  # count unknown in advance
    assert sample_requests("rate", [2.0], None, 100) is None  # requests = N is the user's
