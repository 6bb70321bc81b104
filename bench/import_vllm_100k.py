"""Benchmark: import a generated 100k-request vLLM ``--save-detailed`` JSON into DuckDB.

Generates the file once (vLLM's layout: per-request arrays in seconds, output lengths uniform in
[64, 192] tokens, so ~12.8M inter-token gaps), then imports it 5 times into a fresh DuckDB file
each time and prints every timing and the median. Target: < 3 s on the 2-core dev machine.

    .venv/bin/python bench/import_vllm_100k.py [--requests 100000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def generate(path: Path, n: int, seed: int = 0) -> int:
    """Write a vLLM detailed result with ``n`` requests; returns the number of gaps."""
    rng = np.random.default_rng(seed)
    out_lens = rng.integers(64, 193, size=n)
    in_lens = rng.integers(128, 2048, size=n)
    ttfts = rng.gamma(2.0, 0.05, size=n)
    starts = np.cumsum(rng.exponential(1 / 200.0, size=n)) + 1000.0
    gaps = np.round(rng.gamma(4.0, 0.0025, size=int((out_lens - 1).sum())), 6)
    itls: list[list[float]] = []
    pos = 0
    for k in (out_lens - 1).tolist():
        itls.append(gaps[pos : pos + k].tolist())
        pos += k
    latencies = ttfts + np.asarray([sum(g) for g in itls])
    duration = float(starts[-1] + latencies[-1] - starts[0])
    doc = {
        "date": "20261130-120000",
        "endpoint_type": "vllm",
        "backend": "vllm",
        "label": None,
        "model_id": "meta-llama/Llama-3.1-8B-Instruct",
        "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct",
        "num_prompts": n,
        "request_rate": 200.0,
        "burstiness": 1.0,
        "max_concurrency": None,
        "duration": duration,
        "completed": n,
        "total_input_tokens": int(in_lens.sum()),
        "total_output_tokens": int(out_lens.sum()),
        "request_throughput": n / duration,
        "output_throughput": float(out_lens.sum()) / duration,
        "mean_ttft_ms": float(ttfts.mean() * 1000),
        "median_ttft_ms": float(np.median(ttfts) * 1000),
        "p99_ttft_ms": float(np.percentile(ttfts, 99) * 1000),
        "input_lens": in_lens.tolist(),
        "output_lens": out_lens.tolist(),
        "ttfts": np.round(ttfts, 6).tolist(),
        "itls": itls,
        "latencies": np.round(latencies, 6).tolist(),
        "start_times": np.round(starts, 6).tolist(),
        "generated_texts": [""] * n,
        "errors": [""] * n,
    }
    path.write_text(json.dumps(doc), encoding="utf-8")
    return len(gaps)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    from collectors.importers import import_paths
    from store.lifecycle import open_store

    with tempfile.TemporaryDirectory(prefix="servescope-bench-") as tmp:
        src = Path(tmp) / "vllm-100k.json"
        t0 = time.perf_counter()
        n_gaps = generate(src, args.requests)
        size_mb = src.stat().st_size / 1e6
        print(
            f"generated {src.name}: {args.requests:,} requests, {n_gaps:,} gaps, "
            f"{size_mb:.0f} MB in {time.perf_counter() - t0:.1f} s"
        )
        timings: list[float] = []
        for i in range(args.repeat):
            store = open_store(f"duckdb:///{tmp}/bench-{i}.duckdb")
            t = time.perf_counter()
            reports = import_paths(store, [src])
            elapsed = time.perf_counter() - t
            store.dispose()
            if reports[0].error or reports[0].requests != args.requests:
                print(f"import failed: {reports[0]}", file=sys.stderr)
                return 1
            timings.append(elapsed)
            print(f"  run {i + 1}: {elapsed:.2f} s")
        median = statistics.median(timings)
        print(
            f"median of {args.repeat}: {median:.2f} s  (target < 3 s; "
            f"{args.requests / median:,.0f} requests/s, {n_gaps / median:,.0f} gaps/s)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
