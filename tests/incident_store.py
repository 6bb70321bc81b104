"""A store for the incident tests (tests/integration/test_incident_view.py,
tests/ui/test_incident_page.py, tests/e2e/test_incident.py): engine samples written as the
watcher writes them — each histogram as ``<hist>_bucket:<le>``, ``_sum`` and ``_count``, the
gauges and counters, vLLM's raw finished-request counter — for a calm quarter hour followed by a
KV-saturation episode, and one GPU. Hand-built, so every figure the incident view shows can be
computed by hand (the tests do)."""

from __future__ import annotations

import json
import math

import pandas as pd

from store import ingest
from store.db import Store
from store.lifecycle import open_store

T0 = 1_900_000_000.0
SPAN = 900.0
TARGET = "http://10.0.0.1:8000/metrics"
OTHER = "http://10.0.0.2:8000/metrics"
INF = math.inf
BUCKETS = {
    "ttft_seconds": (0.1, 0.5, 1.0, 2.5, 10.0, INF),
    "e2e_seconds": (1.0, 2.5, 5.0, 10.0, 30.0, INF),
    "queue_time_seconds": (0.01, 0.1, 1.0, 5.0, INF),
    "prefill_time_seconds": (0.05, 0.1, 0.5, INF),
    "prompt_length_tokens": (100.0, 200.0, 500.0, 1000.0, 2000.0, INF),
}
GIB = 2**30


def _le(le: float) -> str:
    return "+Inf" if math.isinf(le) else repr(le)


class Engine:
    """Cumulative histograms and counters of one target, scraped once a second."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.counts = {h: dict.fromkeys(b, 0.0) for h, b in BUCKETS.items()}
        self.sums = dict.fromkeys(BUCKETS, 0.0)
        self.tokens = 0.0
        self.preemptions = 0.0
        self.finished = 0.0
        self.rows: list[tuple[str, str, float, str, float]] = []
        self.raw: list[tuple[str, float, str, str, float]] = []

    def observe(self, hist: str, value: float) -> None:
        for le in BUCKETS[hist]:
            if value <= le:
                self.counts[hist][le] += 1
        self.sums[hist] += value

    def scrape(self, ts: float, *, running: float, waiting: float, kv: float) -> None:
        add = self.rows.append
        for hist, counts in self.counts.items():
            for le, c in counts.items():
                add((self.target, "vllm", ts, f"{hist}_bucket:{_le(le)}", c))
            add((self.target, "vllm", ts, f"{hist}_count", counts[INF]))
            add((self.target, "vllm", ts, f"{hist}_sum", self.sums[hist]))
        for metric, value in (
            ("requests_running", running),
            ("requests_waiting", waiting),
            ("kv_cache_usage", kv),
            ("generation_tokens_total", self.tokens),
            ("preemptions_total", self.preemptions),
        ):
            add((self.target, "vllm", ts, metric, value))
        labels = json.dumps({"finished_reason": "stop"}, sort_keys=True)
        self.raw.append((self.target, ts, "vllm:request_success_total", labels, self.finished))

    def request(
        self, *, ttft: float, queue: float, prefill: float, e2e: float, prompt: float
    ) -> None:
        self.observe("ttft_seconds", ttft)
        self.observe("queue_time_seconds", queue)
        self.observe("prefill_time_seconds", prefill)
        self.observe("e2e_seconds", e2e)
        self.observe("prompt_length_tokens", prompt)
        self.finished += 1


PROMPTS = (150.0, 180.0, 160.0, 170.0)  # a narrow mix: P90/P10 well under 4×


def episode(engine: Engine) -> None:
    """[T0, T0+900): calm — 4 requests/s, TTFT 50 ms, KV 40 %, nobody waits, 500 tokens/s.
    [T0+900, T0+1800]: saturated — the same 4 requests/s, KV 97 %, the queue grows from 0 to
    ~45, a preemption every 10 s, TTFT mostly queueing (1.5–8 s), 520 tokens/s."""
    for i in range(int(2 * SPAN) + 1):
        ts = T0 + i
        during = i > SPAN
        for k in range(4):
            if during:
                queue = (1.5, 1.8, 2.0, 7.5)[k]
                engine.request(
                    ttft=queue + 0.06, queue=queue, prefill=0.06, e2e=queue + 4.0,
                    prompt=PROMPTS[k],
                )  # fmt: skip
            else:
                engine.request(ttft=0.05, queue=0.004, prefill=0.045, e2e=2.0, prompt=PROMPTS[k])
        engine.tokens += 520.0 if during else 500.0
        if during and i % 10 == 0:
            engine.preemptions += 1
        waiting = (i - SPAN) / 20.0 if during else 0.0
        engine.scrape(
            ts, running=16.0 if during else 8.0, waiting=waiting, kv=0.97 if during else 0.4
        )


def write(store: Store, engines: list[Engine], *, gpu: bool = True) -> None:
    rows = [r for e in engines for r in e.rows]
    ingest.add_rows(
        store,
        "engine_samples",
        pd.DataFrame(rows, columns=["target", "engine", "ts", "metric", "value"]),
    )
    raw = [r for e in engines for r in e.raw]
    ingest.add_rows(
        store,
        "engine_raw_samples",
        pd.DataFrame(raw, columns=["target", "ts", "name", "labels", "value"]),
    )
    if gpu:
        ts = [T0 + 5 * i for i in range(int(2 * SPAN / 5) + 1)]
        ingest.add_rows(
            store,
            "gpu_samples",
            pd.DataFrame(
                {
                    "host": "node-a",
                    "gpu_index": 0,
                    "ts": ts,
                    "mem_used_bytes": 74.0 * GIB,
                    "mem_total_bytes": 80.0 * GIB,
                    "util_gpu": [0.95 if t > T0 + SPAN else 0.6 for t in ts],
                }
            ),
        )


def store_episode(url: str, targets: tuple[str, ...] = (TARGET,), *, gpu: bool = True) -> None:
    """Open the store at ``url`` and write the episode of each target into it."""
    engines = []
    for target in targets:
        engine = Engine(target)
        episode(engine)
        engines.append(engine)
    store = open_store(url)
    try:
        write(store, engines, gpu=gpu)
    finally:
        store.dispose()
