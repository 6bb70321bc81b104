"""store.run_series on DuckDB and PostgreSQL: per-run peaks, P95, counter increases across a
restart, GPU sums per instant and request moments, against values computed by hand; samples
outside a run's span or sources are not counted."""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
import pytest

from store import ingest, run_series
from store.db import Store
from store.lifecycle import open_store

T0 = 1_950_000_000.0
GIB = 2.0**30


def _engine(target: str, metric: str, points: list[tuple[float, float]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "target": target,
            "ts": [T0 + t for t, _ in points],
            "metric": metric,
            "engine": "vllm",
            "value": [v for _, v in points],
        }
    )


def _gpu(host: str, index: int, points: list[tuple[float, float]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "host": host,
            "gpu_index": index,
            "ts": [T0 + t for t, _ in points],
            "mem_used_bytes": [v * GIB for _, v in points],
            "mem_total_bytes": 40 * GIB,
        }
    )


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    opened = open_store(store_url)
    try:
        # a: recorded sources t1, t2 and host h over [T0, T0 + 100]
        ingest.add_run(
            opened,
            {
                "run_id": "a",
                "source": "servescope",
                "started_at": T0,
                "ended_at": T0 + 100,
                "client_params": {"collectors": {"targets": ["t1", "t2"], "hosts": ["h"]}},
            },
        )
        # b: nothing recorded: every source reporting in [T0 + 1000, T0 + 1100]
        ingest.add_run(
            opened,
            {"run_id": "b", "source": "servescope", "started_at": T0 + 1000, "ended_at": T0 + 1100},
        )
        ingest.add_run(opened, {"run_id": "c", "source": "servescope"})  # no time at all
        engine = [
            _engine("t1", "kv_cache_usage", [(10, 0.2), (20, 0.5), (30, 0.4), (200, 1.0)]),
            _engine("t2", "kv_cache_usage", [(40, 0.9)]),
            _engine("t3", "kv_cache_usage", [(50, 1.0)]),  # not a's source
            # t1 restarts after 2: 2 + 1 + 2 = 5; t2: 2; outside the span: not counted
            _engine("t1", "preemptions_total", [(10, 0), (20, 2), (30, 1), (40, 3), (300, 50)]),
            _engine("t2", "preemptions_total", [(10, 5), (40, 7)]),
            _engine("t9", "kv_cache_usage", [(1010, 0.3), (1020, 0.6)]),
        ]
        ingest.add_rows(opened, "engine_samples", pd.concat(engine, ignore_index=True))
        gpu = [
            _gpu("h", 0, [(10, 10), (20, 25)]),
            _gpu("h", 1, [(10, 20), (20, 10)]),  # sums 30, 35 GiB
            _gpu("h2", 0, [(10, 39)]),  # not a's host
            _gpu("h3", 0, [(1010, 5)]),
        ]
        ingest.add_rows(opened, "gpu_samples", pd.concat(gpu, ignore_index=True))
        ingest.add_requests(
            opened,
            pd.DataFrame(
                {
                    "run_id": "a",
                    "seq": [0, 1, 2, 3],
                    "status": ["ok", "ok", "ok", "error"],
                    "sent_at": T0 + 1,
                    "done_at": T0 + 2,
                    "input_tokens": [100, 200, 300, 50],
                    "output_tokens": [10, 20, None, 5],
                    "e2e_ms": [1000.0, 2000.0, 3000.0, 9000.0],
                }
            ),
        )
        yield opened
    finally:
        opened.dispose()


def test_series_figures_by_hand(store: Store) -> None:
    df = run_series.series_figures(store, ["b", "a", "c", "ghost"]).set_index("run_id")
    assert list(df.index) == ["b", "a", "c"]
    a = df.loc["a"]
    assert (a["since"], a["until"]) == (T0, T0 + 100)
    assert (a["requests"], a["ok"]) == (4, 3)
    assert a["sum_out_in"] == 10 * 100 + 20 * 200
    assert (a["sum_out_sq"], a["sum_out"]) == (100 + 400, 30)
    assert a["mean_e2e_s"] == pytest.approx(2.0)
    assert a["kv_peak"] == 0.9
    # continuous P95 of 0.2, 0.4, 0.5, 0.9: 0.5 + 0.85 × (0.9 − 0.5)
    assert a["kv_p95"] == pytest.approx(0.84)
    assert a["preemptions"] == 7
    assert a["gpu_peak_bytes"] == 35 * GIB and a["gpu_total_bytes"] == 80 * GIB
    assert a["gpu_peak_fraction"] == pytest.approx(25 / 40)
    b = df.loc["b"]
    assert b["kv_peak"] == 0.6 and pd.isna(b["preemptions"])  # no counter: unknown
    assert b["gpu_peak_bytes"] == 5 * GIB and b["requests"] == 0
    c = df.loc["c"]
    assert c[["since", "kv_peak", "gpu_peak_bytes"]].isna().all()


def test_no_runs_reads_nothing(store: Store) -> None:
    assert run_series.series_figures(store, []).empty
    assert run_series.series_figures(store, ["ghost"]).empty
