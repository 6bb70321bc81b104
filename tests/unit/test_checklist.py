"""analysis.checklist against hand-computed totals, sensitivity bounds and validation messages."""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seeds
from analysis import checklist as ck
from errors import ConfigError

# --- the hand-computed example -----------------------------------------------------------------
#
# Three frameworks a, b, c; three criteria x, y, z; weights x = 2, y = 1, z = 1 (Σw = 4).
#
#          x   y   z    Σ w·s               total = Σ w·s / 4
#   a      5   2   2    10 + 2 + 2 = 14     3.5
#   b      3   5   5     6 + 5 + 5 = 16     4.0   ← leader
#   c      4   2   2     8 + 2 + 2 = 12     3.0
#
# b's contributions: x 6/4 = 1.5, y 5/4 = 1.25, z 5/4 = 1.25 (sum 4.0).

FRAMEWORKS = ["a", "b", "c"]
SCORES: dict[tuple[str, str], float | None] = {
    ("a", "x"): 5, ("a", "y"): 2, ("a", "z"): 2,
    ("b", "x"): 3, ("b", "y"): 5, ("b", "z"): 5,
    ("c", "x"): 4, ("c", "y"): 2, ("c", "z"): 2,
}  # fmt: skip
WEIGHTS = {"x": 2.0, "y": 1.0, "z": 1.0}
TAGS = {
    "a": frozenset({"paged_kv"}),
    "b": frozenset(),
    "c": frozenset({"paged_kv", "lora"}),
}


def test_rank_totals_contributions_and_order() -> None:
    ranking = ck.rank(FRAMEWORKS, SCORES, WEIGHTS)
    assert [(r.framework, r.rank) for r in ranking.rows] == [("b", 1), ("a", 2), ("c", 3)]
    assert [r.total for r in ranking.rows] == pytest.approx([4.0, 3.5, 3.0])
    assert ranking.leader == "b"
    assert ranking.tied_for_first == ("b",)
    b = ranking.row("b")
    assert b.contributions == pytest.approx({"x": 1.5, "y": 1.25, "z": 1.25})
    assert sum(b.contributions.values()) == pytest.approx(b.total)
    assert b.missing == ()
    assert ranking.excluded == ()


def test_weights_are_relative() -> None:
    # the same weights × 10 give the same totals (normalised)
    scaled = {k: 10 * v for k, v in WEIGHTS.items()}
    assert [r.total for r in ck.rank(FRAMEWORKS, SCORES, scaled).rows] == pytest.approx(
        [4.0, 3.5, 3.0]
    )


def test_missing_score_counts_zero_and_is_listed() -> None:
    # b without a y score: (6 + 0 + 5) / 4 = 2.75 → last; a 3.5 leads, c 3.0
    for missing in (None, float("nan")):
        scores = dict(SCORES)
        scores[("b", "y")] = missing
        ranking = ck.rank(FRAMEWORKS, scores, WEIGHTS)
        assert [r.framework for r in ranking.rows] == ["a", "c", "b"]
        assert ranking.row("b").total == pytest.approx(2.75)
        assert ranking.row("b").missing == ("y",)
        assert ranking.row("b").contributions["y"] == 0.0
    scores = {k: v for k, v in SCORES.items() if k != ("b", "y")}  # absent, not None
    assert ck.rank(FRAMEWORKS, scores, WEIGHTS).row("b").missing == ("y",)


def test_numpy_numbers_are_numbers() -> None:
    scores = {k: np.int64(v) for k, v in SCORES.items() if v is not None}
    weights = {k: np.float64(v) for k, v in WEIGHTS.items()}
    ranking = ck.rank(FRAMEWORKS, scores, weights)  # type: ignore[arg-type]
    assert [r.total for r in ranking.rows] == pytest.approx([4.0, 3.5, 3.0])


def test_zero_weight_criterion_neither_counts_nor_is_missing() -> None:
    # z weighs 0: a (10 + 2) / 3 = 4.0, b (6 + 5) / 3 = 3.667, c (8 + 2) / 3 = 3.333
    scores = {k: v for k, v in SCORES.items() if k != ("c", "z")}
    ranking = ck.rank(FRAMEWORKS, scores, {"x": 2, "y": 1, "z": 0})
    assert [r.framework for r in ranking.rows] == ["a", "b", "c"]
    assert [r.total for r in ranking.rows] == pytest.approx([4.0, 11 / 3, 10 / 3])
    assert set(ranking.row("c").contributions) == {"x", "y"}
    assert ranking.row("c").missing == ()


def test_ties_go_by_name() -> None:
    # p (4, 2), q (2, 4), r (3, 3) with equal weights: all total 3 → p, q, r
    scores = {
        ("p", "x"): 4,
        ("p", "y"): 2,
        ("q", "x"): 2,
        ("q", "y"): 4,
        ("r", "x"): 3,
        ("r", "y"): 3,
    }
    for order in (["r", "q", "p"], ["p", "q", "r"], ["q", "r", "p"]):
        ranking = ck.rank(order, scores, {"x": 1, "y": 1})
        assert [(r.framework, r.rank, r.total) for r in ranking.rows] == [
            ("p", 1, 3.0),
            ("q", 2, 3.0),
            ("r", 3, 3.0),
        ]
        assert ranking.tied_for_first == ("p", "q", "r")


def test_ties_despite_float_noise() -> None:
    # weights 0.1, 0.2, 0.3: zeta (3, 0, 1) → (0.3 + 0.3) / 0.6 = 1; alpha (0, 0, 2) → 0.6 / 0.6
    # in floats zeta's total comes out an ulp above alpha's: still a tie, alpha first by name
    scores = {("zeta", "x"): 3, ("zeta", "y"): 0, ("zeta", "z"): 1, ("alpha", "z"): 2}
    weights = {"x": 0.1, "y": 0.2, "z": 0.3}
    ranking = ck.rank(["zeta", "alpha"], scores, weights)
    assert ranking.row("zeta").total > ranking.row("alpha").total  # the float noise is real
    assert ranking.leader == "alpha"
    assert ranking.tied_for_first == ("alpha", "zeta")
    shares = ck.perturbation_shares(["zeta", "alpha"], scores, weights, spread=0.0, samples=10)
    assert shares == {"alpha": 0.5, "zeta": 0.5}  # a tie shares first place


def test_must_have_excludes_and_changes_the_leader() -> None:
    # paged_kv: b lacks it → excluded; a (3.5) now leads c (3.0)
    ranking = ck.rank(FRAMEWORKS, SCORES, WEIGHTS, must_have=["paged_kv"], tags=TAGS)
    assert ranking.leader == "a"
    assert [r.framework for r in ranking.rows] == ["a", "c"]
    assert [r.rank for r in ranking.rows] == [1, 2]
    assert ranking.excluded == (ck.Exclusion("b", ("paged_kv",)),)
    # paged_kv and lora: only c has both
    ranking = ck.rank(FRAMEWORKS, SCORES, WEIGHTS, must_have=["paged_kv", "lora"], tags=TAGS)
    assert ranking.leader == "c"
    assert ranking.excluded == (
        ck.Exclusion("a", ("lora",)),
        ck.Exclusion("b", ("paged_kv", "lora")),
    )


def test_must_have_unknown_tag_lists_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown must-have tag 'fp8'; tags: lora, paged_kv$"):
        ck.rank(FRAMEWORKS, SCORES, WEIGHTS, must_have=["fp8"], tags=TAGS)
    # known_tags: a tag of the vocabulary that no framework has excludes every framework
    ranking = ck.rank(
        FRAMEWORKS, SCORES, WEIGHTS, must_have=["fp8"], tags=TAGS, known_tags={"fp8", "lora"}
    )
    assert ranking.leader is None
    assert ranking.rows == ()
    assert [e.framework for e in ranking.excluded] == ["a", "b", "c"]
    kwargs: dict[str, Any] = {"must_have": ["fp8"], "tags": TAGS, "known_tags": {"fp8"}}
    assert ck.weight_sensitivity(FRAMEWORKS, SCORES, WEIGHTS, **kwargs) == []
    assert ck.perturbation_shares(FRAMEWORKS, SCORES, WEIGHTS, **kwargs) == {}


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ({"x": 0, "y": 0}, "all weights are 0"),
        ({}, "all weights are 0"),
        ({"x": -1, "y": 1}, "weight of 'x' is -1; expected a finite number ≥ 0"),
        ({"x": float("inf")}, "weight of 'x' is inf"),
        ({"x": True}, "weight of 'x' is True"),
    ],
)
def test_rank_rejects_bad_weights(weights: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ck.rank(FRAMEWORKS, SCORES, weights)


def test_rank_rejects_scores_outside_range_and_duplicate_frameworks() -> None:
    with pytest.raises(ConfigError, match=r"score of a/x is 6; expected a number 0–5"):
        ck.rank(FRAMEWORKS, {**SCORES, ("a", "x"): 6}, WEIGHTS)
    with pytest.raises(ConfigError, match="framework 'a' is listed twice"):
        ck.rank(["a", "b", "a"], SCORES, WEIGHTS)


# --- sensitivity -------------------------------------------------------------------------------
#
# With the other weights fixed, compare A_f + w·s_f (A_f: the other criteria's Σ w·s).
#
# x (w = 2; y = z = 1): A_a = 2 + 2 = 4, s_a = 5;  A_b = 5 + 5 = 10, s_b = 3;  A_c = 4, s_c = 4.
#   b vs a: 10 + 3w = 4 + 5w at w = 3;  b vs c: 10 + 3w = 4 + 4w at w = 6.
#   → b leads for w in [0, 3]; above 3 a takes over (at w = 4: a 24, b 22, c 20).
#   can fall 100 % (to 0, nobody takes over), can rise (3 − 2) / 2 = 50 %.
# y (w = 1; x = 2, z = 1): A_a = 10 + 2 = 12, s_a = 2;  A_b = 6 + 5 = 11, s_b = 5;
#   A_c = 8 + 2 = 10, s_c = 2.
#   b vs a: 11 + 5w = 12 + 2w at w = 1/3 (a leads below: at w = 0, a 12 > b 11);
#   b vs c: 11 + 5w = 10 + 2w at w = −1/3 < 0, no bound.  → [1/3, ∞), a below; can fall 2/3.
# z: the same numbers as y (a and c score 2 on both, b 5) → [1/3, ∞), a below.


def _by_criterion(ranges: list[ck.WeightRange]) -> dict[str, ck.WeightRange]:
    return {r.criterion: r for r in ranges}


def test_weight_sensitivity_hand_computed() -> None:
    ranges = _by_criterion(ck.weight_sensitivity(FRAMEWORKS, SCORES, WEIGHTS))
    assert list(ranges) == ["x", "y", "z"]
    x = ranges["x"]
    assert (x.leader, x.weight, x.lower, x.upper, x.below, x.above) == ("b", 2, 0, 3, None, "a")
    assert x.can_fall == pytest.approx(1.0)
    assert x.can_rise == pytest.approx(0.5)
    assert x.margin == pytest.approx(0.5)
    for name in ("y", "z"):
        r = ranges[name]
        assert (r.leader, r.weight, r.upper, r.below, r.above) == ("b", 1, None, "a", None)
        assert r.lower == pytest.approx(1 / 3)
        assert r.can_fall == pytest.approx(2 / 3)
        assert r.can_rise is None
        assert r.margin == pytest.approx(2 / 3)
    # the bounds really flip the leader: just past them, rank names the takeover
    assert ck.rank(FRAMEWORKS, SCORES, {**WEIGHTS, "x": 3.001}).leader == "a"
    assert ck.rank(FRAMEWORKS, SCORES, {**WEIGHTS, "x": 2.999}).leader == "b"
    assert ck.rank(FRAMEWORKS, SCORES, {**WEIGHTS, "y": 0.333}).leader == "a"
    assert ck.rank(FRAMEWORKS, SCORES, {**WEIGHTS, "y": 0.334}).leader == "b"


def test_weight_sensitivity_of_a_zero_weight() -> None:
    # x = 2, y = 1, z = 0: a (10 + 2) / 3 = 4 leads b 11/3 and c 10/3.
    # z: A_a = 12, s_a = 2;  A_b = 11, s_b = 5;  A_c = 10, s_c = 2.
    #   a vs b: 12 + 2w = 11 + 5w at w = 1/3 → b above;  a vs c: parallel (both s = 2), never.
    (z,) = [
        r
        for r in ck.weight_sensitivity(FRAMEWORKS, SCORES, {"x": 2, "y": 1, "z": 0})
        if r.criterion == "z"
    ]
    assert (z.leader, z.weight, z.lower, z.below, z.above) == ("a", 0, 0, None, "b")
    assert z.upper == pytest.approx(1 / 3)
    assert z.can_fall is None
    assert z.can_rise is None  # a fraction of 0 is meaningless; upper says 1/3
    assert z.margin is None


def test_weight_sensitivity_at_a_tie() -> None:
    # p (4, 2), q (2, 4), weights 1, 1: both 3, p leads by name. x: p 2 + 4w, q 4 + 2w cross at 1,
    # the current weight: any less and q leads → [1, ∞), q below. y mirrors it: [0, 1], q above.
    scores = {("p", "x"): 4, ("p", "y"): 2, ("q", "x"): 2, ("q", "y"): 4}
    x, y = ck.weight_sensitivity(["p", "q"], scores, {"x": 1, "y": 1})
    assert (x.leader, x.lower, x.upper, x.below, x.above) == ("p", 1, None, "q", None)
    assert (y.leader, y.lower, y.upper, y.below, y.above) == ("p", 0, 1, None, "q")
    assert x.margin == 0
    assert y.margin == 0


def test_weight_sensitivity_takeover_among_several_crossing_at_once() -> None:
    # weights x = 2, y = 1; scores x/y: l (3, 5), m (5, 2), n (4, 3).
    # Σ w·s: l 6 + 5 = 11, m 10 + 2 = 12, n 8 + 3 = 11 → m leads.
    # y: A_l = 6, s_l = 5;  A_m = 10, s_m = 2;  A_n = 8, s_n = 3.
    #   m vs l: 10 + 2w = 6 + 5w at w = 4/3;  m vs n: 10 + 2w = 8 + 3w at w = 2.  → upper 4/3, l.
    # x: A_l = 5, s_l = 3;  A_m = 2, s_m = 5;  A_n = 3, s_n = 4.
    #   m vs l: 2 + 5w = 5 + 3w at w = 3/2;  m vs n: 2 + 5w = 3 + 4w at w = 1.
    #   → lower 3/2, l below.
    scores = {
        ("l", "x"): 3,
        ("l", "y"): 5,
        ("m", "x"): 5,
        ("m", "y"): 2,
        ("n", "x"): 4,
        ("n", "y"): 3,
    }
    x, y = ck.weight_sensitivity(["l", "m", "n"], scores, {"x": 2, "y": 1})
    assert (x.leader, x.upper, x.below, x.above) == ("m", None, "l", None)
    assert x.lower == pytest.approx(1.5)
    assert (y.leader, y.lower, y.below, y.above) == ("m", 0, None, "l")
    assert y.upper == pytest.approx(4 / 3)
    # three lines through one point: x = 1, y = 1; u (5, 1), v (1, 5), t (3, 3) all total 3:
    # the tie goes to t by name, and at x: A_t = 3, A_u = 1, A_v = 5 with slopes 3, 5, 1.
    # t vs u cross at 1 (u above), t vs v cross at 1 (v below) → [1, 1], v below, u above.
    scores = {
        ("u", "x"): 5,
        ("u", "y"): 1,
        ("v", "x"): 1,
        ("v", "y"): 5,
        ("t", "x"): 3,
        ("t", "y"): 3,
    }
    x, _ = ck.weight_sensitivity(["u", "v", "t"], scores, {"x": 1, "y": 1})
    assert (x.leader, x.lower, x.upper, x.below, x.above) == ("t", 1, 1, "v", "u")
    # two frameworks crossing the leader at the same point: the steepest takes over above.
    # weights x = 2, y = 1, z = 1; scores a (5, 1, 2), b (3, 5, 4), c (4, 3, 3): c is a and b's
    # midpoint, so all three tie where a and b do. x: A_a = 3, s 5; A_b = 9, s 3; A_c = 6, s 4 →
    # b vs a and b vs c both cross at 3; above 3 a (slope 5) leads, not c.
    scores = {
        ("a", "x"): 5,
        ("a", "y"): 1,
        ("a", "z"): 2,
        ("b", "x"): 3,
        ("b", "y"): 5,
        ("b", "z"): 4,
        ("c", "x"): 4,
        ("c", "y"): 3,
        ("c", "z"): 3,
    }
    x = ck.weight_sensitivity(["a", "b", "c"], scores, {"x": 2, "y": 1, "z": 1})[0]
    assert (x.leader, x.lower, x.below, x.above) == ("b", 0, None, "a")
    assert x.upper == pytest.approx(3)


_score_values = st.integers(min_value=0, max_value=5)


@settings(max_examples=150, deadline=None)
@given(
    table=st.lists(st.lists(_score_values, min_size=3, max_size=3), min_size=2, max_size=4),
    weights=st.lists(st.integers(min_value=0, max_value=5), min_size=3, max_size=3).filter(any),
)
def test_weight_sensitivity_agrees_with_rank(table: list[list[int]], weights: list[int]) -> None:
    names = [f"f{i}" for i in range(len(table))]
    crits = ["x", "y", "z"]
    scores = {
        (f, c): float(v)
        for f, row in zip(names, table, strict=True)
        for c, v in zip(crits, row, strict=True)
    }
    w = {c: float(v) for c, v in zip(crits, weights, strict=True)}
    ranges = ck.weight_sensitivity(names, scores, w)

    def leader_at(crit: str, value: float) -> str | None:
        moved = {**w, crit: value}
        return ck.rank(names, scores, moved).leader if any(moved.values()) else None

    for r in ranges:
        assert r.leader == ck.rank(names, scores, w).leader
        assert 0 <= r.lower <= r.weight
        assert r.upper is None or r.upper >= r.weight
        inside = (r.lower + r.weight) / 2 if r.upper is None else (r.lower + r.upper) / 2
        if inside > 0 or any(v for c, v in w.items() if c != r.criterion):
            assert leader_at(r.criterion, inside) == r.leader
        if r.below is not None:
            assert r.lower > 0
            assert leader_at(r.criterion, r.lower * (1 - 1e-6)) == r.below
        else:
            assert r.lower == 0
        if r.above is not None:
            assert r.upper is not None
            # upper can be 0 (a weight-0 criterion whose any rise flips the lead)
            above = r.upper * (1 + 1e-6) if r.upper > 0 else 1e-6
            assert leader_at(r.criterion, above) == r.above
        else:
            assert r.upper is None
            assert leader_at(r.criterion, (r.weight + 1) * 1e3) == r.leader


# --- perturbation ------------------------------------------------------------------------------


def test_perturbation_without_spread_gives_the_leader_everything() -> None:
    shares = ck.perturbation_shares(FRAMEWORKS, SCORES, WEIGHTS, spread=0.0, samples=50)
    assert shares == {"a": 0.0, "b": 1.0, "c": 0.0}


def test_perturbation_near_tie_splits_and_is_deterministic() -> None:
    # p (4, 2), q (2, 4), weights x = 1, y = 1.02: p 6.04, q 6.08 → q leads by a hair.
    # p wins a sample when 4·wx + 2·wy > 2·wx + 4·wy, i.e. wx > wy: with factors u, v uniform in
    # [0.8, 1.2], P(u > 1.02·v) ≈ 0.46 — both shares substantial, q's larger.
    scores = {("p", "x"): 4, ("p", "y"): 2, ("q", "x"): 2, ("q", "y"): 4}
    weights = {"x": 1.0, "y": 1.02}
    shares = ck.perturbation_shares(["p", "q"], scores, weights, spread=0.2, seed=7)
    assert set(shares) == {"p", "q"}
    assert sum(shares.values()) == pytest.approx(1.0)
    assert 0.38 < shares["p"] < 0.5 < shares["q"] < 0.62
    assert ck.perturbation_shares(["p", "q"], scores, weights, spread=0.2, seed=7) == shares
    # a dominated framework (1, 1) never leads
    scores3 = {**scores, ("r", "x"): 1, ("r", "y"): 1}
    assert ck.perturbation_shares(["p", "q", "r"], scores3, weights)["r"] == 0.0


def test_perturbation_matches_ranking_each_sample() -> None:
    # the vectorised count equals ranking every drawn weighting one by one (columns in the
    # weights' order, one default_rng(seed).uniform draw; zero weights stay zero)
    weights = {"x": 2.0, "y": 1.0, "z": 0.0}
    spread, samples, seed = 0.6, 40, 3
    shares = ck.perturbation_shares(
        FRAMEWORKS, SCORES, weights, spread=spread, samples=samples, seed=seed
    )
    factors = np.random.default_rng(seed).uniform(1 - spread, 1 + spread, size=(samples, 3))
    wins = dict.fromkeys(FRAMEWORKS, 0)
    for row in factors:
        drawn = {c: w * f for (c, w), f in zip(weights.items(), row, strict=True)}
        leader = ck.rank(FRAMEWORKS, SCORES, drawn).leader
        assert leader is not None
        wins[leader] += 1
    assert shares == {f: n / samples for f, n in wins.items()}
    assert 0 < shares["a"] < 1  # a spread of 60 % makes the example's lead change hands


def test_perturbation_rejects_bad_spread_and_samples() -> None:
    with pytest.raises(ConfigError, match=r"spread -0\.1 is outside \[0, 1\)"):
        ck.perturbation_shares(FRAMEWORKS, SCORES, WEIGHTS, spread=-0.1)
    with pytest.raises(ConfigError, match=r"spread 1\.0 is outside"):
        ck.perturbation_shares(FRAMEWORKS, SCORES, WEIGHTS, spread=1.0)
    with pytest.raises(ConfigError, match="samples 0 is not a positive integer"):
        ck.perturbation_shares(FRAMEWORKS, SCORES, WEIGHTS, samples=0)


# --- measured evidence -------------------------------------------------------------------------


def test_measured_score() -> None:
    assert ck.measured_score("slo_capacity", 12.0, 16.0) == pytest.approx(3.75)  # 5 × 12/16
    assert ck.measured_score("slo_capacity", 16.0, 16.0) == 5.0
    assert ck.measured_score("slo_capacity", None, 16.0) is None
    assert ck.measured_score("slo_capacity", 0.0, 0.0) is None  # best ≤ 0
    assert ck.measured_score("slo_capacity", 1.0, None) is None
    assert ck.measured_score("quality_retention", 0.97, None) == pytest.approx(4.85)
    assert ck.measured_score("quality_retention", 1.03) == 5.0  # capped at the reference
    assert ck.measured_score("verification", 0.8) == pytest.approx(4.0)
    assert ck.measured_score("verification", float("nan")) is None
    with pytest.raises(ConfigError, match=r"unknown metric 'latency'; metrics: slo_capacity, "):
        ck.measured_score("latency", 1.0, 1.0)
    with pytest.raises(ConfigError, match=r"share 1\.5 is above 1"):
        ck.measured_score("verification", 1.5)
    with pytest.raises(ConfigError, match="is above best"):
        ck.measured_score("slo_capacity", 17.0, 16.0)
    with pytest.raises(ConfigError, match="negative"):
        ck.measured_score("quality_retention", -0.1)


# --- entries and the catalog -------------------------------------------------------------------


def _framework(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "display_name": name.upper(),
        "repo": f"org/{name}",
        "homepage": f"https://{name}.example",
        "aliases": [f"{name}-server"],
    }


def _criteria() -> list[dict[str, Any]]:
    return [
        {"name": "scheduling", "kind": "checklist", "tags": {"chunked_prefill": "Chunked prefill"}},
        {"name": "memory_management", "kind": "checklist", "tags": {"paged_kv": "Paged KV"}},
        {"name": "slo_capacity", "kind": "measured", "metric": "slo_capacity"},
    ]


def _score(**over: Any) -> dict[str, Any]:
    entry = {
        "framework": "vllm",
        "criterion": "scheduling",
        "score": 4,
        "evidence": "Chunked prefill on by default since v0.6.",
        "source_url": "https://docs.vllm.ai/en/latest/",
        "checked_on": "2026-11-30",
        "tags": ["chunked_prefill"],
    }
    entry.update(over)
    return entry


def _preset(**over: Any) -> dict[str, Any]:
    entry = {
        "name": "online-chat",
        "weights": {"scheduling": 3, "slo_capacity": 2},
        "must_have": ["paged_kv"],
    }
    entry.update(over)
    return entry


def _catalog(
    scores: list[dict[str, Any]] | None = None, presets: list[dict[str, Any]] | None = None
) -> ck.Catalog:
    return ck.Catalog.from_entries(
        [_framework("vllm"), _framework("sglang")],
        _criteria(),
        scores if scores is not None else [_score()],
        presets if presets is not None else [_preset()],
    )


def test_catalog_from_entries() -> None:
    mem = _score(criterion="memory_management", score=5, tags=["paged_kv"])
    cat = _catalog([_score(), mem, _score(framework="sglang", score=3.5, tags=[])])
    assert cat.framework_names() == ["vllm", "sglang"]
    assert cat.frameworks[0].aliases == ("vllm-server",)
    assert cat.checklist_scores() == {
        ("vllm", "scheduling"): 4.0,
        ("vllm", "memory_management"): 5.0,
        ("sglang", "scheduling"): 3.5,
    }
    assert cat.tags_by_framework() == {
        "vllm": frozenset({"chunked_prefill", "paged_kv"}),
        "sglang": frozenset(),
    }
    assert ck.tag_labels(cat.criteria) == {
        "chunked_prefill": "Chunked prefill",
        "paged_kv": "Paged KV",
    }
    assert cat.known_tags() == {"chunked_prefill", "paged_kv"}
    assert cat.preset("online-chat").weights == {"scheduling": 3.0, "slo_capacity": 2.0}
    assert cat.preset("online-chat").must_have == ("paged_kv",)
    assert cat.criterion("slo_capacity").metric == "slo_capacity"
    assert cat.scores[0].tags == ("chunked_prefill",)
    assert cat.scores[0].name == "vllm/scheduling"
    with pytest.raises(ConfigError, match=r"unknown weight preset 'batch'; presets: online-chat$"):
        cat.preset("batch")
    # a catalog feeds rank directly: sglang lacks paged_kv
    preset = cat.preset("online-chat")
    ranking = ck.rank(
        cat.framework_names(),
        cat.checklist_scores(),
        preset.weights,
        must_have=preset.must_have,
        tags=cat.tags_by_framework(),
        known_tags=cat.known_tags(),
    )
    assert ranking.leader == "vllm"
    assert ranking.excluded == (ck.Exclusion("sglang", ("paged_kv",)),)
    assert ranking.row("vllm").missing == ("slo_capacity",)
    assert ranking.row("vllm").total == pytest.approx(4 * 3 / 5)


def test_checked_on_accepts_a_date() -> None:
    assert ck.Score.from_entry(_score(checked_on=dt.date(2026, 1, 5))).checked_on == "2026-01-05"


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"score": 6}, "scores.toml: vllm/scheduling: score 6 is outside 0–5"),
        ({"score": -1}, "scores.toml: vllm/scheduling: score -1 is outside 0–5"),
        ({"score": True}, "score True is not a number; expected a number from 0 to 5"),
        ({"score": "4"}, "score '4' is not a number"),
        ({"evidence": "  "}, "'evidence' is '  '; expected a non-empty string"),
        ({"evidence": "one\ntwo"}, "'evidence' spans several lines; expected one line"),
        ({"source_url": "docs.vllm.ai"}, "'source_url' 'docs.vllm.ai' is not an http"),
        ({"source_url": "ftp://x.org/a"}, "is not an http"),
        ({"checked_on": "30/11/2026"}, "'checked_on' is '30/11/2026'; expected an ISO date"),
        ({"checked_on": "2026-02-30"}, "'checked_on' is '2026-02-30'"),
        ({"checked_on": dt.datetime(2026, 1, 1, 12)}, "has a time; expected a date"),
        ({"tags": "chunked_prefill"}, "'tags' is 'chunked_prefill'; expected a list of strings"),
        ({"framework": ""}, "scores.toml: a score entry has framework ''"),
    ],
)
def test_score_entry_errors(over: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        ck.Score.from_entry(_score(**over))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "x", "kind": "vibes"}, "criterion 'x': 'kind' is 'vibes'; accepted: checklist, "),
        (
            {"name": "x", "kind": "measured"},
            "'metric' is None; a measured criterion needs one of: "
            "slo_capacity, quality_retention, verification",
        ),
        ({"name": "x", "kind": "checklist", "metric": "verification"}, 'only kind = "measured"'),
        ({"name": "x", "kind": "checklist", "tags": ["a"]}, 'expected a table of tag = "label"'),
        ({"name": "x", "kind": "checklist", "tags": {"a": ""}}, "'tags.a' is ''"),
        ({"kind": "checklist"}, "criteria.toml: a criterion entry has name None"),
    ],
)
def test_criterion_entry_errors(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=r"^criteria\.toml: ") as info:
        ck.Criterion.from_entry(entry)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"weights": {"scheduling": 0}}, "all weights are 0; give at least one criterion"),
        ({"weights": {}}, "'weights' is {}; expected a table of criterion = weight"),
        ({"weights": {"scheduling": -2}}, "weight of 'scheduling' is -2; expected a number from"),
        ({"weights": {"scheduling": 1e308}}, "weight of 'scheduling' is 1e+308; expected a"),
        ({"weights": {"scheduling": float("nan")}}, "weight of 'scheduling' is nan"),
        ({"must_have": "paged_kv"}, "'must_have' is 'paged_kv'; expected a list of strings"),
    ],
)
def test_preset_entry_errors(over: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=r"^weight_presets\.toml: weight preset 'online-chat': "):
        ck.WeightPreset.from_entry(_preset(**over))
    with pytest.raises(ConfigError) as info:
        ck.WeightPreset.from_entry(_preset(**over))
    assert message in str(info.value)


def test_framework_entry_errors() -> None:
    with pytest.raises(ConfigError, match=r"framework 'vllm': 'repo' 'vllm' is not a GitHub"):
        ck.Framework.from_entry({"name": "vllm", "repo": "vllm"})
    with pytest.raises(ConfigError, match=r"framework 'vllm': 'aliases' repeats x; list each"):
        ck.Framework.from_entry({"name": "vllm", "aliases": ["x", "x"]})
    assert ck.Framework.from_entry({"name": "vllm"}).display_name == "vllm"


@pytest.mark.parametrize(
    ("scores", "presets", "message"),
    [
        (
            None,
            [_preset(weights={"latency": 1})],
            "weight_presets.toml: weight preset 'online-chat': unknown criterion 'latency'; "
            "criteria: memory_management, scheduling, slo_capacity",
        ),
        (
            None,
            [_preset(must_have=["fp8"])],
            "weight_presets.toml: weight preset 'online-chat': unknown must-have tag 'fp8'; "
            "tags: chunked_prefill, paged_kv",
        ),
        (
            [_score(tags=["paged_kv"])],
            None,
            "scores.toml: vllm/scheduling: tag 'paged_kv' is not in scheduling's vocabulary; "
            "tags: chunked_prefill",
        ),
        (
            [_score(criterion="slo_capacity", tags=[])],
            None,
            "scores.toml: vllm/slo_capacity: criterion 'slo_capacity' is measured (slo_capacity), "
            "fed from measurements; scores are for checklist criteria: memory_management, "
            "scheduling",
        ),
        (
            [_score(framework="tgi")],
            None,
            "scores.toml: tgi/scheduling: unknown framework 'tgi'; frameworks: sglang, vllm",
        ),
        (
            [_score(criterion="latency")],
            None,
            "scores.toml: vllm/latency: unknown criterion 'latency'; checklist criteria: "
            "memory_management, scheduling",
        ),
        (
            [_score(), _score()],
            None,
            "scores.toml: score 'vllm/scheduling' is defined twice; each must be unique",
        ),
        (
            None,
            [_preset(), _preset()],
            "weight_presets.toml: weight preset 'online-chat' is defined twice; "
            "each must be unique",
        ),
    ],
)
def test_catalog_cross_check_errors(
    scores: list[dict[str, Any]] | None, presets: list[dict[str, Any]] | None, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _catalog(scores, presets)
    assert str(info.value) == message


def test_catalog_rejects_a_tag_with_two_labels() -> None:
    criteria = [*_criteria(), {"name": "kv", "kind": "checklist", "tags": {"paged_kv": "Paging"}}]
    with pytest.raises(ConfigError, match="tag 'paged_kv' is labelled 'Paging' but 'Paged KV'"):
        ck.Catalog.from_entries([_framework("vllm")], criteria, [], [])


def test_shipped_seeds_validate() -> None:
    cat = ck.Catalog.from_entries(
        seeds.entries("frameworks"),
        seeds.entries("criteria"),
        seeds.entries("framework_scores"),
        seeds.entries("weight_presets"),
    )
    assert cat.frameworks
    assert cat.criteria
    assert cat.presets
    # every preset ranks the shipped frameworks without error
    for preset in cat.presets:
        ranking = ck.rank(
            cat.framework_names(),
            cat.checklist_scores(),
            preset.weights,
            must_have=preset.must_have,
            tags=cat.tags_by_framework(),
            known_tags=cat.known_tags(),
        )
        assert len(ranking.rows) + len(ranking.excluded) == len(cat.frameworks)
