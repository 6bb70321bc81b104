"""How long Compare and Select take to read production's length mix and the runs' lengths.

Production: ``--targets`` watched engines (default 4) scraped at 1 Hz for ``--hours`` (default
24: the window the pages compare with), each scrape holding vLLM's prompt and generation length
histograms (``vllm:request_prompt_tokens`` / ``request_generation_tokens`` buckets 1, 2, 5, 10,
20, 50, 100, 200, 500, 1 000, 2 000, 5 000, 10 000, 20 000, +Inf) with every count moving on
every scrape (the worst case: the watcher writes bucket rows only when the count moved). The
read is ``services.views.production_mix.production_mix`` (per target and histogram
``store.sample_series.engine_histogram_series``, then ``bucket_increase``), run twice (the
page caches it per window: the first call is what a user waits for once a TTL).

Runs: ``--runs`` runs of ``--requests`` requests each with lognormal prompt and output lengths;
``store.request_lengths.length_counts`` of all of them cold, then again (whole runs are kept as
rollups), then ``mix_flags`` (read + binning + KS).

    .venv/bin/python bench/production_mix.py [--targets 4] [--hours 24] [--runs 12]
        [--requests 100000]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collectors.engine_metrics import bucket_metric
from services.views import production_mix as pm
from store import ingest, request_lengths
from store.lifecycle import open_store

EDGES = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, math.inf)
T0 = 1_767_225_600.0  # 2026-01-01 00:00 UTC


def _histogram_rows(target: str, hist: str, seconds: int, mean: float, seed: int) -> pd.DataFrame:
    """1 Hz scrapes of one cumulative length histogram whose counts move every second."""
    rng = np.random.default_rng(seed)
    per_s = rng.poisson(20, size=seconds)  # requests finished per second
    lengths = rng.lognormal(math.log(mean), 0.8, size=int(per_s.sum()))
    which = np.searchsorted(np.array(EDGES[:-1]), lengths, side="left")
    second = np.repeat(np.arange(seconds), per_s)
    grid = np.zeros((seconds, len(EDGES)))
    np.add.at(grid, (second, which), 1.0)
    cum = np.cumsum(np.cumsum(grid, axis=1), axis=0)  # cumulative over le, then over time
    ts = T0 + np.arange(seconds, dtype="float64")
    names = [bucket_metric(hist, le) for le in EDGES]
    frames = [
        pd.DataFrame({"ts": ts, "metric": name, "value": cum[:, i]}) for i, name in enumerate(names)
    ]
    frames.append(pd.DataFrame({"ts": ts, "metric": f"{hist}_count", "value": cum[:, -1]}))
    out = pd.concat(frames, ignore_index=True)
    out.insert(0, "target", target)
    out["engine"] = "vllm"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=4)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--runs", type=int, default=12)
    ap.add_argument("--requests", type=int, default=100_000)
    args = ap.parse_args()
    seconds = int(args.hours * 3600)
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"duckdb:///{Path(tmp) / 'bench.duckdb'}")
        try:
            rows = 0
            started = time.perf_counter()
            for t in range(args.targets):
                for k, (hist, mean) in enumerate(
                    (("prompt_length_tokens", 600.0), ("output_length_tokens", 200.0))
                ):
                    df = _histogram_rows(
                        f"http://engine-{t}:8000/metrics", hist, seconds, mean, t * 2 + k
                    )
                    rows += ingest.add_rows(store, "engine_samples", df)
            print(
                f"engine_samples: {rows:,} length-histogram rows ({args.targets} targets × "
                f"{seconds:,} scrapes × 2 histograms × {len(EDGES) + 1}), written in "
                f"{time.perf_counter() - started:.1f} s"
            )
            for attempt in ("first", "second"):
                started = time.perf_counter()
                mix = pm.production_mix(store, window_s=args.hours * 3600)
                elapsed = time.perf_counter() - started
                assert mix is not None and mix.prompt is not None
                print(
                    f"production_mix ({attempt} call, {args.hours:g} h window): {elapsed:.2f} s "
                    f"— prompt n = {mix.prompt.total:,.0f}"
                )
            assert mix is not None
            rng = np.random.default_rng(0)
            ids = []
            for r in range(args.runs):
                run_id = f"run-{r}"
                ids.append(run_id)
                ingest.add_run(
                    store, {"run_id": run_id, "source": "servescope", "started_at": T0 + r}
                )
                n = args.requests
                ingest.add_requests(
                    store,
                    pd.DataFrame(
                        {
                            "run_id": run_id,
                            "seq": np.arange(n),
                            "status": "ok",
                            "input_tokens": rng.lognormal(math.log(600 + 100 * r), 0.8, n).astype(
                                int
                            )
                            + 1,
                            "output_tokens": rng.lognormal(math.log(200), 0.8, n).astype(int) + 1,
                        }
                    ),
                )
            for attempt in ("cold", "rolled up"):
                started = time.perf_counter()
                counts = request_lengths.length_counts(store, ids)
                print(
                    f"length_counts of {args.runs} runs × {args.requests:,} requests ({attempt}): "
                    f"{time.perf_counter() - started:.2f} s, {len(counts):,} rows"
                )
            started = time.perf_counter()
            flags = pm.mix_flags(store, mix, ids)
            distances = ", ".join(f"{f.distance:.2f}" for f in flags if f.distance is not None)
            print(
                f"mix_flags of {args.runs} runs: {time.perf_counter() - started:.2f} s "
                f"(distances {distances}; flagged {sum(f.flagged for f in flags)})"
            )
        finally:
            store.dispose()


if __name__ == "__main__":
    main()
