"""A store holding five minutes of one watched vLLM target, as ``servescope watch`` writes it, for
the Live page's tests (integration, AppTest, Playwright).

One scrape per second over (now − 300, now] (plus the baseline scrape at now − 300): 10 requests
finish every second. Their TTFT is 50 ms, except in the **burst** (now − 120, now − 90] where
it is 2 s (the 1–2.5 s bucket: P99 ≈ 2.49 s, against interactive-chat's 500 ms). In the
**errors** span (now − 60, now − 30] one extra request a second is aborted (error rate 1/11).
Prompt lengths: 6 of 10 in ≤128 tokens, 3 in 129–512, 1 in 513–2048; outputs all in 129–256.
Engine gauges (running, waiting, KV usage) and the preemption counter rise in the burst; one
GPU (host ``node-a``) is sampled every second.
"""

from __future__ import annotations

import json
import math
from typing import Final

from store import ingest
from store.lifecycle import open_store

TARGET: Final = "http://10.0.0.1:8000/metrics"
SPAN_S: Final = 300
PER_S: Final = 10
BURST: Final = (120.0, 90.0)  # (now − 120, now − 90]
ERRORS: Final = (60.0, 30.0)  # (now − 60, now − 30]
GIB: Final = 1024.0**3

TTFT_EDGES: Final = (0.1, 0.25, 0.5, 1.0, 2.5, math.inf)
E2E_EDGES: Final = (0.5, 1.0, 2.5, 5.0, 20.0, math.inf)
PROMPT_EDGES: Final = (128.0, 512.0, 2048.0, math.inf)
OUTPUT_EDGES: Final = (128.0, 256.0, math.inf)


def _bucket(le: float) -> str:
    return "+Inf" if math.isinf(le) else repr(float(le))


def _hist(
    target: str, ts: float, hist: str, counts: dict[float, float], total: float
) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = [
        {"target": target, "ts": ts, "metric": f"{hist}_bucket:{_bucket(le)}", "value": c}
        for le, c in counts.items()
    ]
    rows.append({"target": target, "ts": ts, "metric": f"{hist}_count", "value": counts[math.inf]})
    rows.append({"target": target, "ts": ts, "metric": f"{hist}_sum", "value": total})
    return rows


def _cumulative(edges: tuple[float, ...], per_bucket: dict[float, float]) -> dict[float, float]:
    out, running = {}, 0.0
    for le in edges:
        running += per_bucket.get(le, 0.0)
        out[le] = running
    return out


def _labels(**kv: str) -> str:
    return json.dumps(kv, sort_keys=True, separators=(",", ":"))


def seed(url: str, now: float, *, target: str = TARGET, span_s: int = SPAN_S) -> None:
    """Write the five minutes (``span_s`` seconds: the same minute pattern, longer) ending at
    ``now`` into the store at ``url``."""
    rows: list[dict[str, object]] = []
    raw: list[dict[str, object]] = []
    gpus: list[dict[str, object]] = []
    ttft = {le: 0.0 for le in TTFT_EDGES}
    e2e = {le: 0.0 for le in E2E_EDGES}
    queue = {le: 0.0 for le in TTFT_EDGES}
    prompt = {le: 0.0 for le in PROMPT_EDGES}
    output = {le: 0.0 for le in OUTPUT_EDGES}
    sums = {"ttft": 0.0, "e2e": 0.0, "queue": 0.0, "prompt": 0.0, "output": 0.0}
    ok = aborted = preemptions = 0.0
    for i in range(span_s + 1):
        ts = now - span_s + i
        age = now - ts
        burst = BURST[1] <= age < BURST[0]
        errors = ERRORS[1] <= age < ERRORS[0]
        if i > 0:
            n = float(PER_S)
            slow_le, fast_le = (2.5, 0.5) if burst else (0.1, 0.1)
            ttft[slow_le] += n
            sums["ttft"] += n * (2.0 if burst else 0.05)
            queue[fast_le if not burst else 1.0] += n
            sums["queue"] += n * (0.8 if burst else 0.01)
            e2e[5.0 if burst else 1.0] += n
            sums["e2e"] += n * (4.0 if burst else 0.9)
            prompt[128.0] += 6
            prompt[512.0] += 3
            prompt[2048.0] += 1
            sums["prompt"] += 6 * 64 + 3 * 300 + 1 * 1200
            output[256.0] += n
            sums["output"] += n * 200
            ok += n
            aborted += 1.0 if errors else 0.0
            preemptions += 2.0 if burst else 0.0
        for name, edges, counts, total in (
            ("ttft_seconds", TTFT_EDGES, ttft, sums["ttft"]),
            ("e2e_seconds", E2E_EDGES, e2e, sums["e2e"]),
            ("queue_time_seconds", TTFT_EDGES, queue, sums["queue"]),
            ("prompt_length_tokens", PROMPT_EDGES, prompt, sums["prompt"]),
            ("output_length_tokens", OUTPUT_EDGES, output, sums["output"]),
        ):
            rows += _hist(target, ts, name, _cumulative(edges, counts), total)
        for metric, value in (
            ("requests_running", 48.0 if burst else 12.0),
            ("requests_waiting", 30.0 if burst else 0.0),
            ("kv_cache_usage", 0.97 if burst else 0.35),
            ("preemptions_total", preemptions),
            ("generation_tokens_total", ok * 200),
            ("prompt_tokens_total", ok * 250),
        ):
            rows.append({"target": target, "ts": ts, "metric": metric, "value": value})
        raw += [
            {
                "target": target,
                "ts": ts,
                "name": "vllm:request_success_total",
                "labels": _labels(finished_reason="stop"),
                "value": ok,
            },
            {
                "target": target,
                "ts": ts,
                "name": "vllm:request_success_total",
                "labels": _labels(finished_reason="abort"),
                "value": aborted,
            },
        ]
        gpus.append(
            {
                "host": "node-a",
                "gpu_index": 0,
                "ts": ts,
                "gpu_name": "NVIDIA H100",
                "mem_used_bytes": (78.0 if burst else 60.0) * GIB,
                "mem_total_bytes": 80.0 * GIB,
                "util_gpu": 0.95 if burst else 0.6,
                "source": "nvml",
            }
        )
    for row in rows:
        row["engine"] = "vllm"
    store = open_store(url)
    try:
        ingest.add_rows(store, "engine_samples", rows)
        ingest.add_rows(store, "engine_raw_samples", raw)
        ingest.add_rows(store, "gpu_samples", gpus)
    finally:
        store.dispose()
