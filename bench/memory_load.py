"""Memory vs load: how long the view of a run series takes to build on a large store.

Generates a DuckDB store of ``--runs`` load levels of ``--hours`` each (1-second scrapes of KV
usage, running, waiting and the preemption counter from one target; 8 GPUs on one host; 2,000
requests per run), plus ``--noise`` other targets and a second host reporting the whole time
(samples the series' reads must skip). Prints, as medians of ``--repeat``:

- ``store.run_series.series_figures`` of the series (three statements whatever its size);
- ``services.views.memory.memory_load_view`` on a store opened for it (the page's cold view);
- for scale, ``store.sample_timelines.run_states`` of the same runs (per-run statements: the
  peaks the sweep runner reads).

    .venv/bin/python bench/memory_load.py [--runs 16] [--hours 1] [--noise 8] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.views.memory import MemorySelection, memory_load_view
from store import ingest, run_series, sample_timelines
from store.lifecycle import open_store

T0 = 1_900_000_000.0
GIB = 2**30
TARGET, HOST = "http://engine:8000/metrics", "node-a"


def _generate(url: str, runs: int, hours: float, noise: int) -> list[str]:
    store = open_store(url)
    rng = np.random.default_rng(1)
    span = hours * 3600.0
    ids = []
    try:
        for k in range(runs):
            run_id, c = f"level-{k:03d}", 2 ** (k % 8) * (1 + k // 8)
            start = T0 + k * (span + 60.0)
            ids.append(run_id)
            ingest.add_run(
                store,
                {
                    "run_id": run_id,
                    "source": "servescope",
                    "model": "llama-3.1-8b",
                    "gpu_name": "H100-SXM-80GB",
                    "gpu_count": 8,
                    "workload": "mixed",
                    "arrival": "concurrency",
                    "concurrency": c,
                    "engine_params": {"max_batch_size": 256},
                    "started_at": start,
                    "ended_at": start + span,
                    "status": "completed",
                    "client_params": {"collectors": {"targets": [TARGET], "hosts": [HOST]}},
                },
            )
            ts = start + np.arange(0.0, span, 1.0)
            kv = np.clip(c / 64 + rng.normal(0, 0.02, ts.size), 0, 1)
            frames = [
                pd.DataFrame(
                    {"target": TARGET, "ts": ts, "metric": m, "engine": "vllm", "value": v}
                )
                for m, v in (
                    ("kv_cache_usage", kv),
                    ("requests_running", np.full(ts.size, float(c))),
                    ("requests_waiting", np.zeros(ts.size)),
                    ("preemptions_total", np.cumsum(kv > 0.99).astype(float)),
                )
            ]
            ingest.add_rows(store, "engine_samples", pd.concat(frames, ignore_index=True))
            sent = start + np.sort(rng.uniform(0, span - 5, 2000))
            ingest.add_requests(
                store,
                pd.DataFrame(
                    {
                        "run_id": run_id,
                        "seq": range(sent.size),
                        "status": "ok",
                        "sent_at": sent,
                        "done_at": sent + 2.0,
                        "input_tokens": rng.integers(100, 2000, sent.size),
                        "output_tokens": rng.integers(50, 500, sent.size),
                        "ttft_ms": 50.0,
                        "tpot_ms": 10.0,
                        "e2e_ms": 2000.0,
                    }
                ),
            )
        end = T0 + runs * (span + 60.0)
        every = np.arange(T0, end, 1.0)
        for host in (HOST, "node-b"):
            ingest.add_rows(
                store,
                "gpu_samples",
                pd.DataFrame(
                    {
                        "host": host,
                        "gpu_index": np.repeat(np.arange(8), every.size),
                        "ts": np.tile(every, 8),
                        "mem_used_bytes": 60 * GIB + rng.uniform(0, GIB, every.size * 8),
                        "mem_total_bytes": 80.0 * GIB,
                        "util_gpu": 0.5,
                    }
                ),
            )
        for n in range(noise):
            ingest.add_rows(
                store,
                "engine_samples",
                pd.DataFrame(
                    {
                        "target": f"http://other-{n}:8000/metrics",
                        "ts": every,
                        "metric": "kv_cache_usage",
                        "engine": "vllm",
                        "value": 0.5,
                    }
                ),
            )
    finally:
        store.dispose()
    return ids


def _median(fn: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=16)
    p.add_argument("--hours", type=float, default=1.0)
    p.add_argument("--noise", type=int, default=8)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"duckdb:///{Path(tmp) / 'store.duckdb'}"
        t = time.perf_counter()
        ids = _generate(url, args.runs, args.hours, args.noise)
        store = open_store(url)
        engine_rows = int(store.read_df("SELECT COUNT(*) AS n FROM engine_samples")["n"].iloc[0])
        gpu_rows = int(store.read_df("SELECT COUNT(*) AS n FROM gpu_samples")["n"].iloc[0])
        print(
            f"store: {args.runs} runs × {args.hours:g} h; {engine_rows:,} engine samples, "
            f"{gpu_rows:,} GPU samples ({time.perf_counter() - t:.1f} s to generate)"
        )
        selection = MemorySelection(series=tuple(ids))
        figures = _median(lambda: run_series.series_figures(store, ids), args.repeat)
        warm = _median(lambda: memory_load_view(store, selection), args.repeat)
        states = _median(lambda: sample_timelines.run_states(store, ids), args.repeat)
        store.dispose()

        def cold() -> None:
            fresh = open_store(url)
            try:
                memory_load_view(fresh, selection)
            finally:
                fresh.dispose()

        cold_s = _median(cold, args.repeat)
    print(f"run_series.series_figures, {len(ids)} runs: {figures * 1000:,.0f} ms")
    print(f"memory_load_view, store open: {warm * 1000:,.0f} ms")
    print(f"memory_load_view, store opened for it (cold): {cold_s * 1000:,.0f} ms")
    print(f"for scale: sample_timelines.run_states (per-run reads): {states * 1000:,.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
