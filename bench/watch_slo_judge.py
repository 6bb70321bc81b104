"""What ``servescope watch --slo`` costs: the scrape side, one window's judgement from the rows in
memory (``collectors.breach_monitor``), and the same window read back from the store through
``services.views.traffic.traffic`` (the alternative the monitor does not take).

The scrapes are the real vLLM capture in ``tests/fixtures/vllm/*.prom`` (parsed, turned into rows
by ``collectors.watch.ScrapeSource.rows`` as ``watch`` does, default ``--raw engine``), its values
advanced second by second: every histogram spreads 10 requests/s evenly over 0–5 s (so every
bucket moves every scrape, the worst case), counters grow, finished requests are 5 % aborts.

    .venv/bin/python bench/watch_slo_judge.py [--minutes 60] [--window 60] [--traffic-windows 10]

Prints: rows per scrape; the watcher-side cost of handing a scrape to the monitor (µs, median);
the judgement of each window from memory (ms, median and max); ``traffic()`` over one window
of the store (ms, median and max); and the monitor's verdicts (windows judged, breaches).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.slo import SloProfile  # noqa: E402
from collectors.breach_monitor import BreachMonitor  # noqa: E402
from collectors.prometheus_text import Exposition, Sample, parse  # noqa: E402
from collectors.watch import ScrapeSource  # noqa: E402
from services.views.traffic import traffic  # noqa: E402
from store.ingest import BufferedWriter  # noqa: E402
from store.lifecycle import open_store  # noqa: E402

CAPTURE = ROOT / "tests/fixtures/vllm/metrics_v1_full_qwen2.5-0.5b_k8s-ai-conformance_kops.prom"
RATE = 10.0


def page_at(samples: list[Sample], t: float) -> Exposition:
    """The capture with its values at ``t`` seconds of traffic."""
    n = RATE * t
    out = []
    for s in samples:
        labels = dict(s.labels)
        if s.name.endswith("_bucket"):
            le = float(labels["le"])
            value = n * (1.0 if math.isinf(le) else min(1.0, le / 5.0))
        elif s.name.endswith("_count"):
            value = n
        elif s.name.endswith("_sum"):
            value = n * 2.5
        elif s.name == "vllm:request_success_total":
            value = {"stop": 0.95 * n, "abort": 0.05 * n}.get(labels.get("finished_reason", ""), 0)
        elif s.name.endswith("_total"):
            value = t
        else:
            value = s.value if math.isfinite(s.value) else 0.0
        out.append(Sample(s.name, s.labels, value))
    return Exposition(samples=out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=int, default=60)
    ap.add_argument("--window", type=float, default=60.0)
    ap.add_argument("--traffic-windows", type=int, default=10)
    args = ap.parse_args()

    samples = [s for s in parse(CAPTURE.read_text()).samples if not s.name.endswith("_created")]
    source = ScrapeSource("http://vllm-0:8000/metrics")
    t0 = math.floor(time.time() / 3600) * 3600 - args.minutes * 60
    scrapes = [source.rows(page_at(samples, k), t0 + k) for k in range(args.minutes * 60 + 1)]
    per_scrape = sum(len(r) for r in scrapes[1].values())
    print(f"{len(scrapes)} scrapes, {per_scrape} rows each (all tables)")

    profile = SloProfile(name="chat", percentile=99, ttft_ms=500.0, e2e_ms=20_000.0)
    judged: list[float] = []
    monitor = BreachMonitor(profile, window_s=args.window, on_breach=lambda b: None)
    judge = monitor._judge

    def timed(*a: object) -> None:
        start = time.perf_counter()
        judge(*a)  # type: ignore[arg-type]
        judged.append(time.perf_counter() - start)

    setattr(monitor, "_judge", timed)  # noqa: B010 (timing the private step)
    handed: list[float] = []
    monitor.start()
    for rows in scrapes:
        start = time.perf_counter()
        for table, batch in sorted(rows.items(), key=lambda kv: kv[0] != "engine_raw_samples"):
            monitor.add(table, batch)
        handed.append(time.perf_counter() - start)
    monitor.stop()
    print(
        f"watcher side (filter and enqueue one scrape): {statistics.median(handed) * 1e6:.0f} µs "
        "median"
    )
    print(
        f"judged from memory: {len(judged)} windows of {args.window:g} s, "
        f"{statistics.median(judged) * 1000:.1f} ms median, {max(judged) * 1000:.1f} ms max; "
        f"{monitor.windows_judged} judged, {monitor.breaches} breach(es)"
    )

    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"duckdb:///{Path(tmp) / 'bench.duckdb'}")
        writer = BufferedWriter(store, background=False)
        for rows in scrapes:
            for table, batch in rows.items():
                writer.add(table, batch)
        writer.close()
        took = []
        for k in range(min(args.traffic_windows, len(judged))):
            w0 = t0 + args.window * (k + 1)
            start = time.perf_counter()
            traffic(store, targets=None, start=w0, end=w0 + args.window, window_s=args.window)
            took.append(time.perf_counter() - start)
        store.dispose()
    print(
        f"traffic() over one window from the store: {statistics.median(took) * 1000:.0f} ms "
        f"median, {max(took) * 1000:.0f} ms max ({len(took)} windows)"
    )


if __name__ == "__main__":
    main()
