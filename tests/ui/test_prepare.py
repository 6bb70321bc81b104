"""services.commands.prepare.prepare computes exactly what the Latency and Memory pages read first:
after it, their default views of a run are served from stored rollups, with nothing left to
aggregate (every rollup-backed read the pages make would otherwise store a new one: the tests
keep every rollup, SERVESCOPE_ROLLUP_MIN_MS=0)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from streamlit.testing.v1 import AppTest
from test_latency_page import seed_series

from services.commands import prepare
from store import rollups
from store.lifecycle import open_store

ROOT = Path(__file__).resolve().parents[2]


def _render(page: str, run_id: str) -> None:
    at = AppTest.from_file(str(ROOT / "pages" / page), default_timeout=60)
    at.query_params["run"] = run_id
    at.run()
    assert [e.value for e in at.exception] == [] and [e.value for e in at.error] == []


def _stored(url: str) -> pd.DataFrame:
    store = open_store(url)
    try:
        return rollups.stored(store)[["run_id", "kind", "params", "computed_at"]]
    finally:
        store.dispose()


def test_prepared_runs_render_from_stored_rollups(db_url: str) -> None:
    seed_series(db_url)
    store = open_store(db_url)
    assert prepare.prepare(store, ["c1", "c8", "c32"], large_run=1)
    store.dispose()
    prepared = _stored(db_url)
    kinds = set(prepared.loc[prepared["run_id"] == "c32", "kind"])
    assert kinds == {
        "run_stats",
        "bucket_latency",
        "ttft_heatmap",
        "request_sample",
        "slowest_requests",
        "in_flight_at",
        "latency_timeline",
        "request_samples",
        "metric_samples",
        "slo_attainment",
        "run_metric_sample",
    }
    _render("home.py", "c32")
    _render("latency.py", "c32")
    _render("memory.py", "c32")
    at = AppTest.from_file(str(ROOT / "pages" / "compare.py"), default_timeout=60)
    at.query_params["runs"] = "c32,c8"
    at.session_state["compare_distributions"] = True  # the CDFs and the bootstrap
    at.run()
    assert [e.value for e in at.exception] == [] and [e.value for e in at.error] == []
    assert len([c for c in at.get("plotly_chart")]) > 0
    pd.testing.assert_frame_equal(_stored(db_url), prepared)  # nothing new was aggregated


def test_small_runs_get_their_summary_only(db_url: str) -> None:
    seed_series(db_url)
    store = open_store(db_url)
    assert prepare.prepare(store, ["c1", "c8", "c32", "missing"])  # below LARGE_RUN
    store.dispose()
    assert set(_stored(db_url)["kind"]) == {"run_stats"}
