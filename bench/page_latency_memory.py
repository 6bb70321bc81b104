"""Latency and Memory pages on a large store: each page's reads, and a full render.

Generates a DuckDB store (in a temp dir, or ``--db`` to keep/reuse it) holding one run of
``--requests`` requests (default 10M: the page's worst case, everything in the run it shows)
sent at 1,000 req/s with mixed input lengths, token gaps for its first ``--gap-requests``
requests (× 64 gaps), engine samples (KV usage, running, waiting, preemptions) and one GPU's
samples every second over the run, plus two 10k-request runs of the same bench invocation
(the load levels the diagnosis compares). Then prints:

* every read the Latency page makes, with its time (as the page makes them, through
  ``store.latency_queries`` / ``store.memory_queries``), and the total — aggregated from the
  rows (no stored rollups), then served from the rollups the first pass stored;
* the same for the Memory page;
* a full render of each page with Streamlit's AppTest: its very first view (nothing
  stored), the first view after ``services.commands.prepare.prepare`` (what `servescope import`
  and `bench` do when they finish), a cold view (fresh Streamlit cache, the rollups earlier
  views stored), and a rerun with warm caches.

Target: < 2 s per page render. Usage:
    python bench/page_latency_memory.py [--requests 10000000] [--db /path/store.duckdb]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.buckets import DEFAULT_EDGES
from services.commands import prepare
from store import ingest, request_rows, request_stats, runs_table, sample_timelines
from store.db import Store
from store.lifecycle import open_store

T0 = 1_790_000_000.0
RATE = 1000.0  # requests/s of the big run
TARGET = "http://bench:8000/metrics"
HOST = "bench-host"
CHUNK = 1_000_000
ROOT = Path(__file__).resolve().parents[1]


def _run(run_id: str, concurrency: int, start: float, end: float) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "name": f"bench c={concurrency}",
        "source": "servescope",
        "framework": "sim",
        "model": "llama-3.1-8b",
        "endpoint": "http://bench:8000",
        "workload": "mixed",
        "arrival": "concurrency",
        "concurrency": concurrency,
        "gpu_count": 1,
        "started_at": start,
        "ended_at": end,
        "status": "completed",
        "client_params": {
            "bench_id": "bench",
            "collectors": {"targets": [TARGET], "hosts": [HOST]},
        },
    }


def _requests(
    run_id: str, first_seq: int, n: int, start: float, rng: np.random.Generator
) -> pd.DataFrame:
    seq = np.arange(first_seq, first_seq + n, dtype=np.int64)
    sent = start + seq / RATE
    inp = (np.minimum(rng.lognormal(6.5, 1.3, n), 100_000) + 1).astype(np.int64)
    out = rng.integers(16, 512, n)
    ttft = 20.0 + inp * 0.05 + rng.exponential(40.0, n)
    tpot = rng.normal(12.0, 2.0, n).clip(3.0)
    e2e = ttft + tpot * (out - 1)
    return pd.DataFrame(
        {
            "run_id": run_id,
            "seq": seq,
            "sent_at": sent,
            "first_token_at": sent + ttft / 1000,
            "done_at": sent + e2e / 1000,
            "input_tokens": inp,
            "output_tokens": out,
            "ttft_ms": ttft,
            "tpot_ms": tpot,
            "e2e_ms": e2e,
            "status": np.where(rng.random(n) < 0.01, "error", "ok"),
        }
    )


def generate(store: Store, n: int, gap_requests: int) -> None:
    rng = np.random.default_rng(1)
    for i, (rid, conc) in enumerate((("c1", 1), ("c8", 8))):
        start = T0 - 100_000 + i * 20_000
        ingest.add_run(store, _run(rid, conc, start, start + 10_000 / RATE))
        ingest.add_requests(store, _requests(rid, 0, 10_000, start, rng))
    span = n / RATE
    ingest.add_run(store, _run("big", 64, T0, T0 + span + 30))
    done = 0
    while done < n:
        k = min(CHUNK, n - done)
        ingest.add_requests(store, _requests("big", done, k, T0, rng))
        done += k
        print(f"  {done:,} requests", flush=True)
    g = min(gap_requests, n)
    ingest.add_token_gaps(
        store,
        pd.DataFrame(
            {
                "run_id": "big",
                "seq": np.repeat(np.arange(g), 64),
                "idx": np.tile(np.arange(64), g),
                "gap_ms": rng.normal(12.0, 2.0, g * 64).clip(1.0),
            }
        ),
    )
    ts = T0 + np.arange(0.0, span + 30, 1.0)
    kv = np.clip(0.6 + 0.3 * np.sin(ts / 600) + rng.normal(0, 0.02, ts.size), 0, 1)
    frames = [
        pd.DataFrame({"target": TARGET, "ts": ts, "metric": m, "engine": "sim", "value": v})
        for m, v in (
            ("kv_cache_usage", kv),
            ("requests_running", np.full(ts.size, 64.0)),
            ("requests_waiting", rng.poisson(3, ts.size).astype("float64")),
            ("preemptions_total", np.cumsum(rng.random(ts.size) < 0.01).astype("float64")),
        )
    ]
    ingest.add_rows(store, "engine_samples", pd.concat(frames, ignore_index=True))
    ingest.add_rows(
        store,
        "gpu_samples",
        pd.DataFrame(
            {
                "host": HOST,
                "gpu_index": 0,
                "ts": ts,
                "mem_used_bytes": 70 * 2**30 + rng.normal(0, 2**28, ts.size),
                "mem_total_bytes": 80.0 * 2**30,
                "util_gpu": 0.9,
                "source": "sim",
            }
        ),
    )


def _timed(label: str, fn: Callable[[], Any], log: list[tuple[str, float]]) -> Any:
    t = time.perf_counter()
    result = fn()
    log.append((label, time.perf_counter() - t))
    return result


def _print(title: str, log: list[tuple[str, float]]) -> None:
    print(f"\n{title}")
    for label, s in log:
        print(f"  {s:7.3f} s  {label}")
    print(f"  {sum(s for _, s in log):7.3f} s  total")


def latency_reads(store: Store) -> list[tuple[str, float]]:
    """The Latency page's reads for the newest run, in the page's order (whole run)."""
    log: list[tuple[str, float]] = []
    ids = ("big",)
    _timed("run_list", lambda: runs_table.list_runs(store, limit=200), log)
    span = _timed("request_span", lambda: request_rows.request_span(store, ids), log)
    t0, t1 = float(span["first_sent"].iloc[0]), float(span["last_done"].iloc[0])
    w = max((t1 - t0) / 24, 1.0)
    _timed(
        "bucket_latency (input, TTFT)",
        lambda: request_stats.bucket_latency(
            store, ids, DEFAULT_EDGES, "input", metrics=("ttft_ms",)
        ),
        log,
    )
    _timed(
        "ttft_heatmap",
        lambda: request_stats.ttft_heatmap(store, ids, DEFAULT_EDGES, t0=t0, window_s=w),
        log,
    )
    _timed("request_sample (20k)", lambda: request_rows.request_sample(store, ids, 20_000), log)
    src = _timed("run_sources", lambda: sample_timelines.run_sources(store, "big"), log)
    _timed(
        "engine_timeline",
        lambda: sample_timelines.engine_timeline(
            store, src["targets"], since=src["since"], until=src["until"]
        ),
        log,
    )
    slow = _timed(
        "slowest_requests (20)", lambda: request_rows.slowest_requests(store, ids, 20), log
    )
    _timed(
        "in_flight_at (20)",
        lambda: request_rows.in_flight_at(store, "big", slow["sent_at"].tolist()),
        log,
    )
    _timed("load_levels", lambda: runs_table.load_levels(store, "big"), log)
    return log


def memory_reads(store: Store) -> list[tuple[str, float]]:
    log: list[tuple[str, float]] = []
    _timed("run_list", lambda: runs_table.list_runs(store, limit=200), log)
    src = _timed("run_sources", lambda: sample_timelines.run_sources(store, "big"), log)
    since, until = src["since"], src["until"]
    _timed(
        "engine_timeline",
        lambda: sample_timelines.engine_timeline(store, src["targets"], since=since, until=until),
        log,
    )
    _timed(
        "gpu_timeline",
        lambda: sample_timelines.gpu_timeline(store, src["hosts"], since=since, until=until),
        log,
    )
    _timed(
        "latency_timeline",
        lambda: request_stats.latency_timeline(
            store,
            ("big",),
            t0=since,
            window_s=max((until - since) / 24, 1.0),
            since=since,
            until=until,
        ),
        log,
    )
    _timed("request_span", lambda: request_rows.request_span(store, ("big",)), log)
    return log


def clear_rollups(store: Store) -> None:
    with store.connect() as conn:
        conn.exec_driver_sql("DELETE FROM run_rollups")


def render(page: str, store: Store) -> tuple[float, float, float, float, float]:
    """(first view, refresh, first view after the refresh, cold view, warm rerun) in s."""
    # The bench measures what a browser would wait for: it drives the pages through
    # Streamlit's own test harness (a measuring tool here, not a layer crossing).
    import streamlit as st  # noqa: TID251
    from streamlit.testing.v1 import AppTest  # noqa: TID251

    def once() -> tuple[float, Any]:
        st.cache_data.clear()
        at = AppTest.from_file(str(ROOT / "pages" / page), default_timeout=300)
        t = time.perf_counter()
        at.run()
        elapsed = time.perf_counter() - t
        errors = [e.value for e in at.exception] + [e.value for e in at.error]
        if errors:
            raise SystemExit(f"{page} failed: {errors}")
        return elapsed, at

    once()  # imports and first-use costs out of the way
    clear_rollups(store)
    first, _ = once()
    clear_rollups(store)
    t = time.perf_counter()
    prepare.prepare(store, ["big", "c1", "c8"])
    refresh = time.perf_counter() - t
    after, _ = once()
    cold, at = once()
    t = time.perf_counter()
    at.run()
    return first, refresh, after, cold, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--requests", type=int, default=10_000_000)
    ap.add_argument("--gap-requests", type=int, default=20_000)
    ap.add_argument("--db", help="DuckDB file to create (or reuse when it already holds the run)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.db) if args.db else Path(tmp) / "bench.duckdb"
        url = f"duckdb:///{path}"
        store = open_store(url)
        have = store.read_df("SELECT COUNT(*) AS n FROM requests WHERE run_id = 'big'")["n"].iloc[0]
        if int(have) != args.requests:
            if int(have):
                raise SystemExit(f"{path} holds another store; remove it or pick another --db")
            print(f"generating {args.requests:,} requests into {path} …")
            t = time.perf_counter()
            generate(store, args.requests, args.gap_requests)
            print(f"  generated in {time.perf_counter() - t:.1f} s")
        n = f"{args.requests:,}-request run"
        clear_rollups(store)
        _print(f"Latency page reads, aggregated ({n}):", latency_reads(store))
        _print(f"Latency page reads, from stored rollups ({n}):", latency_reads(store))
        clear_rollups(store)
        _print("Memory page reads, aggregated:", memory_reads(store))
        _print("Memory page reads, from stored rollups:", memory_reads(store))
        os.environ["SERVESCOPE_DB"] = url
        print(
            "\nFull page render (AppTest; target < 2 s): first view (nothing stored) / "
            "prepare / first view after it / cold view (rollups stored) / warm rerun"
        )
        for page in ("latency.py", "memory.py"):
            times = render(page, store)
            print(f"  pages/{page:<11} " + " / ".join(f"{t:6.3f} s" for t in times))
        store.dispose()


if __name__ == "__main__":
    main()
