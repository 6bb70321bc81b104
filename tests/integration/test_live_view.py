"""services.views.live on a real DuckDB store at a fixed ``now``: the window shown, staleness of
targets and GPUs, counter rates; the selection parsed from URL parameters."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from services.views.live import REFRESH_S, WINDOW_S, LiveSelection, live_view
from store import ingest
from store.db import Store
from store.lifecycle import open_store

NOW = 1_900_000_000.0
LIVE, STOPPED = "http://10.0.0.1:8000/metrics", "http://10.0.0.2:30000/metrics"
TOKENS_PER_S = 250.0
GIB = 2**30


def _seed(store: Store) -> None:
    """A vLLM target scraped every second over the last minute, an SGLang target that stopped
    10 minutes ago; GPU host a live, host b silent for 14 minutes."""
    ts = NOW - 59 + np.arange(60.0)
    live = [
        pd.DataFrame({"target": LIVE, "engine": "vllm", "ts": ts, "metric": m, "value": v})
        for m, v in (
            ("requests_running", np.full(ts.size, 7.0)),
            ("generation_tokens_total", 1000.0 + TOKENS_PER_S * np.arange(ts.size)),
        )
    ]
    stopped = pd.DataFrame(
        {
            "target": STOPPED,
            "engine": "sglang",
            "ts": NOW - 630 + np.arange(30.0),
            "metric": "requests_running",
            "value": 3.0,
        }
    )
    ingest.add_rows(store, "engine_samples", pd.concat([*live, stopped], ignore_index=True))
    gpus = [
        pd.DataFrame({"host": host, "gpu_index": 0, "ts": times, "mem_used_bytes": GIB})
        for host, times in (("a", ts), ("b", NOW - 900 + np.arange(60.0)))
    ]
    ingest.add_rows(
        store, "gpu_samples", pd.concat(gpus, ignore_index=True).assign(mem_total_bytes=8 * GIB)
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(f"duckdb:///{tmp_path / 'store.duckdb'}")
    try:
        yield opened
    finally:
        opened.dispose()


def test_an_empty_store_shows_nothing(store: Store) -> None:
    view = live_view(store, LiveSelection(), now=NOW)
    assert view.empty and not view.current
    assert (view.window_start, view.window_end) == (NOW - WINDOW_S, NOW)


def test_current_window_with_stale_sources_and_rates(store: Store) -> None:
    _seed(store)
    view = live_view(store, LiveSelection(), now=NOW)
    assert view.current and (view.window_start, view.window_end) == (NOW - WINDOW_S, NOW)
    assert view.targets["target"].tolist() == [LIVE, STOPPED]
    assert view.stale_targets == {STOPPED}
    assert view.targets["generation_tps"].iloc[0] == pytest.approx(TOKENS_PER_S)
    rates = view.generation_rates
    assert set(rates["target"]) == {LIVE} and rates["rate"].to_numpy() == pytest.approx(
        TOKENS_PER_S
    )
    assert view.gpus_latest["host"].tolist() == ["a", "b"]
    assert view.stale_hosts == {"b"}


def test_old_samples_show_the_last_recorded_window(store: Store) -> None:
    _seed(store)
    later = NOW + 86_400
    view = live_view(store, LiveSelection(), now=later)
    assert not view.current and not view.empty
    assert view.window_end == NOW and view.window_start == NOW - WINDOW_S
    assert view.stale_targets == {LIVE, STOPPED} and view.stale_hosts == {"a", "b"}


def test_selection_from_url_parameters() -> None:
    assert LiveSelection.from_params({}) == LiveSelection.default()
    assert LiveSelection.from_params({"refresh": "5"}).refresh_s == 5.0
    assert LiveSelection.from_params({"refresh": "0.1"}).refresh_s == 1.0
    assert LiveSelection.from_params({"refresh": "3600"}).refresh_s == 60.0
    assert LiveSelection.from_params({"refresh": "soon"}).refresh_s == REFRESH_S
