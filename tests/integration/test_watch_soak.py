"""Soak: the watcher at 4 Hz while another process reads the store every second → zero lost samples.

DuckDB lets one process hold the file at a time, so the reader and the watcher's flushes collide
for real: the writer retries, spools when the lock outlasts its deadline, and re-ingests the
spool. At the end, every row the watcher scraped must be in the store, exactly once.

Duration: ``SERVESCOPE_SOAK_S`` seconds (default 120, as in CI; ``bench/`` runs 10 minutes).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from collectors import watch
from sim.engine import EngineConfig
from sim.server import start_in_thread
from store import ingest, sample_series
from store.lifecycle import open_store

ROOT = Path(__file__).resolve().parents[2]
SOAK_S = float(os.environ.get("SERVESCOPE_SOAK_S", "120"))

READER = """
import sys, time
from store.lifecycle import open_store
url, until = sys.argv[1], float(sys.argv[2])
reads = 0
while time.time() < until:
    store = open_store(url, lock_timeout_s=30)
    store.read_df("SELECT COUNT(*) AS n, MAX(ts) AS last FROM engine_samples")
    store.read_df("SELECT host, MAX(ts) FROM gpu_samples GROUP BY host")
    store.dispose()
    reads += 1
    time.sleep(1.0)  # the reader's own cadence: one read a second
print(reads)
"""


@pytest.mark.slow
@pytest.mark.timeout(int(SOAK_S) + 180)
def test_watcher_at_4hz_with_a_reader_loses_nothing(tmp_path: Path) -> None:
    url = f"duckdb:///{tmp_path / 'soak.duckdb'}"
    spool = tmp_path / "spool"
    store = open_store(url)
    cfg = EngineConfig.from_names("H100-SXM-80GB", "llama-3.1-8b")
    with start_in_thread(cfg, port=0, time_scale=5.0) as sim:
        writer = ingest.BufferedWriter(
            store, flush_interval_s=2.0, spool_dir=spool, background=True
        )
        live = watch.LiveCollection.start(
            metrics_urls=[sim.url], gpu=False, interval_s=0.25, writer=writer
        )
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        reader = subprocess.Popen(
            [sys.executable, "-c", READER, url, str(time.time() + SOAK_S)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            # keep the engine busy so counters and histograms move during the soak
            with httpx.Client(timeout=30) as client:
                while reader.poll() is None:
                    client.post(
                        f"{sim.url}/v1/completions",
                        json={"prompt": "soak " * 40, "max_tokens": 32, "ignore_eos": True},
                    )
            out, err = reader.communicate(timeout=60)
        finally:
            summary = live.stop()
            writer.close()
            if reader.poll() is None:
                reader.kill()
                reader.communicate()
    assert reader.returncode == 0, err
    reads = int(out.strip().splitlines()[-1])
    assert reads >= SOAK_S * 0.5, f"the reader read only {reads} times"
    ingest.ingest_spool(store, spool)  # anything spooled at the very end
    assert not list(spool.glob("*.json")), "spooled batches left behind"
    (src,) = summary.sources
    expected_scrapes = SOAK_S * 4
    assert src.scrapes >= expected_scrapes * 0.8, (src.scrapes, src.missed_ticks)
    assert src.errors == 0, src.last_error
    counts = sample_series.sample_counts(store)
    for table, added in summary.rows_added.items():
        assert counts[table] == added, f"{table}: scraped {added}, stored {counts[table]}"
    # each scrape is stored once: one running-requests sample per scrape
    running = sample_series.engine_series(store, since=0, metrics=["requests_running"])
    assert len(running) == src.scrapes == running["ts"].nunique()
    print(
        f"soak {SOAK_S:.0f} s: {src.scrapes} scrapes, {src.missed_ticks} missed ticks, "
        f"{sum(summary.rows_added.values()):,} rows, {reads} reads, "
        f"{writer.batches_spooled} batches spooled"
    )
    store.dispose()
