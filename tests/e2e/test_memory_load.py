"""Memory vs load in Debian's chromium: ``/memory?series=…`` opened as a fresh ``servescope ui``'s
first request, on three load levels of one configuration stored with their engine samples,
shows the series' knees, the predicted KV capacity, the chart (its three rows, the predicted
line and both knees drawn) and the table inside the app's frame, with no exception."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from store import ingest
from store.lifecycle import open_store

pytestmark = pytest.mark.e2e

T0 = 1_900_000_000.0
LEVELS = (2, 8, 16)
#: The engine was told 200 blocks of 16 tokens; requests of 256 + 128 tokens hold
#: 256 + 128 / 2 + 8 = 328 tokens on average: the predicted knee is 3,200 / 328 = 9.76 streams.
BLOCKS, INPUT, OUTPUT = 200, 256, 128


def _store(url: str) -> None:
    store = open_store(url)
    try:
        for k, c in enumerate(LEVELS):
            run_id, start = f"e-c{c}", T0 + 1000 * k
            target = "http://sim:8000/metrics"
            ingest.add_run(
                store,
                {
                    "run_id": run_id,
                    "name": f"fixed c={c}",
                    "source": "servescope",
                    "framework": "sim",
                    "model": "llama-3.1-8b",
                    "gpu_name": "H100-SXM-80GB",
                    "gpu_count": 1,
                    "workload": "fixed",
                    "arrival": "concurrency",
                    "concurrency": c,
                    "engine_params": {"num_gpu_blocks": BLOCKS, "max_batch_size": 64},
                    "started_at": start,
                    "ended_at": start + 60,
                    "status": "completed",
                    "client_params": {"collectors": {"targets": [target], "hosts": ["h"]}},
                },
            )
            ts = start + np.arange(0.0, 60.0, 2.0)
            kv = np.full(ts.size, min(c * 0.1, 1.0))
            pre = np.linspace(0, 12.0 if c == 16 else 0.0, ts.size)
            ingest.add_rows(
                store,
                "engine_samples",
                pd.DataFrame(
                    {
                        "target": target,
                        "ts": np.concatenate([ts, ts]),
                        "metric": ["kv_cache_usage"] * ts.size + ["preemptions_total"] * ts.size,
                        "engine": "sim",
                        "value": np.concatenate([kv, pre]),
                    }
                ),
            )
            ingest.add_rows(
                store,
                "gpu_samples",
                pd.DataFrame(
                    {
                        "host": "h",
                        "gpu_index": 0,
                        "ts": ts,
                        "mem_used_bytes": 70.0 * 2**30,
                        "mem_total_bytes": 80.0 * 2**30,
                        "util_gpu": 0.8,
                    }
                ),
            )
            sent = start + np.arange(0.0, 58.0, 0.5)
            ingest.add_requests(
                store,
                pd.DataFrame(
                    {
                        "run_id": run_id,
                        "seq": range(sent.size),
                        "status": "ok",
                        "sent_at": sent,
                        "done_at": sent + 1.5,
                        "input_tokens": INPUT,
                        "output_tokens": OUTPUT,
                        "ttft_ms": 40.0,
                        "tpot_ms": 11.0,
                        "e2e_ms": 1500.0,
                    }
                ),
            )
    finally:
        store.dispose()


def test_a_series_link_shows_memory_against_load(
    tmp_path: Path,
    ui_server: Callable[[str], Any],
    page: Any,
    expect_framed: Callable[[Any, str, str], None],
) -> None:
    from playwright.sync_api import expect

    url = f"duckdb:///{tmp_path / 'memory.duckdb'}"
    _store(url)
    server = ui_server(url)
    link = "/memory?series=" + ",".join(f"e-c{c}" for c in LEVELS)
    page.goto(f"{server.url}{link}")  # the fresh server's first page request
    expect_framed(page, link, "Memory")
    expect(page.get_by_role("heading", name="Memory vs load")).to_be_visible()
    metrics = page.locator('[data-testid="stMetric"]')
    # clean at 8 streams with KV at 80 % (2: 20 %): full at 8 + 0.2 / 0.1 = 10 streams
    expect(metrics.filter(has_text="Measured knee")).to_contain_text("10")
    expect(metrics.filter(has_text="Predicted knee")).to_contain_text("9.76")
    expect(metrics.filter(has_text="Predicted KV capacity")).to_contain_text("3,200 tokens")
    chart = page.locator('[data-testid="stPlotlyChart"]').first
    expect(chart.locator(".gtitle")).to_have_text("Memory against load")
    notes = chart.locator(".annotation-text")
    for text in (
        "peak GPU memory (GiB)",  # the three rows' titles
        "KV-cache usage",
        "preemptions per 1,000 requests",
        "measured knee 10",
        "predicted knee 9.76",
        "KV capacity 3,200 tokens",
    ):
        expect(notes.filter(has_text=re.compile(f"^{re.escape(text)}$"))).to_have_count(1)
    expect(chart.locator(".legendtext").filter(has_text="predicted KV usage")).to_have_count(1)
    expect(page.locator('[data-testid="stDataFrame"]')).to_have_count(1)
    expect(page.locator('[data-testid="stStatusWidget"]')).to_have_count(0)
    shot = os.environ.get("SERVESCOPE_SCREENSHOT")  # to look at the page by eye
    if shot:
        page.screenshot(path=shot, full_page=True)
    exceptions = page.locator('[data-testid="stException"]')
    assert exceptions.count() == 0, exceptions.first.inner_text()
    assert page.locator('[data-testid="stAlertContentError"]').count() == 0
