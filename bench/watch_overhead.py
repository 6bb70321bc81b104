"""Benchmark: the watcher's CPU cost at 1 Hz over 4 targets. Target: < 5% of one core.

Four sims (vLLM-named /metrics of ~200 samples plus DCGM-style GPU series) run in a separate
process, so that only the watcher's own work is measured: scraping, parsing, normalising,
building rows and flushing them to a DuckDB file every 2 s. CPU time is this process's user +
system time (every thread) over the wall time.

    .venv/bin/python bench/watch_overhead.py [--seconds 60] [--targets 4] [--interval 1]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from collectors import watch  # noqa: E402
from store import sample_series  # noqa: E402
from store.lifecycle import open_store  # noqa: E402

SIMS = """
import sys, threading
from sim.engine import EngineConfig
from sim.server import start_in_thread
cfg = EngineConfig.from_names("H100-SXM-80GB", "llama-3.1-8b")
sims = [start_in_thread(cfg, port=0) for _ in range(int(sys.argv[1]))]
print(" ".join(s.url for s in sims), flush=True)
sys.stdin.read()  # until the benchmark closes our stdin
for s in sims:
    s.stop()
"""


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class NullWriter:
    """Discards rows: isolates the scraping cost from the store's."""

    rows_written = 0
    batches_spooled = 0

    def add(self, table: str, rows: object) -> None:
        return None

    def close(self) -> None:
        return None


def run(seconds: float, targets: int, interval: float, raw: str, null: bool = False) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    sims = subprocess.Popen(
        [sys.executable, "-c", SIMS, str(targets)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert sims.stdout is not None and sims.stdin is not None
    urls = sims.stdout.readline().split()
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"duckdb:///{tmp}/bench.duckdb")
        cpu0, wall0 = _cpu(), time.monotonic()
        live = watch.LiveCollection.start(
            store,
            metrics_urls=urls,
            gpu=False,
            interval_s=interval,
            raw=raw,
            writer=NullWriter() if null else None,
        )
        time.sleep(seconds)  # the measured period
        summary = live.stop()
        cpu, wall = _cpu() - cpu0, time.monotonic() - wall0
        counts = sample_series.sample_counts(store)
        store.dispose()
    sims.stdin.close()
    sims.wait(timeout=30)
    sims.stdout.close()
    scrapes = sum(s.scrapes for s in summary.sources)
    rows = sum(summary.rows_added.values())
    stored = sum(counts.values())
    print(
        f"{'rows discarded, ' if null else ''}raw={raw:<6} {targets} targets @ "
        f"{1 / interval:g} Hz for {wall:.0f} s: "
        f"CPU {cpu:.2f} s = {100 * cpu / wall:.2f}% of one core; {scrapes} scrapes, "
        f"{rows:,} rows ({rows / wall:,.0f}/s), stored {stored:,}, "
        f"missed ticks {sum(s.missed_ticks for s in summary.sources)}, "
        f"errors {sum(s.errors for s in summary.sources)}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--targets", type=int, default=4)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--raw", nargs="+", default=["engine", "none"], choices=watch.RAW_MODES)
    ap.add_argument("--no-store", action="store_true", help="also measure with rows discarded")
    args = ap.parse_args()
    for raw in args.raw:
        run(args.seconds, args.targets, args.interval, raw)
        if args.no_store:
            run(args.seconds, args.targets, args.interval, raw, null=True)
    print("target: < 5% of one core at 1 Hz over 4 targets")


if __name__ == "__main__":
    main()
