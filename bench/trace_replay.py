"""How exactly ``bench --trace`` replays a trace's arrivals, and how long a large trace takes to
load.

Arrivals: for each ``--rates`` value, a BurstGPT-shaped trace of ``--seconds`` seconds of
Poisson arrivals at that rate (prompts 16–600 tokens, outputs 1–16) is written and replayed by
``run_benchmark`` against the loopback mock server (``sim.mockserver``, in its own process,
TTFT 3 ms, ITL 1 ms) into a DuckDB file. The arrival error of a request is
``|sent_at − (runs.started_at + trace offset)|`` as stored; printed: P50 / P99 / max, the
client's own P99 lag and whether the run was flagged client-bound (and why).

Load: a ``--rows``-row BurstGPT-shaped CSV (default 1,000,000: BurstGPT_1 has 1.43 M) with 2 %
failed requests (0 response tokens) is written, then ``load_trace`` reads it whole (hash,
parse, sort check, offsets) ``--repeat`` times; printed: the file's size, the best and median
seconds, rows per second. Also with ``--trace-window`` 1 h of it, and ``--requests 1000``.

    .venv/bin/python bench/trace_replay.py [--rates 10,50,200] [--seconds 5] [--rows 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.metrics import percentile
from collectors.loadgen import traces
from collectors.loadgen.config import BenchConfig
from collectors.loadgen.runner import run_benchmark
from collectors.loadgen.traces import load_trace
from sim.mockserver import MockServer
from store.lifecycle import open_store

HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


def write_burstgpt(path: Path, rows: int, rate: float, seed: int, failed: float = 0.0) -> None:
    rng = random.Random(seed)
    t = 1000.0
    with path.open("w") as f:
        f.write(HEADER)
        for _ in range(rows):
            n_in = rng.randint(16, 600)
            n_out = 0 if rng.random() < failed else rng.randint(1, 16)
            f.write(f"{t:.3f},ChatGPT,{n_in},{n_out},{n_in + n_out},Conversation log\n")
            t += rng.expovariate(rate)


def arrivals(rates: list[float], seconds: float, folder: Path) -> None:
    print(f"arrival error against the loopback mock ({seconds:g} s of Poisson arrivals each)")
    print(
        f"{'rate/s':>7} {'reqs':>6} {'P50 ms':>8} {'P99 ms':>8} {'max ms':>8} {'lag99':>7}  bound"
    )
    with MockServer(ttft_ms=3, itl_ms=1) as url:
        for rate in rates:
            path = folder / f"trace-{rate:g}.csv"
            write_burstgpt(path, max(2, round(rate * seconds)), rate, seed=int(rate))
            trace = load_trace(path)
            store = open_store(f"duckdb:///{folder / f'replay-{rate:g}.duckdb'}")
            cfg = BenchConfig(
                endpoint=url, trace=str(path), ignore_eos=True, metrics_url="off", gpu=False
            )
            (run_id,) = run_benchmark(cfg, store, progress=False)
            run = store.read_df("select * from runs where run_id = :r", {"r": run_id}).iloc[0]
            reqs = store.read_df(
                "select sent_at, lag_ms from requests where run_id = :r order by seq",
                {"r": run_id},
            )
            errors = [
                abs((s - run.started_at) - o) * 1000
                for s, o in zip(reqs.sent_at, trace.offsets, strict=True)
            ]
            lag99 = json.loads(run.tool_summary or "{}").get("p99_lag_ms")
            print(
                f"{rate:7g} {len(errors):6d} {percentile(errors, 50.0) or 0:8.3f} "
                f"{percentile(errors, 99.0) or 0:8.3f} {max(errors):8.3f} "
                f"{lag99 if lag99 is not None else float('nan'):7.2f}  "
                f"{'yes: ' + str(run.client_bound_reason) if run.client_bound else 'no'}"
            )
            store.dispose()


def load_time(rows: int, repeat: int, folder: Path) -> None:
    path = folder / "burstgpt-shaped.csv"
    t0 = time.perf_counter()
    write_burstgpt(path, rows, rate=0.25, seed=1, failed=0.02)
    print(
        f"\nload time of a {rows:,}-row BurstGPT-shaped CSV "
        f"({path.stat().st_size / 1e6:.1f} MB, written in {time.perf_counter() - t0:.1f} s)"
    )
    cases: list[tuple[str, dict[str, object]]] = [
        ("whole trace", {}),
        ("--trace-window 1h:2h", {"window": (3600.0, 7200.0)}),
        ("--requests 1000", {"requests": 1000}),
    ]
    for label, kwargs in cases:
        times = []
        for _ in range(repeat):
            traces.clear_cache()  # a read from the file, not the kept result
            t0 = time.perf_counter()
            trace = load_trace(path, **kwargs)  # type: ignore[arg-type]
            times.append(time.perf_counter() - t0)
        print(
            f"  {label:<22} best {min(times):.2f} s, median {statistics.median(times):.2f} s "
            f"({trace.rows_read / min(times) / 1e6:.2f} M rows/s); {len(trace):,} requests, "
            f"{trace.rows_unusable:,} unusable"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="10,50,200", help="requests/s of the replayed traces")
    ap.add_argument("--seconds", type=float, default=5.0, help="span of each replayed trace")
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows of the file to load")
    ap.add_argument("--repeat", type=int, default=3, help="loads of it per case")
    args = ap.parse_args()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} CPUs, load average {load} (a busy machine wakes the client late)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        arrivals([float(r) for r in args.rates.split(",")], args.seconds, folder)
        load_time(args.rows, args.repeat, folder)


if __name__ == "__main__":
    main()
