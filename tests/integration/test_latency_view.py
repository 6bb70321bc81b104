"""services.views.latency on a real DuckDB store: the run chosen, its window, the bucket
percentiles, the slowest requests with their in-flight counts, the prefill fit (from a lighter
run of the series when the run is never lightly loaded) and the diagnosis's inputs, against
values computed by hand from the seeded rows; the selection parsed from URL parameters."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.buckets import DEFAULT_EDGES
from services.views.latency import (
    DEFAULT_TOP,
    MAX_TOP,
    LatencySelection,
    edges_from_text,
    latency_view,
)
from store import ingest
from store.db import Store
from store.lifecycle import open_store

#: Later than any run's creation time, so runs with a start time list first (newest first).
T0 = 2_000_000_000.0
SERIES = {
    "source": "servescope",
    "framework": "sim",
    "model": "m",
    "endpoint": "http://sim:8000",
    "workload": "mixed",
    "arrival": "concurrency",
    "client_params": {"bench_id": "b"},
}
#: "light": one request at a time, TTFT = 10 ms + 0.05 ms × input tokens exactly.
LIGHT_N = 20
LIGHT_INPUT = 100 * (np.arange(LIGHT_N) + 1)
#: "busy" (the newest run): every request in flight together, short and long prompts in turn.
BUSY_N = 40
BUSY_SENT = T0 + 1000 + np.arange(BUSY_N) * 0.5
BUSY_INPUT = np.where(np.arange(BUSY_N) % 2 == 0, 100, 5000)
BUSY_TTFT = 100.0 + np.arange(BUSY_N)
BUSY_E2E = BUSY_TTFT + 1000.0
BUSY_OUTPUT = np.where(np.arange(BUSY_N) < 10, 10, 300)


def _seed(store: Store) -> None:
    ingest.add_run(
        store,
        {**SERIES, "run_id": "light", "concurrency": 1, "started_at": T0, "ended_at": T0 + 60},
    )
    sent = T0 + np.arange(LIGHT_N) * 2.0
    ingest.add_requests(
        store,
        pd.DataFrame(
            {
                "run_id": "light",
                "seq": range(LIGHT_N),
                "status": "ok",
                "sent_at": sent,
                "done_at": sent + 1.0,
                "input_tokens": LIGHT_INPUT,
                "output_tokens": 50,
                "ttft_ms": 10.0 + 0.05 * LIGHT_INPUT,
                "tpot_ms": 5.0,
                "e2e_ms": 500.0,
            }
        ),
    )
    ingest.add_run(
        store,
        {**SERIES, "run_id": "busy", "concurrency": 64, "started_at": T0 + 1000},
    )
    ingest.add_requests(
        store,
        pd.DataFrame(
            {
                "run_id": "busy",
                "seq": range(BUSY_N),
                "status": "ok",
                "sent_at": BUSY_SENT,
                "done_at": BUSY_SENT + 50.0,
                "input_tokens": BUSY_INPUT,
                "output_tokens": BUSY_OUTPUT,
                "ttft_ms": BUSY_TTFT,
                "tpot_ms": 5.0,
                "e2e_ms": BUSY_E2E,
            }
        ),
    )
    ingest.add_run(
        store,
        {
            "run_id": "agg",
            "source": "vllm-bench",
            "started_at": T0 - 500,
            "tool_summary": {"aggregates_only": True, "mean_ttft_ms": 12.5},
        },
    )
    ingest.add_run(store, {"run_id": "empty", "source": "servescope", "started_at": T0 - 600})
    ingest.add_run(store, {"run_id": "timeless", "source": "vllm-bench", "started_at": T0 - 700})
    ingest.add_requests(
        store,
        pd.DataFrame(
            {
                "run_id": "timeless",
                "seq": range(10),
                "status": "ok",
                "input_tokens": 1000,
                "output_tokens": 10,
                "ttft_ms": [100.0 + i for i in range(10)],
                "tpot_ms": 8.0,
                "e2e_ms": 200.0,
            }
        ),
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(f"duckdb:///{tmp_path / 'store.duckdb'}")
    try:
        _seed(opened)
        yield opened
    finally:
        opened.dispose()


# --- the selection --------------------------------------------------------------------------------


def test_selection_from_url_params_and_defaults() -> None:
    assert LatencySelection.from_params({}) == LatencySelection()
    assert LatencySelection.default("r") == LatencySelection.from_params({"run": "r"})
    chosen = LatencySelection.from_params(
        {
            "run": "r",
            "edges": "1k,4k",
            "by": "output",
            "window": "10-20",
            "top": "5",
            "metric": "e2e_ms",
        }
    )
    assert chosen == LatencySelection("r", (1024, 4096), "output", (10.0, 20.0), 5, "e2e_ms")
    hash(chosen)  # the cache key of ui.cache.latency
    unreadable = LatencySelection.from_params(
        {"edges": "4k,1k", "by": "x", "window": "a-b", "top": "many", "metric": "nope"}
    )
    assert unreadable == LatencySelection()
    assert LatencySelection.from_params({"top": "5000"}).top == MAX_TOP
    assert LatencySelection.from_params({"top": "0"}).top == 1


def test_edges_text_errors_say_why_and_fall_back_to_the_defaults() -> None:
    assert edges_from_text(None) == (DEFAULT_EDGES, None)
    assert edges_from_text("256, 2k") == ((256, 2048), None)
    edges, problem = edges_from_text("4k,1k")
    assert edges == DEFAULT_EDGES
    assert problem is not None and "not strictly increasing" in problem.message
    assert edges_from_text("")[1] is not None  # an emptied text box is said so too


# --- the run --------------------------------------------------------------------------------------


def test_empty_store_has_no_run(tmp_path: Path) -> None:
    empty = open_store(f"duckdb:///{tmp_path / 'empty.duckdb'}")
    try:
        view = latency_view(empty, LatencySelection())
    finally:
        empty.dispose()
    assert view.run_id is None and view.runs.empty and view.buckets is None


def test_no_run_or_an_unknown_run_is_the_newest(store: Store) -> None:
    assert latency_view(store, LatencySelection()).run_id == "busy"
    assert latency_view(store, LatencySelection("gone")).run_id == "busy"
    view = latency_view(store, LatencySelection("light"))
    assert view.run_id == "light"
    assert view.runs["run_id"].tolist()[:2] == ["busy", "light"]


def test_aggregates_only_and_empty_runs_show_nothing_more(store: Store) -> None:
    agg = latency_view(store, LatencySelection("agg"))
    assert agg.aggregates_only and agg.tool.source == "vllm-bench"
    assert agg.tool.summary is not None and agg.tool.summary["mean_ttft_ms"] == 12.5
    assert agg.buckets is None and agg.diagnosis is None
    empty = latency_view(store, LatencySelection("empty"))
    assert not empty.aggregates_only and empty.requests == 0 and empty.buckets is None


# --- a whole run ----------------------------------------------------------------------------------


def test_default_view_of_a_run(store: Store) -> None:
    view = latency_view(store, LatencySelection.default("busy"))
    assert view.requests == BUSY_N
    assert view.span == (BUSY_SENT[0], BUSY_SENT[-1] + 50.0)
    assert view.window is not None and view.window.whole and view.window.bounds == (None, None)
    assert view.buckets is not None
    table = view.buckets.table
    short, long_ = BUSY_INPUT == 100, BUSY_INPUT == 5000
    assert table["bucket"].tolist() == ["<256", "4k–16k"]
    assert table["samples"].tolist() == [int(short.sum()), int(long_.sum())]
    assert table["P50"].tolist() == [
        round(float(np.percentile(BUSY_TTFT[short], 50)), 1),
        round(float(np.percentile(BUSY_TTFT[long_], 50)), 1),
    ]
    assert set(table["P99 confidence"]) == {"low (< 100 samples)"}
    assert view.over_time is not None
    assert view.over_time.stride == 1 and view.over_time.total == BUSY_N
    assert len(view.over_time.sample) == BUSY_N


def test_slowest_requests_carry_the_exact_in_flight_count(store: Store) -> None:
    view = latency_view(store, LatencySelection("busy", top=5))
    assert view.slowest is not None
    table = view.slowest.table
    slowest_first = np.argsort(-BUSY_TTFT)[:5]
    assert table["TTFT ms"].tolist() == BUSY_TTFT[slowest_first].tolist()
    # every request takes 50 s, so all sent before (and itself) are still in flight
    sent = BUSY_SENT
    in_flight = [int((sent <= sent[i]).sum()) for i in slowest_first]
    assert table["in flight (run)"].tolist() == in_flight
    assert not view.slowest.engine_sampled  # no engine samples were stored


def test_prefill_fit_comes_from_the_lighter_run_of_the_series(store: Store) -> None:
    busy = latency_view(store, LatencySelection("busy"))
    assert busy.prefill is not None and busy.prefill.fit is not None
    assert busy.prefill.fit_run_id == "light"  # busy is never lightly loaded
    assert busy.prefill.fit.ms_per_token == pytest.approx(0.05)
    assert busy.prefill.fit.intercept_ms == pytest.approx(10.0)
    assert busy.prefill.split is not None and not busy.prefill.split.empty
    light = latency_view(store, LatencySelection("light"))
    assert light.prefill is not None and light.prefill.fit_run_id == "light"


def test_diagnosis_inputs_come_from_the_selection(store: Store) -> None:
    view = latency_view(store, LatencySelection("busy"))
    assert view.diagnosis is not None
    evidence = view.diagnosis.evidence
    assert evidence.ttft_p50_ms == pytest.approx(float(np.percentile(BUSY_TTFT, 50)))
    assert evidence.ttft_p99_ms == pytest.approx(float(np.percentile(BUSY_TTFT, 99)))
    assert evidence.buckets is not None
    assert evidence.buckets["median_input"].tolist() == [100.0, 5000.0]
    assert evidence.load is not None and evidence.load["run_id"].tolist() == ["light", "busy"]
    assert evidence.engine is None  # no engine samples: rule 1 says so
    assert any("engine samples" in m for m in view.diagnosis.missing)


# --- selections -----------------------------------------------------------------------------------


def test_window_reads_only_the_requests_sent_in_it(store: Store) -> None:
    view = latency_view(store, LatencySelection("busy", window=(0.0, 4.0)))
    assert view.window is not None and not view.window.whole
    since, until = view.window.bounds
    assert since is not None and until is not None
    assert since == BUSY_SENT[0]
    sent = BUSY_SENT
    inside = (sent >= since) & (sent < until)
    assert view.over_time is not None and view.over_time.total == int(inside.sum())
    assert view.buckets is not None
    assert int(view.buckets.table["samples"].sum()) == int(inside.sum())
    clamped = latency_view(store, LatencySelection("busy", window=(0.0, 1e9)))
    assert clamped.window is not None and clamped.window.whole  # beyond the run: all of it


def test_metric_and_by_change_the_table_not_the_diagnosis(store: Store) -> None:
    view = latency_view(store, LatencySelection("busy", metric="e2e_ms", by="output", edges=(100,)))
    assert view.buckets is not None
    table = view.buckets.table
    assert set(table["metric"]) == {"E2E"}
    assert table["bucket"].tolist() == ["<100", "≥100"]
    assert table["samples"].tolist() == [
        int((BUSY_OUTPUT < 100).sum()),
        int((BUSY_OUTPUT >= 100).sum()),
    ]
    assert view.diagnosis is not None
    ttft = view.diagnosis.ttft_by_input
    assert set(ttft["metric"]) == {"ttft_ms"} and ttft["n"].sum() == BUSY_N


def test_requests_without_send_times_still_get_buckets_and_a_diagnosis(store: Store) -> None:
    view = latency_view(store, LatencySelection("timeless"))
    assert view.requests == 10 and view.span is None and view.window is None
    assert view.over_time is None and view.prefill is None
    assert view.buckets is not None and view.buckets.table["bucket"].tolist() == ["256–1k"]
    assert view.slowest is not None and len(view.slowest.table) == min(DEFAULT_TOP, 10)
    assert view.diagnosis is not None
    ttft = [100.0 + i for i in range(10)]
    assert view.diagnosis.evidence.ttft_p50_ms == pytest.approx(float(np.percentile(ttft, 50)))
    assert view.diagnosis.timeline.empty
