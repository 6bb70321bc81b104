"""Measurement error of the load generator: stored TTFT/ITL percentiles minus the truth.

A loopback mock server (its own process, pinned to the last CPU) streams with TTFT 50 ms and
ITL 10 ms and records what it actually sent, by its own clock. ``servescope bench`` (the real
pipeline: worker process, lean transport, store) measures it at 256 and 1,024 streams into a
temporary DuckDB file; the stored percentiles are compared with the server's record and with
the nominal values. Medians over repeats.

Targets at 256 streams: TTFT within 2 ms at P50 and 5 ms at P99; ITL P50 within 0.5 ms.

    .venv/bin/python bench/measurement_error.py [--streams 256,1024] [--repeats 3] [--tokens 64]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from collectors.loadgen.config import BenchConfig  # noqa: E402
from collectors.loadgen.runner import run_benchmark  # noqa: E402
from sim.mockserver import MockServer  # noqa: E402
from store.lifecycle import open_store  # noqa: E402

TTFT_MS, ITL_MS = 50.0, 10.0


def one(streams: int, tokens: int, requests: int, client_cpu: int | None, server_cpu: int | None):
    with (
        tempfile.TemporaryDirectory() as tmp,
        MockServer(
            ttft_ms=TTFT_MS, itl_ms=ITL_MS, output_tokens=tokens, record=True, cpu=server_cpu
        ) as url,
    ):
        store = open_store(f"duckdb:///{tmp}/m.duckdb")
        cfg = BenchConfig(
            endpoint=url,
            workload_spec={"name": "fixed", "input_tokens": 64, "output_tokens": tokens},
            concurrency=(streams,),
            requests=requests,
            warmup=min(streams, 64),
            calibrate=False,
            max_tokens=tokens,
        )
        server = MockServer.__new__(MockServer)
        server.url = url
        server.stats(reset=True)
        if client_cpu is not None:
            os.sched_setaffinity(0, {client_cpu})
        [run_id] = run_benchmark(cfg, store, progress=False)
        truth = server.stats()
        req = store.read_df("select ttft_ms, status from requests where run_id = :r", {"r": run_id})
        gaps = store.read_df("select gap_ms from token_gaps where run_id = :r", {"r": run_id})
        run = store.read_df(
            "select client_bound, client_bound_reason, tool_summary from runs where run_id = :r",
            {"r": run_id},
        )
    ok = req[req.status == "ok"]
    # the server's record also holds the warm-up requests: compare with the measured ones only
    t_ttft = np.array(truth["ttft_ms"][-len(ok) :])
    t_itl = np.array(truth["itl_ms"])
    m_ttft = ok.ttft_ms.to_numpy()
    m_itl = gaps.gap_ms.to_numpy()
    out = {}
    for p in (50, 99):
        out[f"ttft_p{p}"] = (np.percentile(m_ttft, p), np.percentile(t_ttft, p))
        out[f"itl_p{p}"] = (np.percentile(m_itl, p), np.percentile(t_itl, p))
    out["n"] = (len(ok), len(req))
    out["bound"] = (bool(run.client_bound[0]), run.client_bound_reason[0])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", default="256,1024")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--requests-per-stream", type=int, default=4)
    ap.add_argument("--no-pin", action="store_true")
    a = ap.parse_args()
    ncpu = os.cpu_count() or 1
    client_cpu = None if a.no_pin or ncpu < 2 else 0
    server_cpu = None if a.no_pin or ncpu < 2 else ncpu - 1
    print(
        f"mock server: TTFT {TTFT_MS:g} ms, ITL {ITL_MS:g} ms, {a.tokens} tokens per request; "
        f"client CPU {client_cpu}, server CPU {server_cpu}; medians of {a.repeats} repeats"
    )
    header = (
        f"{'streams':>7} {'metric':>8} {'stored':>9} {'server':>9} {'nominal':>8} "
        f"{'stored-server':>14} {'stored-nominal':>15}"
    )
    print(header)
    print("-" * len(header))
    for streams in (int(s) for s in a.streams.split(",")):
        results = [
            one(streams, a.tokens, streams * a.requests_per_stream, client_cpu, server_cpu)
            for _ in range(a.repeats)
        ]
        for key, nominal in (
            ("ttft_p50", TTFT_MS),
            ("ttft_p99", TTFT_MS),
            ("itl_p50", ITL_MS),
            ("itl_p99", ITL_MS),
        ):
            stored = statistics.median(r[key][0] for r in results)
            server = statistics.median(r[key][1] for r in results)
            diff = statistics.median(r[key][0] - r[key][1] for r in results)
            print(
                f"{streams:>7} {key:>8} {stored:>9.2f} {server:>9.2f} {nominal:>8.1f} "
                f"{diff:>+14.2f} {stored - nominal:>+15.2f}"
            )
        bound = [r["bound"] for r in results]
        print(f"{'':>7} requests ok/total: {[r['n'] for r in results]}; client-bound: {bound}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
