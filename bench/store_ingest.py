"""Store benchmark: bulk ingest of request rows, and P99 TTFT by input-length bucket.

Prints, for DuckDB (the embedded default):
  * ingest of 1M request rows through ``store.ingest.add_requests`` (the fast path every
    collector and importer uses): seconds and rows/s, median of N repeats (target ≥ 1M rows/s);
  * P99 (with P50, P90) TTFT per input-length bucket over 10M stored requests via
    ``store.request_stats.bucket_latency`` (target < 1 s), median of N repeats.

Usage: python bench/store_ingest.py [--rows 1000000] [--total 10000000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.buckets import DEFAULT_EDGES, bucket_labels
from store import ingest, request_stats
from store.lifecycle import open_store


def make_requests(run_id: str, n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    seq = np.arange(n, dtype=np.int64)
    sent = 1_790_000_000.0 + seq * 0.01
    input_tokens = np.minimum(rng.lognormal(7.0, 1.4, n), 120_000).astype(np.int64) + 1
    output_tokens = rng.integers(16, 1024, n)
    ttft = 20.0 + input_tokens * 0.08 + rng.exponential(30.0, n)
    tpot = rng.normal(12.0, 2.0, n).clip(3.0)
    e2e = ttft + tpot * (output_tokens - 1)
    return pd.DataFrame(
        {
            "run_id": run_id,
            "seq": seq,
            "scheduled_at": sent,
            "sent_at": sent + 0.0002,
            "first_token_at": sent + ttft / 1000,
            "done_at": sent + e2e / 1000,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "ttft_ms": ttft,
            "tpot_ms": tpot,
            "e2e_ms": e2e,
            "lag_ms": 0.2,
            "status": np.where(rng.random(n) < 0.01, "error", "ok"),
            "http_status": 200,
        }
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--total", type=int, default=10_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"duckdb:///{Path(tmp) / 'bench.duckdb'}")
        frames = [make_requests(f"ingest-{i}", args.rows, seed=i) for i in range(args.repeats)]
        times = []
        for i, df in enumerate(frames):
            ingest.add_run(store, {"run_id": f"ingest-{i}", "name": "bench"})
            t0 = time.perf_counter()
            assert ingest.add_requests(store, df) == args.rows
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        print(f"DuckDB ingest of {args.rows:,} request rows (median of {args.repeats}):")
        print(
            f"  {med:.3f} s  → {args.rows / med:,.0f} rows/s   (runs: "
            + ", ".join(f"{t:.3f}" for t in times)
            + " s; target ≥ 1,000,000 rows/s)"
        )

        stored = args.rows * args.repeats
        i = args.repeats
        while stored < args.total:
            n = min(args.rows, args.total - stored)
            ingest.add_run(store, {"run_id": f"fill-{i}", "name": "bench"})
            ingest.add_requests(store, make_requests(f"fill-{i}", n, seed=i))
            stored += n
            i += 1
        qtimes = []
        result = pd.DataFrame()
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            result = request_stats.bucket_latency(store, metric="ttft_ms", edges=DEFAULT_EDGES)
            qtimes.append(time.perf_counter() - t0)
        qmed = statistics.median(qtimes)
        print(
            f"\nP50/P90/P99 TTFT by input-length bucket over {stored:,} requests "
            f"(median of {args.repeats}): {qmed:.3f} s (target < 1 s)"
        )
        labels = bucket_labels(DEFAULT_EDGES)
        for row in result.itertuples():
            print(
                f"  {labels[int(row.bucket)]:>8}  n={int(row.n):>10,}  p50={row.p50_ms:8.1f}  "
                f"p90={row.p90_ms:8.1f}  p99={row.p99_ms:8.1f} ms"
            )


if __name__ == "__main__":
    main()
