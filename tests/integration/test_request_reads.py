"""A selection's requests (request_rows, request_stats: spans, buckets, heatmap, timeline,
samples, slowest, in flight) and runs_table.load_levels on DuckDB and PostgreSQL, against
hand-computed values."""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
import pytest

from errors import InputError
from store import ingest, request_rows, request_stats, runs_table
from store.db import Store
from store.lifecycle import open_store

T0 = 1_700_000_000.0


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """Run ``r1`` (10 requests, one failed) and ``r2`` (its copy 1,000 s later, another
    series), plus token gaps for r1's first two requests."""
    s = open_store(store_url)
    common = {"source": "servescope", "framework": "sim", "model": "m", "workload": "mixed"}
    ingest.add_run(
        s,
        {
            "run_id": "r1",
            "endpoint": "e",
            "concurrency": 4,
            "started_at": T0,
            "ended_at": T0 + 10,
            "client_params": {"bench_id": "b"},
            **common,
        },
    )
    ingest.add_run(
        s,
        {
            "run_id": "r3",
            "endpoint": "e",
            "concurrency": 16,
            "started_at": T0 + 2000,
            "ended_at": T0 + 2010,
            "client_params": {"bench_id": "b"},
            **common,
        },
    )
    ingest.add_run(
        s,
        {
            "run_id": "r2",
            "endpoint": "e",
            "concurrency": 8,
            "started_at": T0 + 1000,
            "ended_at": T0 + 1010,
            "client_params": {"bench_id": "other"},
            **common,
        },
    )
    n = 10
    df = pd.DataFrame(
        {
            "run_id": "r1",
            "seq": range(n),
            "status": ["ok"] * 9 + ["error"],
            "sent_at": [T0 + i for i in range(n)],
            "done_at": [T0 + i + 1.5 for i in range(n)],
            "input_tokens": [100, 200, 300, 1000, 2000, 100, 100, 100, 5000, 10],
            "output_tokens": [10, 20, 30, 40, 50, 60, 70, 80, 90, 1],
            "ttft_ms": [float(i * 10) for i in range(n)],
            "tpot_ms": 1.0,
            "e2e_ms": [100.0 + i for i in range(n)],
        }
    )
    ingest.add_requests(s, df)
    ingest.add_requests(
        s, df.assign(run_id="r2", sent_at=df.sent_at + 1000, done_at=df.done_at + 1000)
    )
    ingest.add_requests(
        s, df.assign(run_id="r3", sent_at=df.sent_at + 2000, done_at=df.done_at + 2000)
    )
    ingest.add_token_gaps(
        s,
        pd.DataFrame(
            {"run_id": "r1", "seq": [0, 0, 1], "idx": [0, 1, 0], "gap_ms": [1.0, 2.0, 3.0]}
        ),
    )
    try:
        yield s
    finally:
        s.dispose()


def test_request_span_and_ttft_summary(store: Store) -> None:
    span = request_rows.request_span(store, ["r1"]).iloc[0]
    assert (span["requests"], span["ok"]) == (10, 9)
    assert (span["first_sent"], span["last_sent"], span["last_done"]) == (T0, T0 + 9, T0 + 10.5)
    ttft = request_rows.ttft_summary(store, ["r1"]).iloc[0]
    # ok TTFTs 0, 10, …, 80: mean 40; P99 = 80 − 0.08·10 = 79.2 (linear interpolation)
    assert ttft["ttft_n"] == 9
    assert ttft["ttft_mean_ms"] == pytest.approx(40.0)
    assert ttft["ttft_p50_ms"] == pytest.approx(40.0)
    assert ttft["ttft_p99_ms"] == pytest.approx(79.2)
    assert ttft["ttft_p99_9_ms"] == pytest.approx(79.92)
    # a window on sent_at: seqs 2..4
    w = request_rows.ttft_summary(store, ["r1"], since=T0 + 2, until=T0 + 5).iloc[0]
    assert (w["ttft_n"], w["ttft_mean_ms"]) == (3, pytest.approx(30.0))


def test_bucket_latency_by_input(store: Store) -> None:
    df = request_stats.bucket_latency(store, ["r1"], (256, 1024), "input")
    assert df["metric"].unique().tolist() == ["ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"]
    ttft = df[df["metric"] == "ttft_ms"].set_index("bucket")
    # <256: seqs 0, 1, 5, 6, 7 (seq 9 failed) → TTFT 0, 10, 50, 60, 70
    # 256–1k: seqs 2 (300) → 20 … and 3 (1000) → 30; ≥1k: seqs 4 (2000) → 40, 8 (5000) → 80
    assert ttft["n"].tolist() == [5, 2, 2]
    assert ttft.loc[0, "mean_ms"] == pytest.approx(38.0)
    assert ttft.loc[0, "p50_ms"] == pytest.approx(50.0)
    assert ttft.loc[0, "p90_ms"] == pytest.approx(66.0)  # 60 + 0.6·10
    assert ttft.loc[2, "p99_ms"] == pytest.approx(79.6)
    itl = df[df["metric"] == "itl_ms"]
    assert itl["bucket"].tolist() == [0]
    assert itl["n"].tolist() == [3]
    assert itl["p50_ms"].tolist() == [2.0]


def test_bucket_latency_by_output_in_a_window(store: Store) -> None:
    df = request_stats.bucket_latency(store, ["r1"], (32, 64), "output", since=T0, until=T0 + 5)
    ttft = df[df["metric"] == "ttft_ms"]
    # seqs 0..4: outputs 10, 20, 30 (<32) and 40, 50 (32–64)
    assert ttft["bucket"].tolist() == [0, 1]
    assert ttft["n"].tolist() == [3, 2]
    assert ttft["mean_ms"].tolist() == pytest.approx([10.0, 35.0])
    itl = df[df["metric"] == "itl_ms"]
    assert (itl["n"].tolist(), itl["mean_ms"].tolist()) == ([3], [2.0])
    only = request_stats.bucket_latency(store, ["r1"], (32, 64), "output", metrics=("e2e_ms",))
    assert only["metric"].unique().tolist() == ["e2e_ms"]
    # ok outputs <32: 10, 20, 30; 32–64: 40, 50, 60; ≥64: 70, 80, 90 (seq 9 failed)
    assert only["bucket"].tolist() == [0, 1, 2]
    assert only["n"].tolist() == [3, 3, 3]
    with pytest.raises(InputError):
        request_stats.bucket_latency(store, ["r1"], (32, 64), "input", metrics=("lag_ms",))
    with pytest.raises(InputError):
        request_stats.bucket_latency(store, ["r1"], (32, 64), "sideways")
    with pytest.raises(InputError):
        request_stats.bucket_latency(store, ["r1"], (64, 32), "input")
    with pytest.raises(InputError):
        request_stats.bucket_latency(store, [], (64,), "input")


def test_ttft_heatmap_and_timeline(store: Store) -> None:
    heat = request_stats.ttft_heatmap(store, ["r1"], (256, 1024), t0=T0, window_s=5)
    cells = {(b, w): (n, p) for b, w, n, p in heat[["bucket", "window", "n", "p99_ms"]].to_numpy()}
    # bucket −1: the window's requests together; P50 of 0…40 and of 50…80
    totals = heat[(heat["bucket"] == -1) & (heat["window"] >= 0)]
    assert totals["n"].tolist() == [5, 4]
    assert totals["p50_ms"].tolist() == pytest.approx([20.0, 65.0])
    # bucket −1, window −1: the whole selection, as ttft_summary (9 ok: TTFT 0 … 80)
    whole = heat[(heat["bucket"] == -1) & (heat["window"] == -1)].iloc[0]
    assert (whole["n"], whole["mean_ms"]) == (9, pytest.approx(40.0))
    assert whole["p99_ms"] == pytest.approx(79.2)
    cells = {k: v for k, v in cells.items() if k[0] >= 0}
    # window 0 = seqs 0..4; window 1 = seqs 5..8 (9 failed)
    assert cells[(0, 0)] == (2, pytest.approx(9.9))  # 0, 10
    assert cells[(1, 0)] == (2, pytest.approx(29.9))  # 20, 30
    assert cells[(2, 0)] == (1, 40.0)
    assert cells[(0, 1)] == (3, pytest.approx(69.8))  # 50, 60, 70
    assert cells[(2, 1)] == (1, 80.0)
    assert len(cells) == 5
    tl = request_stats.latency_timeline(store, ["r1"], t0=T0, window_s=5)
    assert tl["window"].tolist() == [0, 1]
    assert tl["window_start"].tolist() == [T0, T0 + 5]
    assert tl["n"].tolist() == [5, 4]
    assert tl["errors"].tolist() == [0, 1]
    assert tl["ttft_p50_ms"].tolist() == pytest.approx([20.0, 65.0])
    assert tl["output_tokens"].tolist() == [150, 300]


def test_request_sample_is_a_bounded_stride(store: Store) -> None:
    sample, stride = request_rows.request_sample(store, ["r1"], limit=4)
    assert stride == 3  # ⌈10 / 4⌉
    assert sample["seq"].tolist() == [0, 3, 6, 9]
    assert sample["status"].tolist() == ["ok", "ok", "ok", "error"]
    everything, k = request_rows.request_sample(store, ["r1", "r2"], limit=100)
    assert (len(everything), k) == (20, 1)
    assert everything["sent_at"].is_monotonic_increasing


def test_slowest_requests_and_in_flight(store: Store) -> None:
    slow = request_rows.slowest_requests(store, ["r1"], 3)
    assert slow["rank"].tolist() == [1, 2, 3]
    assert slow["seq"].tolist() == [8, 7, 6]  # seq 9 (TTFT 90) failed
    by_e2e = request_rows.slowest_requests(store, ["r1"], 1, "e2e_ms")
    assert by_e2e["seq"].tolist() == [8]
    with pytest.raises(InputError):
        request_rows.slowest_requests(store, ["r1"], 0)
    with pytest.raises(InputError):
        request_rows.slowest_requests(store, ["r1"], 3, "lag_ms")
    # requests last 1.5 s, one sent per second: at T0+0.5 only #0; at T0+1.2 #0 and #1;
    # at T0+1.5 #0 is done (done_at exclusive); after the end nothing
    fl = request_rows.in_flight_at(store, "r1", [T0 + 0.5, T0 + 1.2, T0 + 1.5, T0 + 100])
    assert fl["in_flight"].tolist() == [1, 2, 1, 0]
    assert request_rows.in_flight_at(store, "r1", []).empty


def test_load_levels_follow_the_bench_invocation(store: Store) -> None:
    levels = runs_table.load_levels(store, "r1")
    assert levels["run_id"].tolist() == ["r1", "r3"]  # r2 belongs to another bench_id
    assert levels["load"].tolist() == [4.0, 16.0]
    # 9 ok requests, 450 output tokens over the run's 10 s
    assert levels["request_throughput"].tolist() == pytest.approx([0.9, 0.9])
    assert levels["output_throughput"].tolist() == pytest.approx([45.0, 45.0])
    # r2's invocation measured one level only: its series is every run on the same endpoint,
    # framework, model and workload
    assert runs_table.load_levels(store, "r2")["run_id"].tolist() == ["r1", "r2", "r3"]
    assert runs_table.load_levels(store, "nope").empty
