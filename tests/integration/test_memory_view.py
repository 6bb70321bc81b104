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


# --- Memory vs load ----------------------------------------------------------------------------


def _seed_sweep(store: Store) -> None:
    """Sweep s1: two points (max_batch_size 8 and 32) measured at request rates 1, 2, 4; each
    run 60 s with 10 KV samples and a preemption counter, 100 requests of I=300, O=100 whose
    E2E is 2 s. Point b32 preempts from rate 4 on; point b8 never. The engine was told
    num_gpu_blocks=100 (1,600 tokens)."""
    for p, batch in (("b8", 8), ("b32", 32)):
        for k, rate in enumerate((1.0, 2.0, 4.0)):
            run_id, start = f"{p}-r{rate:g}", T0 + 5000 + 1000 * k + (0 if p == "b8" else 500)
            target = f"http://{p}:8000/metrics"
            ingest.add_run(
                store,
                {
                    "run_id": run_id,
                    "source": "servescope",
                    "model": "llama-3.1-8b",
                    "gpu_name": "H100-SXM-80GB",
                    "workload": "chat",
                    "arrival": "poisson",
                    "target_rate": rate,
                    "engine_params": {"max_batch_size": batch, "num_gpu_blocks": 100},
                    "sweep_id": "s1",
                    "started_at": start,
                    "ended_at": start + 60,
                    "client_params": {
                        "collectors": {"targets": [target]},
                        "sweep_point": {"sweep_id": "s1", "point_id": p},
                    },
                },
            )
            ts = start + np.arange(10) * 6.0
            preempted = 3.0 if (p == "b32" and rate == 4.0) else 0.0
            ingest.add_rows(
                store,
                "engine_samples",
                pd.DataFrame(
                    {
                        "target": target,
                        "ts": np.concatenate([ts, ts]),
                        "metric": ["kv_cache_usage"] * 10 + ["preemptions_total"] * 10,
                        "engine": "sim",
                        "value": np.concatenate(
                            [np.full(10, min(0.25 * rate, 1.0)), np.linspace(0, preempted, 10)]
                        ),
                    }
                ),
            )
            sent = start + np.arange(100) * 0.5
            ingest.add_requests(
                store,
                pd.DataFrame(
                    {
                        "run_id": run_id,
                        "seq": range(100),
                        "status": "ok",
                        "sent_at": sent,
                        "done_at": sent + 2.0,
                        "input_tokens": 300,
                        "output_tokens": 100,
                        "ttft_ms": 100.0,
                        "tpot_ms": 19.0,
                        "e2e_ms": 2000.0,
                    }
                ),
            )


def test_a_sweep_is_split_into_its_points_and_a_rate_series_uses_littles_law(
    store: Store,
) -> None:
    from services.views.memory import memory_load_view

    _seed_sweep(store)
    view = memory_load_view(store, MemorySelection(sweep="s1", point="b32"))
    assert {g.point for g in view.groups} == {"b8", "b32"} and view.group == "b32"
    assert {g.label for g in view.groups} == {
        "max_batch_size=8 (3 runs)",
        "max_batch_size=32 (3 runs)",
    }
    assert view.kind == "rate" and view.run_ids == ("b32-r1", "b32-r2", "b32-r4")
    assert view.prediction.capacity_tokens == 1600  # num_gpu_blocks 100 × block_size 16
    assert "num_gpu_blocks" in view.prediction.source
    points = view.points
    # held = 300 + 100 / 2 + 8 = 358 tokens; in flight = rate × 2 s E2E (Little's law)
    assert (points["held_tokens"] == 358).all()
    assert list(points["in_flight"]) == [2.0, 4.0, 8.0]
    assert list(points["predicted_kv"]) == pytest.approx([r * 2 * 358 / 1600 for r in (1, 2, 4)])
    assert list(points["preemptions"]) == [0.0, 0.0, 3.0]
    assert list(points["preemptions_per_1k"]) == [0.0, 0.0, 30.0]
    # clean at 1 (KV 25 %) and 2 (50 %): full at 2 + 0.5 / 0.25 = 4, the first preempting rate
    knee = view.measured_knee
    assert knee is not None and knee.load == pytest.approx(4.0)
    # predicted: 2.8 → 0.895 at rate 2 and 1.79 at rate 4: 2 + (1 − 0.895) / 0.895 × 2
    at2 = 2 * 2 * 358 / 1600
    assert view.predicted_knee == pytest.approx(2 + (1 - at2) / (2 * at2 - at2) * 2)
    # the other point: capped at 8 sequences in flight, never preempts
    b8 = memory_load_view(store, MemorySelection(sweep="s1", point="b8"))
    assert list(b8.points["in_flight"]) == [2.0, 4.0, 8.0]
    assert b8.measured_knee is not None and b8.measured_knee.load is None
    # no point named: the first of the largest groups; an unknown sweep: nothing
    assert memory_load_view(store, MemorySelection(sweep="s1")).group in ("b8", "b32")
    empty = memory_load_view(store, MemorySelection(sweep="nope"))
    assert not empty.enough and empty.groups == ()


def test_a_series_mixing_loads_and_configurations_says_so(store: Store) -> None:
    from services.views.memory import memory_load_view

    _seed_sweep(store)
    view = memory_load_view(
        store, MemorySelection(series=("b8-r1", "b32-r2", "r", "ghost", "timeless"))
    )
    assert view.kind == "rate" and view.run_ids == ("b8-r1", "b32-r2")
    assert view.differing == ("engine_params",)
    assert dict(view.excluded) == {
        "ghost": "not in the store",
        "r": "no concurrency or request rate recorded",
        "timeless": "no concurrency or request rate recorded",
    }


def test_selection_names_a_series_from_the_url() -> None:
    sel = MemorySelection.from_params({"series": "a,b,,a", "sweep": "s", "point": "p"})
    assert sel.series == ("a", "b") and sel.sweep == "s" and sel.point == "p"
    assert sel.names_series and not MemorySelection().names_series
