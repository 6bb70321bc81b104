"""The store's run reads (runs_table, run_figures, request_rows, request_stats.bucket_latency)
against a real store (DuckDB file; PostgreSQL too where ``store_url`` offers it),
checked against hand-computed values and against analysis.metrics."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd
import pytest

from analysis import metrics
from errors import InputError
from store import ingest, request_rows, request_stats, run_figures, runs_table
from store.db import Store
from store.lifecycle import open_store


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url)
    yield s
    s.dispose()


def _seed(store: Store) -> None:
    ingest.add_run(
        store,
        {
            "run_id": "a",
            "name": "run a",
            "source": "servescope",
            "framework": "sim",
            "model": "m1",
            "gpu_name": "H100",
            "gpu_count": 2,
            "arrival": "concurrency",
            "concurrency": 8,
            "started_at": 4000.0,
            "ended_at": 4010.0,
            "duration_s": 10.0,
            "client_bound": True,
            "client_bound_reason": "P99 lag 12 ms > 10 ms",
        },
    )
    # b: no duration_s → ended_at − started_at = 20 s
    ingest.add_run(
        store,
        {
            "run_id": "b",
            "source": "servescope",
            "framework": "sim",
            "model": "m1",
            "started_at": 3000.0,
            "ended_at": 3020.0,
            "client_bound": False,
        },
    )
    # c: no duration, no end → first send → last completion = 8 s
    ingest.add_run(
        store,
        {
            "run_id": "c",
            "source": "vllm-bench",
            "framework": "vllm",
            "model": "m2",
            "started_at": 2000.0,
        },
    )
    # d: no requests at all
    ingest.add_run(store, {"run_id": "d", "source": "guidellm", "started_at": 1000.0})
    ingest.add_requests(
        store,
        pd.DataFrame(
            {
                "run_id": "a",
                "seq": [0, 1, 2, 3, 4],
                "status": ["ok", "ok", "ok", "ok", "error"],
                "input_tokens": [100, 100, 100, 100, 100],
                "output_tokens": [10, 20, 30, 40, 0],
                "ttft_ms": [10.0, 20.0, 30.0, 40.0, None],
                "tpot_ms": [1.0, 2.0, 3.0, 4.0, None],
                "e2e_ms": [100.0, 200.0, 300.0, 400.0, 50.0],
                "lag_ms": [0.0, 1.0, 2.0, 3.0, 4.0],
                "http_status": [200, 200, 200, 200, 503],
                "error": [None, None, None, None, "overloaded"],
            }
        ),
    )
    ingest.add_requests(
        store,
        pd.DataFrame(
            {
                "run_id": "b",
                "seq": [0, 1],
                "status": ["ok", "timeout"],
                "output_tokens": [50, 7],
                "ttft_ms": [5.0, 500.0],
            }
        ),
    )
    ingest.add_requests(
        store,
        pd.DataFrame(
            {
                "run_id": "c",
                "seq": [0, 1, 2],
                "status": "ok",
                "sent_at": [100.0, 101.0, 102.0],
                "done_at": [103.0, 108.0, 104.0],
                "output_tokens": [8, 8, 8],
                "ttft_ms": [7.0, 7.0, 7.0],
            }
        ),
    )
    ingest.add_token_gaps(
        store,
        pd.DataFrame(
            {
                "run_id": "a",
                "seq": [0, 0, 0, 4],  # seq 4 failed: its gap is not pooled
                "idx": [0, 1, 2, 0],
                "gap_ms": [1.0, 2.0, 3.0, 100.0],
            }
        ),
    )


def test_empty_store(store: Store) -> None:
    assert runs_table.store_overview(store).empty
    assert runs_table.latest_runs(store).empty
    assert run_figures.run_detail(store, "a").empty
    itl = run_figures.run_itl_summary(store, "a")
    assert itl["itl_n"].tolist() == [0]
    assert request_rows.run_metric_sample(store, "a", "ttft_ms").empty


def test_store_overview(store: Store) -> None:
    _seed(store)
    df = runs_table.store_overview(store)
    df = df.astype({"framework": object, "model": object}).where(df.notna(), None)
    rows = {
        (r.source, r.framework, r.model): (
            r.runs,
            r.requests,
        )
        for r in df.itertuples(index=False)
    }
    assert rows == {
        ("servescope", "sim", "m1"): (2, 7),
        ("vllm-bench", "vllm", "m2"): (1, 3),
        ("guidellm", None, None): (1, 0),
    }
    first = df.iloc[0]
    assert (first["source"], first["runs"]) == ("servescope", 2)
    assert first["first_started_at"] == 3000.0 and first["last_started_at"] == 4000.0


def test_latest_runs_hand_computed(store: Store) -> None:
    _seed(store)
    df = runs_table.latest_runs(store, limit=10)
    assert df["run_id"].tolist() == ["a", "b", "c", "d"]  # newest first
    a, b, c, d = (df.iloc[i] for i in range(4))
    assert (a["requests"], a["ok"], a["errors"], a["output_tokens"]) == (5, 4, 1, 100)
    assert a["duration_s"] == pytest.approx(10.0)
    assert a["output_throughput"] == pytest.approx(10.0)  # 100 tokens / 10 s
    assert a["request_throughput"] == pytest.approx(0.4)  # 4 ok / 10 s
    # linear interpolation over the 4 successful requests: rank 0.99 × 3 = 2.97
    assert a["ttft_n"] == 4
    assert a["ttft_p50_ms"] == pytest.approx(25.0)
    assert a["ttft_p99_ms"] == pytest.approx(39.7)
    assert a["tpot_p50_ms"] == pytest.approx(2.5)
    assert a["tpot_p99_ms"] == pytest.approx(3.97)
    assert bool(a["client_bound"]) is True
    assert a["client_bound_reason"] == "P99 lag 12 ms > 10 ms"
    assert a["concurrency"] == 8 and a["gpu_count"] == 2

    assert b["duration_s"] == pytest.approx(20.0)
    assert (b["requests"], b["ok"], b["errors"]) == (2, 1, 1)
    assert b["output_throughput"] == pytest.approx(50 / 20)  # the timeout's tokens do not count
    assert b["ttft_p99_ms"] == pytest.approx(5.0)  # nor does its TTFT
    assert bool(b["client_bound"]) is False

    assert c["duration_s"] == pytest.approx(8.0)  # 100 → 108
    assert c["output_throughput"] == pytest.approx(24 / 8)
    assert c["tpot_n"] == 0 and pd.isna(c["tpot_p50_ms"])

    assert (d["requests"], d["ok"], d["errors"], d["output_tokens"]) == (0, 0, 0, 0)
    assert pd.isna(d["duration_s"]) and pd.isna(d["output_throughput"])
    assert pd.isna(d["client_bound"])

    assert runs_table.latest_runs(store, limit=2)["run_id"].tolist() == ["a", "b"]
    with pytest.raises(InputError):
        runs_table.latest_runs(store, limit=0)


def test_run_detail_hand_computed(store: Store) -> None:
    _seed(store)
    df = run_figures.run_detail(store, "a")
    assert len(df) == 1
    r = df.iloc[0]
    assert r["name"] == "run a" and r["framework"] == "sim"
    assert (r["requests"], r["ok"], r["errors"], r["timeouts"], r["cancelled"]) == (5, 4, 1, 0, 0)
    assert (r["input_tokens"], r["output_tokens"]) == (400, 100)
    assert r["duration_s"] == pytest.approx(10.0)
    assert r["request_throughput"] == pytest.approx(0.4)
    assert r["output_throughput"] == pytest.approx(10.0)
    assert r["total_token_throughput"] == pytest.approx(50.0)  # (400 + 100) / 10
    assert r["output_throughput_per_gpu"] == pytest.approx(5.0)
    assert (r["ttft_n"], r["ttft_mean_ms"]) == (4, pytest.approx(25.0))
    assert r["ttft_p90_ms"] == pytest.approx(37.0)
    assert r["ttft_p95_ms"] == pytest.approx(38.5)
    assert r["e2e_p50_ms"] == pytest.approx(250.0)  # ok requests only (the 50 ms error is out)
    assert r["lag_n"] == 5  # client lag covers every request
    assert r["lag_p50_ms"] == pytest.approx(2.0)
    assert r["lag_p99_ms"] == pytest.approx(3.96)

    b = run_figures.run_detail(store, "b").iloc[0]
    assert b["timeouts"] == 1 and pd.isna(b["output_throughput_per_gpu"])
    assert run_figures.run_detail(store, "nope").empty


def test_run_itl_summary_pools_gaps_of_successful_requests(store: Store) -> None:
    _seed(store)
    itl = run_figures.run_itl_summary(store, "a").iloc[0]
    assert itl["itl_n"] == 3
    assert itl["itl_mean_ms"] == pytest.approx(2.0)
    assert itl["itl_p50_ms"] == pytest.approx(2.0)
    assert itl["itl_p99_ms"] == pytest.approx(2.98)  # rank 0.99 × 2 = 1.98
    assert run_figures.run_itl_summary(store, "b").iloc[0]["itl_n"] == 0


def test_run_errors(store: Store) -> None:
    _seed(store)
    errors = request_rows.run_errors(store, "a")
    assert errors.to_dict("records") == [
        {"status": "error", "http_status": 503, "error": "overloaded", "count": 1}
    ]
    assert request_rows.run_errors(store, "c").empty


def _big_run(store: Store, n: int = 1000, seed: int = 7) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    ingest.add_run(
        store, {"run_id": "big", "source": "servescope", "started_at": 10.0, "duration_s": 50.0}
    )
    df = pd.DataFrame(
        {
            "run_id": "big",
            "seq": np.arange(n),
            "status": np.where(rng.random(n) < 0.05, "error", "ok"),
            "input_tokens": rng.integers(10, 5000, n),
            "output_tokens": rng.integers(2, 500, n),
            "ttft_ms": rng.lognormal(4, 1, n),
            "tpot_ms": rng.lognormal(2, 0.5, n),
            "e2e_ms": rng.lognormal(7, 0.5, n),
        }
    )
    ingest.add_requests(store, df)
    gaps = pd.DataFrame(
        {
            "run_id": "big",
            "seq": np.repeat(np.arange(n), 4),
            "idx": np.tile(np.arange(4), n),
            "gap_ms": rng.lognormal(2, 0.7, 4 * n),
        }
    )
    ingest.add_token_gaps(store, gaps)
    return df.assign(status=df["status"].astype(str))


def test_sql_agrees_with_analysis_metrics(store: Store) -> None:
    """The SQL percentiles and throughputs are the definitions of analysis.metrics."""
    rows = _big_run(store)
    expected = metrics.run_summary(rows, duration_s=50.0)
    got = run_figures.run_detail(store, "big").iloc[0]
    assert got["ok"] == expected.ok and got["errors"] == expected.errors
    assert got["output_throughput"] == pytest.approx(expected.output_throughput)
    assert got["request_throughput"] == pytest.approx(expected.request_throughput)
    assert got["total_token_throughput"] == pytest.approx(expected.total_token_throughput)
    for name, dist in (
        ("ttft", expected.ttft_ms),
        ("tpot", expected.tpot_ms),
        ("e2e", expected.e2e_ms),
    ):
        assert got[f"{name}_n"] == dist.n
        for p in ("p50", "p90", "p95", "p99"):
            assert got[f"{name}_{p}_ms"] == pytest.approx(getattr(dist, p), rel=1e-9), (name, p)
    latest = runs_table.latest_runs(store).iloc[0]
    assert latest["ttft_p99_ms"] == pytest.approx(expected.ttft_ms.p99, rel=1e-9)
    assert latest["tpot_p50_ms"] == pytest.approx(expected.tpot_ms.p50, rel=1e-9)


def test_samples_are_bounded_and_span_the_run(store: Store) -> None:
    rows = _big_run(store)
    sample = request_rows.run_requests(store, "big", limit=100)
    assert len(sample) == 100
    assert sample["seq"].tolist() == list(range(0, 1000, 10))  # every 10th request
    assert len(request_rows.run_requests(store, "big", limit=5000)) == 1000

    ok_ttft = rows.loc[rows["status"] == "ok", "ttft_ms"]
    values = request_rows.run_metric_sample(store, "big", "ttft_ms", limit=100)["value"]
    assert 50 <= len(values) <= 100
    assert set(values).issubset(set(ok_ttft))
    everything = request_rows.run_metric_sample(store, "big", "ttft_ms", limit=10_000)["value"]
    assert sorted(everything) == pytest.approx(sorted(ok_ttft))

    itl = request_rows.run_metric_sample(store, "big", "itl_ms", limit=500)["value"]
    assert 200 <= len(itl) <= 500
    with pytest.raises(InputError, match="ttft_ms"):
        request_rows.run_metric_sample(store, "big", "bogus")


def test_bucket_latency_hand_computed(store: Store) -> None:
    ingest.add_requests(
        store,
        pd.DataFrame(
            {
                "run_id": "x",
                "seq": range(8),
                "status": ["ok"] * 7 + ["error"],
                "input_tokens": pd.array(
                    [10, 255, 256, 1023, 1024, None, 70000, 10], dtype="Int64"
                ),
                "ttft_ms": [1.0, 3.0, 10.0, 20.0, 5.0, 99.0, 7.0, 1000.0],
            }
        ),
    )
    ingest.add_requests(
        store,
        pd.DataFrame(
            {"run_id": "y", "seq": [0], "status": "ok", "input_tokens": 100, "ttft_ms": 50.0}
        ),
    )
    df = request_stats.bucket_latency(
        store, ["x", "y"], (256, 1024, 4096, 16384, 65536), metrics=("ttft_ms",)
    )
    # <256: 1, 3, 50 (run y) · 256–1k: 10, 20 · 1k–4k: 5 · ≥64k: 7; unknown length and the error out
    assert df["bucket"].tolist() == [0, 1, 2, 5]
    assert df["n"].tolist() == [3, 2, 1, 1]
    assert df["p50_ms"].tolist() == pytest.approx([3.0, 15.0, 5.0, 7.0])
    assert df["p99_ms"].iloc[0] == pytest.approx(3.0 + 0.98 * 47.0)  # rank 1.98 of 1, 3, 50
    assert df["p99_9_ms"].iloc[1] == pytest.approx(10.0 + 0.999 * 10.0)
    assert df["mean_ms"].iloc[0] == pytest.approx(18.0)

    only_x = request_stats.bucket_latency(store, ["x"], (256, 1024), metrics=("ttft_ms",))
    assert only_x["bucket"].tolist() == [0, 1, 2]
    assert only_x["n"].tolist() == [2, 2, 2]  # <256 · 256–1k · ≥1k
    with pytest.raises(InputError, match="no run selected"):
        request_stats.bucket_latency(store, [], (256,))
    with pytest.raises(InputError, match="increasing"):
        request_stats.bucket_latency(store, ["x"], (1024, 256))


def test_bucket_latency_agrees_with_analysis(store: Store) -> None:
    from analysis.buckets import DEFAULT_EDGES, assign_buckets, bucket_labels

    rows = _big_run(store)
    ok = rows[rows["status"] == "ok"]
    labels = bucket_labels(DEFAULT_EDGES)
    expected = ok.groupby(assign_buckets(ok["input_tokens"]), observed=True)["ttft_ms"]
    got = request_stats.bucket_latency(store, ["big"], DEFAULT_EDGES, metrics=("ttft_ms",))
    assert [labels[b] for b in got["bucket"].tolist()] == [str(k) for k in expected.groups]
    for row in got.to_dict("records"):
        values = expected.get_group(labels[int(row["bucket"])])
        assert row["n"] == len(values)
        assert row["p99_ms"] == pytest.approx(metrics.percentile(values, 99), rel=1e-9)
        assert row["p50_ms"] == pytest.approx(metrics.percentile(values, 50), rel=1e-9)
