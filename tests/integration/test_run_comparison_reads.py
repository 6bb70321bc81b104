"""Runs side by side (runs_table.run_aggregates, request_stats.slo_attainment,
request_rows' samples) on DuckDB and PostgreSQL (``store_url``), against hand-computed values
and against the pure definitions in analysis.slo."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pandas as pd
import pytest

from analysis import slo
from errors import InputError
from store import ingest, request_rows, request_stats, runs_table, sql
from store.db import Store
from store.lifecycle import open_store


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url)
    _seed(s)
    yield s
    s.dispose()


def _requests() -> pd.DataFrame:
    # run "a": 5 requests; seq 4 failed. TTFT 10..40 ok, TPOT 1..4 (seq 3: one token → NULL)
    return pd.DataFrame(
        {
            "run_id": "a",
            "seq": range(5),
            "status": ["ok", "ok", "ok", "ok", "timeout"],
            "sent_at": [100.0, 101.0, 102.0, 103.0, 104.0],
            "done_at": [101.0, 102.0, 103.0, 104.0, 110.0],
            "input_tokens": [100, 100, 3000, 100, 100],
            "output_tokens": [10, 20, 30, 1, 0],
            "ttft_ms": [10.0, 20.0, 30.0, 40.0, None],
            "tpot_ms": [1.0, 2.0, 3.0, None, None],
            "e2e_ms": [100.0, 200.0, 300.0, 400.0, None],
            "lag_ms": [0.0, 1.0, 2.0, 3.0, 4.0],
        }
    )


def _seed(store: Store) -> None:
    ingest.add_run(
        store,
        {
            "run_id": "a",
            "source": "servescope",
            "framework": "sim",
            "model": "m",
            "gpu_count": 2,
            "arrival": "concurrency",
            "concurrency": 8,
            "duration_s": 10.0,
            "engine_params": {"max_batch_size": 8},
            "client_bound": False,
        },
    )
    ingest.add_run(  # aggregate-only import: no requests rows
        store,
        {
            "run_id": "g",
            "source": "guidellm",
            "framework": "vllm",
            "arrival": "constant",
            "target_rate": 2.0,
            "tool_summary": {
                "aggregates_only": True,
                "metrics": {"ttft_ms": {"p99": 55.0}, "request_throughput": 1.9},
            },
        },
    )
    ingest.add_requests(store, _requests())
    ingest.add_token_gaps(
        store,
        pd.DataFrame(
            {
                "run_id": "a",
                "seq": [0, 0, 1, 4],  # seq 4 timed out: its gap is left out
                "idx": [0, 1, 0, 0],
                "gap_ms": [1.0, 3.0, 5.0, 99.0],
            }
        ),
    )


def test_run_aggregates_hand_computed(store: Store) -> None:
    df = runs_table.run_aggregates(store, ["g", "a", "missing"])
    assert df["run_id"].tolist() == ["g", "a"]  # in the order asked, unknown ids dropped
    a = df.set_index("run_id").loc["a"]
    assert (a["requests"], a["ok"], a["errors"], a["timeouts"]) == (5, 4, 1, 1)
    assert a["error_rate"] == pytest.approx(0.2)
    assert a["timeout_rate"] == pytest.approx(0.2)
    assert a["output_tokens"] == 61
    assert a["duration_s"] == pytest.approx(10.0)
    assert a["request_throughput"] == pytest.approx(0.4)
    # the configuration Compare groups a series by (its engine parameters, as stored)
    assert json.loads(a["engine_params"]) == {"max_batch_size": 8}
    assert a["output_throughput"] == pytest.approx(6.1)
    assert a["output_throughput_per_gpu"] == pytest.approx(3.05)
    assert a["ttft_n"] == 4
    # TTFT 10,20,30,40: P50 = 25, P90 = 37, P99 = 39.7 (linear interpolation)
    assert a["ttft_p50_ms"] == pytest.approx(25.0)
    assert a["ttft_p90_ms"] == pytest.approx(37.0)
    assert a["ttft_p99_ms"] == pytest.approx(39.7)
    assert a["tpot_n"] == 3 and a["tpot_p50_ms"] == pytest.approx(2.0)
    assert a["lag_n"] == 5 and a["lag_p50_ms"] == pytest.approx(2.0)  # lag: every request
    assert a["itl_n"] == 3 and a["itl_p50_ms"] == pytest.approx(3.0)  # ok requests' gaps only
    assert not a["aggregates_only"]
    g = df.set_index("run_id").loc["g"]
    assert g["aggregates_only"] and g["requests"] == 0
    assert g["tool_summary"]["metrics"]["ttft_ms"]["p99"] == 55.0
    assert pd.isna(g["concurrency"]) and g["target_rate"] == 2.0


def test_slo_attainment_in_sql_matches_the_pure_definition(store: Store) -> None:
    prof = slo.SloProfile(name="t", ttft_ms=25.0, tpot_ms=2.5, e2e_ms=350.0)
    df = request_stats.slo_attainment(store, ["a", "g"], prof.sql_thresholds())
    assert df["run_id"].tolist() == ["a"]  # no requests, no attainment
    row = df.iloc[0]
    # TTFT ≤ 25: seq 0,1; TPOT ≤ 2.5 or NULL: 0,1,3; E2E ≤ 350: 0,1,2; all: 0,1
    assert (row["ttft_met"], row["tpot_met"], row["e2e_met"], row["met"]) == (2, 3, 3, 2)
    assert row["goodput"] == pytest.approx(0.2)  # 2 / 10 s
    assert row["attainment"] == pytest.approx(0.4)
    pure = slo.attainment(_requests(), prof, 10.0)
    assert (pure.ttft_met, pure.tpot_met, pure.e2e_met, pure.met) == (2, 3, 3, 2)


def test_slo_attainment_length_conditioned(store: Store) -> None:
    # limit = 5 + 10 ms per 1,000 input tokens: 100 tokens → 6 ms, 3,000 tokens → 35 ms
    prof = slo.SloProfile(name="len", ttft_base_ms=5.0, ttft_ms_per_1k_input=10.0)
    row = request_stats.slo_attainment(store, ["a"], prof.sql_thresholds()).iloc[0]
    assert row["ttft_met"] == 1  # only seq 2 (30 ms ≤ 35 ms)
    assert row["met"] == 1  # no TPOT / E2E targets
    assert slo.attainment(_requests(), prof, 10.0).ttft_met == 1


def test_metric_samples_are_bounded_per_run(store: Store) -> None:
    all_ttft = request_rows.metric_samples(store, ["a"], "ttft_ms", 100)
    assert all_ttft["value"].tolist() == [10.0, 20.0, 30.0, 40.0]
    two = request_rows.metric_samples(store, ["a"], "ttft_ms", 2)
    assert two["value"].tolist() == [10.0, 30.0]  # stride 2: seq 0 and 2
    itl = request_rows.metric_samples(store, ["a", "g"], "itl_ms", 100)
    assert itl["run_id"].tolist() == ["a"] * 3
    assert np.sort(itl["value"].to_numpy()).tolist() == [1.0, 3.0, 5.0]


def test_bad_arguments(store: Store) -> None:
    with pytest.raises(InputError, match="choose one of"):
        request_rows.metric_samples(store, ["a"], "nope", 10)
    with pytest.raises(InputError, match="thresholds lack"):
        request_stats.slo_attainment(store, ["a"], {"tpot": 1.0})
    with pytest.raises(InputError, match="at most"):
        runs_table.run_aggregates(store, [str(i) for i in range(sql.MAX_RUNS + 1)])
    assert runs_table.run_aggregates(store, []).empty
    assert request_stats.slo_attainment(store, [], slo.SloProfile(name="x").sql_thresholds()).empty


def test_request_samples_read_three_metrics_at_once(store: Store) -> None:
    wide = request_rows.request_samples(store, ["a", "g"], 100)
    assert wide["run_id"].tolist() == ["a"] * 4  # ok requests only; g has none
    assert wide["ttft_ms"].tolist() == [10.0, 20.0, 30.0, 40.0]
    assert wide["tpot_ms"].iloc[:3].tolist() == [1.0, 2.0, 3.0]
    assert pd.isna(wide["tpot_ms"].iloc[3])  # one-token response: undefined TPOT
    assert request_rows.request_samples(store, ["a"], 2)["e2e_ms"].tolist() == [100.0, 300.0]
    assert request_rows.request_samples(store, [], 2).empty
