"""analysis.memory_load against cases computed by hand: series keys and load levels, the tokens
a running sequence holds, predicted KV usage, and both knees."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis import memory_load
from analysis.memory_load import Knee


def _runs(rows: list[dict[str, float]]) -> pd.DataFrame:
    """:func:`memory_load.assemble`'s input: each row's own figures, the rest neutral."""
    base = {
        "name": "",
        "requests": 1000,
        "gpu_peak_bytes": math.nan,
        "gpu_total_bytes": math.nan,
        "kv_p95": math.nan,
        "sum_out_in": 0.0,
        "sum_out_sq": 0.0,
        "sum_out": 0.0,
        "mean_e2e_s": math.nan,
    }
    return pd.DataFrame([{**base, "run_id": f"r{r['load']:g}", **r} for r in rows])


def test_load_levels_and_series_keys() -> None:
    assert memory_load.load_of("concurrency", 8, None) == ("concurrency", 8.0)
    assert memory_load.load_of("poisson", None, 2.5) == ("rate", 2.5)
    assert memory_load.load_of("poisson", None, float("inf")) is None
    assert memory_load.load_of(None, None, None) is None
    a = {"model": "m", "gpu_name": "g", "engine_params": '{"b": 1, "a": 2}', "concurrency": 1}
    b = {**a, "engine_params": {"a": 2, "b": 1}, "concurrency": 32}  # same params, other load
    assert memory_load.series_key(a) == memory_load.series_key(b)
    c = {**a, "engine_params": {"a": 3, "b": 1}}
    assert memory_load.series_key(a) != memory_load.series_key(c)
    rate = {**a, "concurrency": None, "arrival": "poisson", "target_rate": 4.0}
    assert memory_load.series_key(a)[-1] == "concurrency"
    assert memory_load.series_key(rate)[-1] == "rate"
    assert memory_load.differing_keys([a, b]) == ()
    assert memory_load.differing_keys([a, c, {**a, "workload": "w"}]) == (
        "workload",
        "engine_params",
    )


def test_held_tokens_weights_each_request_by_its_decode_iterations() -> None:
    # (I=100, O=10) and (I=1000, O=100): Σ O·I = 1,000 + 100,000; Σ O² = 100 + 10,000; Σ O = 110
    # (101,000 + 10,100 / 2) / 110 = 106,050 / 110 = 964.09…; + 16 / 2
    held = memory_load.held_tokens(101_000, 10_100, 110, 16)
    assert held == pytest.approx(106_050 / 110 + 8)
    assert memory_load.held_tokens(0, 0, 0, 16) is None


def test_in_flight_and_predicted_usage() -> None:
    assert memory_load.in_flight("concurrency", 32, None, 16) == 16  # the batch cap
    assert memory_load.in_flight("concurrency", 8, None, None) == 8
    assert memory_load.in_flight("rate", 4, 2.5, None) == 10  # Little's law: 4/s × 2.5 s
    assert memory_load.in_flight("rate", 4, None, None) is None
    # 10 sequences × 300 tokens of 6,000: half full
    assert memory_load.predicted_kv(10, 300, 6000) == 0.5
    assert memory_load.predicted_kv(None, 300, 6000) is None


def test_assemble_orders_by_load_and_computes_the_rates() -> None:
    runs = _runs(
        [
            {"load": 8, "kv_peak": 0.9, "preemptions": 5, "sum_out_in": 2e5, "sum_out": 1e3},
            {"load": 2, "kv_peak": 0.2, "preemptions": math.nan, "sum_out_in": 2e5, "sum_out": 1e3},
        ]
    )
    points = memory_load.assemble(
        runs, kind="concurrency", block_size=16, max_batch_size=None, capacity_tokens=4160
    )
    assert list(points["load"]) == [2.0, 8.0]
    assert points["preemptions_per_1k"].isna().iloc[0]  # no counter: unknown, not 0
    assert points["preemptions_per_1k"].iloc[1] == 5.0  # 5 in 1,000 requests
    # held = 200 + 0 + 8 = 208 tokens; 8 × 208 / 4,160 = 0.4
    assert points["held_tokens"].iloc[1] == 208
    assert points["predicted_kv"].iloc[1] == pytest.approx(0.4)
    none = memory_load.assemble(
        runs, kind="concurrency", block_size=16, max_batch_size=None, capacity_tokens=None
    )
    assert none["predicted_kv"].isna().all()


def _points(levels: list[tuple[float, float, float]]) -> pd.DataFrame:
    """Points at (load, preemptions, kv_peak), held 208 tokens, 1,000 requests each."""
    runs = _runs(
        [
            {"load": lo, "preemptions": p, "kv_peak": kv, "sum_out_in": 2e5, "sum_out": 1e3}
            for lo, p, kv in levels
        ]
    )
    return memory_load.assemble(
        runs, kind="concurrency", block_size=16, max_batch_size=None, capacity_tokens=4160
    )


def test_measured_knee_is_where_the_clean_levels_kv_usage_reaches_full() -> None:
    # clean at 1 (KV peak 10 %) and 8 (80 %): 10 points per unit of load, so 100 % at
    # 8 + (1 − 0.8) / 0.1 = 10, between 8 and the first preempting level 16
    knee = memory_load.measured_knee(_points([(1, 0, 0.1), (8, 0, 0.8), (16, 3, 1.0)]))
    assert knee is not None and (knee.last_clean, knee.first_preempting) == (8, 16)
    assert knee.load == pytest.approx(10.0)
    # one clean level: the line through zero load, 4 / 0.9 = 4.44
    one = memory_load.measured_knee(_points([(4, 0, 0.9), (12, 1, 1.0)]))
    assert one is not None and one.load == pytest.approx(4 / 0.9)
    # KV flat between the clean levels: through zero load too, 8 / 0.5 = 16, clipped to 12
    flat = memory_load.measured_knee(_points([(4, 0, 0.5), (8, 0, 0.5), (12, 1, 1.0)]))
    assert flat == Knee(12, 8, 12)
    # far below full at the last clean level: clipped to the first preempting one
    assert memory_load.measured_knee(_points([(4, 0, 0.2), (6, 1, 1.0)])) == Knee(6, 4, 6)
    # without KV readings (or a zero one): the midpoint
    assert memory_load.measured_knee(_points([(4, 0, math.nan), (12, 1, math.nan)])) == Knee(
        8, 4, 12
    )
    assert memory_load.measured_knee(_points([(4, 0, 0.0), (12, 1, 1.0)])) == Knee(8, 4, 12)


def test_measured_knee_outside_the_levels_and_without_a_counter() -> None:
    assert memory_load.measured_knee(_points([(1, 0, 0.1), (8, 0, 0.5)])) == Knee(load=None)
    below = memory_load.measured_knee(_points([(4, 2, 1.0), (8, 9, 1.0)]))
    assert below == Knee(load=None, first_preempting=4, below=True)
    assert memory_load.measured_knee(_points([(1, math.nan, 0.1), (8, math.nan, 1.0)])) is None
    # a clean level above the first preempting one does not move the knee
    knee = memory_load.measured_knee(_points([(2, 0, 0.5), (4, 1, 1.0), (8, 0, 1.0)]))
    assert knee is not None and (knee.last_clean, knee.first_preempting) == (2, 4)


def test_predicted_knee_for_concurrency_and_rate() -> None:
    points = _points([(1, 0, 0.1), (8, 0, 0.5)])
    # capacity 4,160 ÷ 208 tokens = 20 sequences
    got = memory_load.predicted_knee(
        points, kind="concurrency", capacity_tokens=4160, max_batch_size=None
    )
    assert got == 20
    assert (
        memory_load.predicted_knee(
            points, kind="concurrency", capacity_tokens=4160, max_batch_size=16
        )
        is None
    )  # the batch cap (16) comes first
    assert (
        memory_load.predicted_knee(points, kind="rate", capacity_tokens=None, max_batch_size=None)
        is None
    )
    rate = pd.DataFrame({"load": [1.0, 2.0, 4.0], "predicted_kv": [0.3, 0.6, 1.2]})
    # crosses 100 % between 2 (60 %) and 4 (120 %): 2 + (0.4 / 0.6) × 2
    assert memory_load.predicted_knee(
        rate, kind="rate", capacity_tokens=1000, max_batch_size=None
    ) == pytest.approx(2 + 0.4 / 0.6 * 2)
