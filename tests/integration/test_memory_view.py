"""services.views.memory on a real DuckDB store: the run and window chosen, the headline
figures, trends, warnings, memory cap and overlay, against values computed by hand from the
seeded samples; the selection parsed from URL parameters."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from services.views.memory import DEFAULT_CAP, MemorySelection, memory_view
from store import catalog, ingest
from store.db import Store
from store.lifecycle import open_store

#: Later than any run's creation time, so runs with a start time list first (newest first).
T0 = 2_000_000_000.0
GIB = 2**30
MIB = 2**20
#: Run "r": 100 s; samples every 10 s; one request per second.
DURATION_S = 100.0
STEP_S = 10.0
#: GPU 0 of host h rises by 1 GiB per sample from 10 GiB; GPU 1 stays at 5 GiB; 40 GiB each.
GPU0_START, GPU1, GPU_TOTAL = 10 * GIB, 5 * GIB, 40 * GIB
#: The preemption counter, restarted from zero after 3 (increase: 1 + 2 + 1 + 1 = 5).
PREEMPTIONS = [0.0, 0.0, 1.0, 3.0, 3.0, 0.0, 1.0, 1.0, 2.0, 2.0]
KV = [0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.45, 0.4, 0.35]


def _seed(store: Store) -> None:
    ingest.add_run(
        store,
        {
            "run_id": "r",
            "source": "servescope",
            "started_at": T0,
            "ended_at": T0 + DURATION_S,
            "client_params": {"collectors": {"targets": ["a"], "hosts": ["h"]}},
        },
    )
    ingest.add_run(  # newest; no samples in its span
        store,
        {"run_id": "other", "source": "servescope", "started_at": T0 + 1000, "ended_at": T0 + 1060},
    )
    ingest.add_run(store, {"run_id": "timeless", "source": "servescope"})
    ingest.add_run(
        store,
        {
            "run_id": "agg",
            "source": "vllm-bench",
            "started_at": T0 - 500,
            "ended_at": T0 - 440,
            "tool_summary": {"aggregates_only": True},
        },
    )
    ts = T0 + np.arange(len(KV)) * STEP_S
    engine = [
        pd.DataFrame({"target": "a", "ts": ts, "metric": metric, "engine": "sim", "value": values})
        for metric, values in (("kv_cache_usage", KV), ("preemptions_total", PREEMPTIONS))
    ]
    ingest.add_rows(store, "engine_samples", pd.concat(engine, ignore_index=True))
    used0 = GPU0_START + np.arange(len(ts)) * GIB
    ingest.add_rows(
        store,
        "gpu_samples",
        pd.DataFrame(
            {
                "host": "h",
                "gpu_index": [0] * len(ts) + [1] * len(ts),
                "ts": np.concatenate([ts, ts]),
                "mem_used_bytes": np.concatenate([used0, np.full(len(ts), GPU1)]),
                "mem_total_bytes": GPU_TOTAL,
                "util_gpu": 0.5,
            }
        ),
    )
    sent = T0 + np.arange(DURATION_S)
    ingest.add_requests(
        store,
        pd.DataFrame(
            {
                "run_id": "r",
                "seq": range(sent.size),
                "status": "ok",
                "sent_at": sent,
                "done_at": sent + 0.5,
                "input_tokens": 100,
                "output_tokens": 10,
                "ttft_ms": 100.0 + (sent - T0),  # +1 ms per second of the run
                "tpot_ms": 10.0,
                "e2e_ms": 500.0,
            }
        ),
    )
    catalog.save_user_entry(
        store,
        "slo_profiles",
        {"name": "half-memory", "percentile": 99, "ttft_ms": 500.0, "max_memory_fraction": 0.5},
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(f"duckdb:///{tmp_path / 'store.duckdb'}")
    try:
        _seed(opened)
        yield opened
    finally:
        opened.dispose()


def test_empty_store_has_no_run(tmp_path: Path) -> None:
    empty = open_store(f"duckdb:///{tmp_path / 'empty.duckdb'}")
    try:
        view = memory_view(empty, MemorySelection())
    finally:
        empty.dispose()
    assert view.run_id is None and view.runs.empty and not view.has_samples


def test_no_run_chosen_is_the_newest_and_a_run_without_time_has_no_span(store: Store) -> None:
    newest = memory_view(store, MemorySelection())
    assert newest.run_id == "other"
    assert newest.span == (T0 + 1000, T0 + 1060) and not newest.has_samples
    assert memory_view(store, MemorySelection.default("ghost")).run_id == "other"
    timeless = memory_view(store, MemorySelection.default("timeless"))
    assert timeless.run_id == "timeless" and timeless.span is None


def test_whole_run_figures_trends_and_warnings(store: Store) -> None:
    view = memory_view(store, MemorySelection.default("r"))
    assert view.span == (T0, T0 + DURATION_S)
    assert view.window == (0.0, DURATION_S) and (view.since, view.until) == view.span
    n = len(KV)
    peak = GPU0_START + (n - 1) * GIB + GPU1
    figures = view.figures
    assert figures.gpu_peak_bytes == peak
    assert figures.gpu_mean_bytes == pytest.approx(GPU0_START + (n - 1) / 2 * GIB + GPU1)
    assert figures.gpu_total_bytes == 2 * GPU_TOTAL
    assert figures.headroom_bytes == pytest.approx(DEFAULT_CAP * 2 * GPU_TOTAL - peak)
    assert figures.kv_peak == max(KV)
    assert figures.kv_mean == pytest.approx(sum(KV) / n)
    assert figures.preemptions == 5.0
    assert view.memory_trend is not None and view.memory_trend.label == "GPU memory slope"
    memory_fit = view.memory_trend.trend
    assert memory_fit is not None and memory_fit.slope == pytest.approx(GIB / MIB / STEP_S)
    assert view.latency_trend is not None and view.latency_trend.unit == "ms/h"
    latency_fit = view.latency_trend.trend
    assert latency_fit is not None and latency_fit.slope == pytest.approx(1.0)
    # the counter moved while KV usage was at most 50 %; the run is too short to call a leak
    assert [w.kind for w in view.warnings] == ["fragmentation"]
    assert view.aligned is None and view.source == "servescope" and not view.aggregates_only


def test_window_is_clamped_to_the_run_and_narrows_the_figures(store: Store) -> None:
    view = memory_view(store, MemorySelection(run_id="r", window=(0.0, 40.0)))
    assert (view.since, view.until) == (T0, pytest.approx(T0 + 40.0))
    assert view.figures.gpu_peak_bytes == GPU0_START + 4 * GIB + GPU1
    assert view.figures.preemptions == 3.0  # 0, 0, 1, 3, 3
    clamped = memory_view(store, MemorySelection(run_id="r", window=(-5.0, 1e9)))
    assert clamped.window == (0.0, DURATION_S) and (clamped.since, clamped.until) == clamped.span


def test_memory_cap_from_the_selection_or_the_slo_profile(store: Store) -> None:
    peak = GPU0_START + (len(KV) - 1) * GIB + GPU1
    own = memory_view(store, MemorySelection(run_id="r", cap=0.25, slo="interactive-chat"))
    assert (own.cap, own.cap_from_profile, own.slo) == (0.25, False, "interactive-chat")
    assert own.figures.headroom_bytes == pytest.approx(0.25 * 2 * GPU_TOTAL - peak)
    profile = memory_view(store, MemorySelection(run_id="r", cap=0.25, slo="half-memory"))
    assert (profile.cap, profile.cap_from_profile) == (0.5, True)
    assert "half-memory" in profile.slo_profiles
    unknown = memory_view(store, MemorySelection(run_id="r", slo="no-such-profile"))
    assert unknown.slo is None and unknown.cap == DEFAULT_CAP


def test_overlay_keeps_known_other_runs(store: Store) -> None:
    view = memory_view(store, MemorySelection(run_id="r", overlay=("other", "ghost", "r")))
    assert view.overlay == ("other",)
    assert view.aligned is not None and set(view.aligned["run_id"]) == {"r"}


def test_an_aggregates_only_import_is_flagged(store: Store) -> None:
    view = memory_view(store, MemorySelection.default("agg"))
    assert view.aggregates_only and view.source == "vllm-bench"
    assert view.latency_trend is not None and view.latency_trend.trend is None


def test_selection_from_url_parameters() -> None:
    params = {"run": "r", "window": "60-300", "cap": "0.8", "slo": "chat", "overlay": "a,,b"}
    assert MemorySelection.from_params(params) == MemorySelection(
        run_id="r", window=(60.0, 300.0), cap=0.8, slo="chat", overlay=("a", "b")
    )
    assert MemorySelection.from_params({"window": "x-y", "cap": "lots"}) == MemorySelection()
    assert MemorySelection.from_params({}) == MemorySelection.default()
