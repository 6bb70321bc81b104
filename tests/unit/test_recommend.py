"""analysis.recommend on hand-built sweeps: the best point, the memory guard-rail, the top-two
warning, the explanation's numbers, effects, repeats and the Pareto frontier."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from analysis.recommend import recommend


def _point(point_id: str, params: dict[str, Any], capacity: float | None, **extra: Any) -> dict:
    row = {
        "point_id": point_id,
        "repeat": 0,
        "params": params,
        "status": "completed",
        "capacity": capacity,
        "capacity_kind": "rate",
        "peak_memory_fraction": 0.8,
        "preemptions": 0.0,
        "throughput_per_gpu": 1000.0,
        "tokens_per_s_per_user": 50.0,
        "error": None,
    }
    row.update(extra)
    return row


def _grid() -> pd.DataFrame:
    """max_batch_size × max_batched_tokens, best at 128 / 2048 (14 req/s)."""
    return pd.DataFrame(
        [
            _point("p1", {"max_batch_size": 64, "max_batched_tokens": 2048}, 9.0),
            _point("p2", {"max_batch_size": 64, "max_batched_tokens": 8192}, 7.0),
            _point("p3", {"max_batch_size": 128, "max_batched_tokens": 2048}, 14.0),
            _point("p4", {"max_batch_size": 128, "max_batched_tokens": 8192}, 11.0),
        ]
    )


def test_the_best_point_is_the_highest_capacity() -> None:
    rec = recommend(_grid(), slo_name="interactive-chat")
    assert rec.best is not None and rec.best.point_id == "p3"
    assert rec.headline() == (
        "Recommended: max_batch_size=128 max_batched_tokens=2048 — SLO capacity 14 req/s "
        "under interactive-chat (4 points)"
    )
    assert rec.rejected == ()
    assert rec.warnings == ()  # 14 vs 11: 21 % apart


def test_a_point_over_the_memory_cap_is_rejected_although_its_capacity_is_highest() -> None:
    rows = _grid()
    rows.loc[len(rows)] = _point(
        "p5", {"max_batch_size": 256, "max_batched_tokens": 2048}, 20.0, peak_memory_fraction=0.97
    )
    rec = recommend(rows, max_memory_fraction=0.9, slo_name="interactive-chat")
    assert rec.best is not None and rec.best.point_id == "p3"
    assert [p.point_id for p in rec.rejected] == ["p5"]
    assert rec.rejected[0].rejected == "peak memory 97 % of the GPU over the limit 90 %"
    assert rec.headline().endswith("(5 points, 1 rejected: memory)")
    # without the cap it wins
    assert recommend(rows).best.point_id == "p5"  # type: ignore[union-attr]


def test_a_preemption_cap_rejects_too() -> None:
    rows = _grid()
    rows.loc[2, "preemptions"] = 12.0
    rec = recommend(rows, max_preemptions_per_1k=5.0)
    assert rec.best is not None and rec.best.point_id == "p4"
    assert rec.rejected[0].rejected == "12 preemptions per 1,000 requests over the limit 5"
    assert "1 rejected: preemptions" in rec.headline()


def test_top_two_within_noise_warn() -> None:
    rows = _grid()
    rows.loc[3, "capacity"] = 13.5  # 3.6 % below 14
    rec = recommend(rows, noise=0.05)
    assert rec.best is not None and rec.best.point_id == "p3"
    assert len(rec.warnings) == 1
    assert rec.warnings[0].startswith("The top two are not separated (within 5 % noise)")
    assert "max_batch_size=128 max_batched_tokens=8192 13.5 req/s" in rec.warnings[0]
    assert recommend(rows, noise=0.02).warnings == ()


def test_overlapping_repeats_warn_and_capacity_is_their_mean() -> None:
    rows = pd.DataFrame(
        [
            _point("a", {"n": 1}, 10.0),
            _point("a", {"n": 1}, 14.0, repeat=1),
            _point("b", {"n": 2}, 11.0),
            _point("b", {"n": 2}, 11.4, repeat=1),
        ]
    )
    rec = recommend(rows, noise=0.05)
    best = rec.best
    assert best is not None and best.point_id == "a"
    assert best.capacity == pytest.approx(12.0)
    assert best.spread == pytest.approx(4.0 / 12.0)
    assert best.repeats == 2
    assert rec.warnings[0].startswith("The top two are not separated (their repeats overlap)")
    assert "2 repeats spread 33 % (10–14 req/s)" in rec.warnings[1]


def test_the_explanation_sentence_carries_the_numbers() -> None:
    rows = _grid()
    buckets_best = {8.0: {"4k–16k": 620.0, "<256": 95.0}, 4.0: {"4k–16k": 300.0}}
    buckets_nb = {8.0: {"4k–16k": 1000.0, "<256": 100.0}, 4.0: {"4k–16k": 310.0}}
    rows["ttft_p99_by_bucket"] = pd.Series([None, None, buckets_best, buckets_nb], dtype=object)
    rec = recommend(rows)
    by_param = {e.param: e for e in rec.explanations}
    mbt = by_param["max_batched_tokens"]
    assert mbt.sentence == (
        "max_batched_tokens 8192 → 2048 cut P99 TTFT in the 4k–16k bucket by 38 % (at 8 req/s) "
        "and SLO capacity rose from 11 to 14 req/s"
    )
    assert mbt.ttft_change == pytest.approx(-0.38)
    assert (mbt.capacity_from, mbt.capacity_to, mbt.load) == (11.0, 14.0, 8.0)
    # the other neighbour has no bucket figures: capacities only
    assert by_param["max_batch_size"].sentence == (
        "max_batch_size 64 → 128: SLO capacity rose from 9 to 14 req/s"
    )
    assert len(rec.explanations) == 2  # p2 differs in both parameters: not a neighbour


def test_a_failed_neighbour_is_explained_with_its_status() -> None:
    rows = _grid()
    rows.loc[len(rows)] = _point(
        "p5",
        {"max_batch_size": 256, "max_batched_tokens": 2048},
        None,
        status="oom",
        error="CUDA out of memory",
    )
    rec = recommend(rows)
    failed = [e for e in rec.explanations if e.from_value == 256]
    assert failed[0].sentence == (
        "max_batch_size 256 → 128: at max_batch_size=256 the engine ran out of memory "
        "(CUDA out of memory); at 128 SLO capacity is 14 req/s"
    )
    assert rec.headline().endswith("(5 points, 1 failed)")


def test_effects_at_the_best_point_and_marginal_means() -> None:
    rec = recommend(_grid())
    effects = {e.param: e for e in rec.effects}
    mbt = effects["max_batched_tokens"]
    assert [v.value for v in mbt.values] == [2048, 8192]
    assert [v.at_best for v in mbt.values] == [14.0, 11.0]
    assert [v.marginal for v in mbt.values] == [11.5, 9.0]
    assert [v.is_best for v in mbt.values] == [True, False]
    assert mbt.range == 3.0
    assert [v.at_best for v in effects["max_batch_size"].values] == [9.0, 14.0]


def test_the_pareto_frontier_of_throughput_per_gpu_and_per_user_speed() -> None:
    rows = _grid()
    rows["throughput_per_gpu"] = [100.0, 80.0, 70.0, 60.0]
    rows["tokens_per_s_per_user"] = [10.0, 20.0, 15.0, 25.0]
    rec = recommend(rows)
    assert rec.front == ("p1", "p2", "p4")  # p3 (70, 15) is beaten by p2 (80, 20)
    assert {p.point_id: p.on_front for p in rec.points}["p3"] is False


def test_no_completed_point_gives_no_recommendation_and_the_reason() -> None:
    rows = pd.DataFrame(
        [
            _point("a", {"n": 1}, None, status="failed_to_start", error="bad flag"),
            _point("b", {"n": 2}, None, status="health_timeout"),
        ]
    )
    rec = recommend(rows, slo_name="interactive-chat")
    assert rec.best is None
    assert rec.headline() == "No recommendation: no point completed (2 points, 2 failed)"
    assert rec.explanations == () and rec.front == ()
    empty = recommend(pd.DataFrame())
    assert empty.best is None and empty.reason == "the sweep has no points"


def test_every_passing_point_rejected_says_so() -> None:
    rows = _grid()
    rows["peak_memory_fraction"] = 0.99
    rec = recommend(rows, max_memory_fraction=0.9)
    assert rec.best is None
    assert rec.reason == "every point that met the SLO was rejected by the guard-rails"


def test_a_capacity_no_load_failed_at_is_a_lower_bound() -> None:
    note = "no failing load measured: capacity is at least the highest load"
    rows = pd.DataFrame(
        [_point("a", {"n": 1}, 32.0, capacity_note=note), _point("b", {"n": 2}, 16.0)]
    )
    rec = recommend(rows)
    assert rec.best is not None and rec.best.at_least
    assert rec.headline() == "Recommended: n=1 — SLO capacity ≥ 32 req/s (2 points)"
    assert not rec.points[1].at_least


def test_what_every_point_shares_is_said_once_not_in_each_label() -> None:
    from analysis.recommend import fixed_params

    assert fixed_params([{"a": 1, "b": 0.9}, {"a": 2, "b": 0.9}]) == {"b": 0.9}
    assert fixed_params([{"a": 1.0}, {"a": 1}]) == {"a": 1.0}  # 1 and 1.0 are one value
    assert fixed_params([{"a": 1}]) == {}  # one point: nothing to tell apart
    assert fixed_params([{"a": 1}, {"b": 1}]) == {}
