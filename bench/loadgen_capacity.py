"""Load-generator capacity: sustained output tokens/s and requests/s against a server that
streams as fast as it can, at 64, 256 and 1,024 streams (256 output tokens per request).

The mock server runs in its own process pinned to the last CPU; the client (``servescope
bench``'s full pipeline: the measuring worker process plus this coordinating process, which
writes every request and token-gap row into a temporary DuckDB file) is pinned to CPU 0, so it
uses at most one core. Medians over repeats. Target: ≥ 60k output tokens/s at 256 streams.
Reference points measured on this machine (issue #2): GuideLLM 0.8.1 ≈ 13k tokens/s, vLLM's
benchmark client ≈ 46k, a minimal raw-asyncio client ≈ 150k.

    .venv/bin/python bench/loadgen_capacity.py [--streams 64,256,1024] [--duration 5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from collectors.loadgen.config import BenchConfig  # noqa: E402
from collectors.loadgen.runner import run_benchmark  # noqa: E402
from sim.mockserver import MockServer  # noqa: E402
from store.db import Store  # noqa: E402

TOKENS = 256
TARGET = 60_000.0
REFERENCES = {"GuideLLM 0.8.1": 13_000.0, "vLLM bench client": 46_000.0, "raw asyncio": 150_000.0}


def one(
    streams: int, duration: float, workers: int, server_cpu: int | None, burst: int
) -> dict[str, float]:
    with (
        tempfile.TemporaryDirectory() as tmp,
        MockServer(output_tokens=TOKENS, burst=burst, cpu=server_cpu) as url,
    ):
        store = Store.open(f"duckdb:///{tmp}/c.duckdb")
        cfg = BenchConfig(
            endpoint=url,
            workload_spec={"name": "capacity", "input_tokens": 32, "output_tokens": TOKENS},
            concurrency=(streams,),
            duration_s=duration,
            warmup=streams,
            calibrate=False,
            max_tokens=TOKENS,
            workers=workers,
        )
        cpu0 = time.process_time()
        [run_id] = run_benchmark(cfg, store, progress=False)
        coordinator_cpu = time.process_time() - cpu0
        run = store.read_df(
            "select duration_s, tool_summary from runs where run_id = :r", {"r": run_id}
        )
        ok = store.read_df(
            "select count(*) as n, sum(output_tokens) as tokens from requests "
            "where run_id = :r and status = 'ok'",
            {"r": run_id},
        )
    summary = json.loads(run.tool_summary[0])
    duration_s = float(run.duration_s[0])
    return {
        "tokens_s": float(ok.tokens[0]) / duration_s,
        "requests_s": float(ok.n[0]) / duration_s,
        "worker_cpu": float(summary["client_cpu_s"]) / duration_s,
        "coordinator_cpu": coordinator_cpu / duration_s,
        "errors": float(summary["errors"]),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", default="64,256,1024")
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--burst", type=int, default=16, help="server: chunks written per loop turn")
    ap.add_argument("--no-pin", action="store_true")
    a = ap.parse_args()
    ncpu = os.cpu_count() or 1
    pin = not a.no_pin and ncpu >= 2
    if pin:
        os.sched_setaffinity(0, {0})  # the workers inherit it: the client stays on one core
    server_cpu = ncpu - 1 if pin else None
    print(
        f"{TOKENS} output tokens per request, {a.duration:g} s per level, medians of {a.repeats}; "
        f"client on CPU {'0' if pin else 'any'}, server on CPU {server_cpu if pin else 'any'}"
    )
    head = (
        f"{'streams':>7} {'tokens/s':>10} {'req/s':>8} {'worker CPU':>10} {'coord CPU':>9} "
        f"{'vs 60k':>7} " + " ".join(f"{'vs ' + k:>22}" for k in REFERENCES)
    )
    print(head)
    print("-" * len(head))
    for streams in (int(s) for s in a.streams.split(",")):
        res = [one(streams, a.duration, a.workers, server_cpu, a.burst) for _ in range(a.repeats)]

        def med(key: str, res: list[dict[str, float]] = res) -> float:
            return statistics.median(r[key] for r in res)

        tps = med("tokens_s")
        print(
            f"{streams:>7} {tps:>10,.0f} {med('requests_s'):>8,.0f} {med('worker_cpu'):>10.0%} "
            f"{med('coordinator_cpu'):>9.0%} {tps / TARGET:>7.2f} "
            + " ".join(f"{tps / ref:>22.2f}" for ref in REFERENCES.values())
            + (f"  errors {med('errors'):.0f}" if med("errors") else "")
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
