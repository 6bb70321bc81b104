"""store.sample_timelines on DuckDB and PostgreSQL, against hand-computed values."""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
import pytest

from errors import InputError
from store import ingest, sample_timelines
from store.db import Store
from store.lifecycle import open_store

T0 = 1_700_000_000.0
GIB = 2.0**30


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """Run ``rec`` recorded its sources (target a, host h); run ``bare`` recorded none, so its
    sources are whatever reported during its span; ``later`` is ``rec``'s twin 100 s later."""
    s = open_store(store_url)
    ingest.add_run(
        s,
        {
            "run_id": "rec",
            "source": "servescope",
            "started_at": T0,
            "ended_at": T0 + 4,
            "client_params": {"collectors": {"targets": ["a"], "hosts": ["h"]}},
        },
    )
    ingest.add_run(
        s, {"run_id": "bare", "source": "servescope", "started_at": T0, "ended_at": T0 + 4}
    )
    ingest.add_run(
        s,
        {
            "run_id": "later",
            "source": "servescope",
            "started_at": T0 + 100,
            "ended_at": T0 + 104,
            "client_params": {"collectors": {"targets": ["a"], "hosts": []}},
        },
    )
    ts = [T0 + i for i in range(4)] + [T0 + 100 + i for i in range(4)]
    rows = []
    for metric, values in (
        ("kv_cache_usage", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]),
        ("preemptions_total", [0, 1, 3, 3, 3, 4, 4, 6]),
        ("requests_waiting", [0, 2, 4, 6, 0, 0, 0, 0]),
    ):
        rows.append(
            pd.DataFrame(
                {"target": "a", "ts": ts, "metric": metric, "engine": "sim", "value": values}
            )
        )
    rows.append(
        pd.DataFrame(
            {
                "target": "b",
                "ts": [T0 + 1],
                "metric": "kv_cache_usage",
                "engine": "sim",
                "value": [0.9],
            }
        )
    )
    ingest.add_rows(s, "engine_samples", pd.concat(rows, ignore_index=True))
    ingest.add_rows(
        s,
        "gpu_samples",
        pd.DataFrame(
            {
                "host": "h",
                "gpu_index": [0, 0, 0, 0, 1, 1, 1, 1],
                "ts": [T0 + i for i in range(4)] * 2,
                "mem_used_bytes": [1 * GIB, 2 * GIB, 3 * GIB, 4 * GIB] + [GIB] * 4,
                "mem_total_bytes": 8 * GIB,
                "util_gpu": [0.5, 0.7, 0.9, 0.9, 0.1, 0.1, 0.1, 0.1],
            }
        ),
    )
    try:
        yield s
    finally:
        s.dispose()


def test_engine_timeline_bins_gauges_by_mean_and_counters_by_max(store: Store) -> None:
    df = sample_timelines.engine_timeline(
        store, ["a"], since=T0, until=T0 + 4, max_points=2
    )  # 2 s bins
    kv = df[df["metric"] == "kv_cache_usage"]
    assert kv["ts"].tolist() == [T0, T0 + 2]
    assert kv["value"].tolist() == pytest.approx([0.15, 0.35])
    assert kv["max_value"].tolist() == pytest.approx([0.2, 0.4])
    assert kv["samples"].tolist() == [2, 2]
    pre = df[df["metric"] == "preemptions_total"]
    assert pre["value"].tolist() == [1.0, 3.0]  # the cumulative value at the bin's end
    unbinned = sample_timelines.engine_timeline(
        store, ["a", "b"], since=T0, until=T0 + 4, max_points=1000
    )
    assert set(unbinned["target"]) == {"a", "b"}
    assert len(unbinned[unbinned["target"] == "a"]) == 12
    assert sample_timelines.engine_timeline(store, [], since=T0, until=T0 + 4).empty
    with pytest.raises(InputError):
        sample_timelines.engine_timeline(store, ["a"], since=T0 + 4, until=T0)


def test_gpu_timeline_per_gpu(store: Store) -> None:
    df = sample_timelines.gpu_timeline(store, ["h"], since=T0, until=T0 + 4, max_points=2)
    gpu0 = df[df["gpu_index"] == 0]
    assert gpu0["ts"].tolist() == [T0, T0 + 2]
    assert (gpu0["mem_used_bytes"] / GIB).tolist() == [1.5, 3.5]
    assert (gpu0["mem_used_max_bytes"] / GIB).tolist() == [2.0, 4.0]
    assert (gpu0["mem_total_bytes"] / GIB).tolist() == [8.0, 8.0]
    assert gpu0["util_gpu"].tolist() == pytest.approx([0.6, 0.9])
    assert len(df[df["gpu_index"] == 1]) == 2
    assert len(sample_timelines.gpu_timeline(store, None, since=T0, until=T0 + 4)) == 8
    assert sample_timelines.gpu_timeline(store, [], since=T0, until=T0 + 4).empty
    assert sample_timelines.gpu_timeline(store, ["nope"], since=T0, until=T0 + 4).empty


def test_run_sources_recorded_or_found_in_the_span(store: Store) -> None:
    rec = sample_timelines.run_sources(store, "rec")
    assert rec == {"since": T0, "until": T0 + 4, "targets": ["a"], "hosts": ["h"], "recorded": True}
    bare = sample_timelines.run_sources(store, "bare")
    assert bare["targets"] == ["a", "b"]
    assert bare["hosts"] == ["h"]
    assert bare["recorded"] is False
    assert sample_timelines.run_sources(store, "nope") == {}


def test_aligned_runs_start_at_zero(store: Store) -> None:
    df = sample_timelines.aligned_runs(store, ["rec", "later"], max_points=1000)
    kv = df[df["series"] == "kv_cache_usage"]
    assert kv[kv["run_id"] == "rec"]["t"].tolist() == pytest.approx([0.0, 1.0, 2.0, 3.0])
    assert kv[kv["run_id"] == "later"]["t"].tolist() == pytest.approx([0.0, 1.0, 2.0, 3.0])
    assert kv[kv["run_id"] == "later"]["value"].tolist() == pytest.approx([0.5, 0.6, 0.7, 0.8])
    mem = df[df["series"] == "gpu_mem_used_bytes"]
    assert mem["run_id"].unique().tolist() == ["rec"]  # later recorded no hosts
    # GPU 0 + GPU 1 per instant
    assert (mem["value"] / GIB).tolist() == pytest.approx([2.0, 3.0, 4.0, 5.0])
    assert sample_timelines.aligned_runs(store, ["nope"]).empty


def test_run_states_summarise_each_runs_sources(store: Store) -> None:
    df = sample_timelines.run_states(store, ["rec", "later", "nope"]).set_index("run_id")
    # rec: GPUs 0 and 1 over T0..T0+4: util (0.5 + 0.7 + 0.9 + 0.9 + 4 × 0.1) / 8 = 0.425
    assert df.loc["rec", "gpu_util"] == pytest.approx(0.425)
    assert df.loc["rec", "kv_max"] == pytest.approx(0.4)
    assert df["running_max"].isna()["rec"]  # target a exposes no running gauge
    assert df["gpu_util"].isna()["later"]  # no hosts recorded
    assert df.loc["later", "kv_max"] == pytest.approx(0.8)
    assert df["kv_max"].isna()["nope"]
