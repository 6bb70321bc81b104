"""Measurement error of the load generator: stored TTFT/ITL percentiles minus the truth.

A loopback mock server (``sim/mockserver.py``, its own process, pinned to the last CPU) streams
with TTFT 50 ms and ITL 10 ms and records what it actually sent, by its own clock
(``record=True``: the instant it wrote each chunk, from the instant it read the request). Two
clients measure it, both pinned to CPU 0, one after the other in every repeat (interleaved):

- ServeScope: ``run_benchmark`` (worker process, lean transport, store) into a temporary DuckDB
  file; the stored percentiles are compared with the server's record of the same requests.
- raw: ``bench/loadgen_capacity.py``'s minimal raw-asyncio client (``raw_client``, timed mode:
  ``asyncio.open_connection``, each read stamped with ``perf_counter`` when its coroutine gets
  it), the same request body, streams and requests per stream.

Printed: median over repeats of each client's error (client's percentile minus the server's) at
TTFT P50/P99 and ITL P50/P99, with the load average; every ServeScope run's client-bound flag,
reason and timestamp source (``tool_summary["timestamps"]``).

Targets: 256 streams TTFT error ≤ 2 ms at P50 and ≤ 5 ms at P99, ITL P50 ≤ 0.5 ms; 1,024
streams TTFT P50 ≤ 20 ms — or the run flagged client-bound with the reason.

    .venv/bin/python bench/measurement_error.py [--streams 256,1024] [--repeats 3]
        [--tokens 64] [--requests-per-stream 4] [--timestamps auto|kernel|loop] [--no-pin]
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
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from loadgen_capacity import raw_subprocess, request_body, server_stats  # noqa: E402

from collectors.loadgen.config import BenchConfig  # noqa: E402
from collectors.loadgen.runner import run_benchmark  # noqa: E402
from sim.mockserver import MockConfig, MockServer  # noqa: E402
from store.lifecycle import open_store  # noqa: E402

TTFT_MS, ITL_MS = 50.0, 10.0
INPUT_TOKENS = 64
KEYS = ("ttft_p50", "ttft_p99", "itl_p50", "itl_p99")


def _errors(
    ttft: np.ndarray, itl: np.ndarray, t_ttft: np.ndarray, t_itl: np.ndarray
) -> dict[str, float]:
    out = {}
    for p in (50, 99):
        out[f"ttft_p{p}"] = float(np.percentile(ttft, p) - np.percentile(t_ttft, p))
        out[f"itl_p{p}"] = float(np.percentile(itl, p) - np.percentile(t_itl, p))
    return out


def run_servescope(url: str, streams: int, tokens: int, per_stream: int, stamps: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"duckdb:///{tmp}/m.duckdb")
        cfg = BenchConfig(
            endpoint=url,
            workload_spec={"name": "fixed", "input_tokens": INPUT_TOKENS, "output_tokens": tokens},
            concurrency=(streams,),
            requests=streams * per_stream,
            warmup=min(streams, 64),
            calibrate=False,
            max_tokens=tokens,
            workers=1,
            timestamps=stamps,
        )
        server_stats(url, reset=True)
        load0 = os.getloadavg()[0]
        [run_id] = run_benchmark(cfg, store, progress=False)
        truth = server_stats(url, reset=False)
        req = store.read_df("select ttft_ms, status from requests where run_id = :r", {"r": run_id})
        gaps = store.read_df("select gap_ms from token_gaps where run_id = :r", {"r": run_id})
        run = store.read_df(
            "select client_bound, client_bound_reason, tool_summary from runs where run_id = :r",
            {"r": run_id},
        )
    ok = req[req.status == "ok"]
    summary = json.loads(run.tool_summary[0])
    # the server's record also holds the warm-up requests (sent first): compare the rest
    out: dict[str, Any] = dict(
        _errors(
            ok.ttft_ms.to_numpy(),
            gaps.gap_ms.to_numpy(),
            np.array(truth["ttft_ms"][-len(ok) :]),
            np.array(truth["itl_ms"]),
        )
    )
    out["n"] = f"{len(ok)}/{len(req)}"
    out["bound"] = bool(run.client_bound[0])
    out["reason"] = run.client_bound_reason[0]
    out["stamps"] = ",".join(summary.get("timestamps") or ["?"])
    out["notes"] = "; ".join(summary.get("timestamps_notes") or [])
    out["load"] = load0
    return out


def run_raw(url: str, body: bytes, streams: int, per_stream: int) -> dict:
    server_stats(url, reset=True)
    load0 = os.getloadavg()[0]
    r = raw_subprocess(url, body, streams, 600.0, per_stream)
    truth = server_stats(url, reset=False)
    out: dict[str, Any] = dict(
        _errors(
            np.array(r["ttft_ms"]),
            np.array(r["itl_ms"]),
            np.array(truth["ttft_ms"]),
            np.array(truth["itl_ms"]),
        )
    )
    out["n"] = f"{r['requests']}/{streams * per_stream}"
    out["load"] = load0
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--streams", default="256,1024")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--requests-per-stream", type=int, default=4)
    ap.add_argument("--timestamps", default="auto", choices=("auto", "kernel", "loop"))
    ap.add_argument("--no-pin", action="store_true")
    a = ap.parse_args()
    ncpu = os.cpu_count() or 1
    pin = not a.no_pin and ncpu >= 2
    if pin:
        os.sched_setaffinity(0, {0})  # ServeScope's worker and the raw client inherit it
    server_cpu = ncpu - 1 if pin else None
    body = request_body(MockConfig().model, INPUT_TOKENS, a.tokens)
    print(
        f"mock server: TTFT {TTFT_MS:g} ms, ITL {ITL_MS:g} ms, {a.tokens} tokens per request, "
        f"{a.requests_per_stream} requests per stream; clients on CPU {'0' if pin else 'any'}, "
        f"server on CPU {server_cpu if pin else 'any'}; ServeScope then raw in each of "
        f"{a.repeats} repeats; errors = client percentile - server percentile (ms), medians",
        flush=True,
    )
    t0 = time.time()
    with MockServer(
        ttft_ms=TTFT_MS, itl_ms=ITL_MS, output_tokens=a.tokens, record=True, cpu=server_cpu
    ) as url:
        for streams in (int(s) for s in a.streams.split(",")):
            ss: list[dict] = []
            raw: list[dict] = []
            for i in range(a.repeats):
                ss.append(
                    run_servescope(url, streams, a.tokens, a.requests_per_stream, a.timestamps)
                )
                raw.append(run_raw(url, body, streams, a.requests_per_stream))
                s, r = ss[-1], raw[-1]
                print(
                    f"  {streams} streams, repeat {i}: ServeScope ({s['stamps']} stamps, ok "
                    f"{s['n']}, load {s['load']:.1f}) "
                    + " ".join(f"{k} {s[k]:+.2f}" for k in KEYS)
                    + f" | raw (ok {r['n']}, load {r['load']:.1f}) "
                    + " ".join(f"{k} {r[k]:+.2f}" for k in KEYS),
                    flush=True,
                )
                print(
                    f"    client-bound: {s['bound']}"
                    + (f" — {s['reason']}" if s["reason"] else "")
                    + (f"; timestamp notes: {s['notes']}" if s["notes"] else ""),
                    flush=True,
                )
            head = f"{'streams':>7} {'client':<10} " + " ".join(f"{k:>9}" for k in KEYS)
            print(head)
            for name, res in (("ServeScope", ss), ("raw", raw)):
                print(
                    f"{streams:>7} {name:<10} "
                    + " ".join(f"{statistics.median(x[k] for x in res):>+9.2f}" for k in KEYS)
                )
            print(
                f"{'':>7} load average (1 min) {min(x['load'] for x in ss + raw):.1f}–"
                f"{max(x['load'] for x in ss + raw):.1f}; ServeScope flagged client-bound in "
                f"{sum(x['bound'] for x in ss)}/{len(ss)} runs",
                flush=True,
            )
    print(f"took {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
