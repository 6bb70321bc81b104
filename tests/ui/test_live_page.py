"""AppTest of pages/live.py: empty store, live + stale sources, and the figure builders."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
from streamlit.testing.v1 import AppTest

from store import ingest
from store.lifecycle import open_store
from ui import display, live_charts

ROOT = Path(__file__).resolve().parents[2]
PAGE = str(ROOT / "pages" / "live.py")
GIB = 1024**3


def _run() -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    assert [e.value for e in at.exception] == []
    return at


def _seed(url: str, now: float) -> None:
    """A live vLLM target (1 Hz, last 60 s), a target that stopped 10 minutes ago, and two
    GPUs (one live, one stale)."""
    live, dead = "http://10.0.0.1:8000/metrics", "http://10.0.0.2:30000/metrics"
    rows = []
    for i in range(60):
        ts = now - 59 + i
        rows += [
            {
                "target": live,
                "ts": ts,
                "metric": "requests_running",
                "engine": "vllm",
                "value": 7.0,
            },
            {
                "target": live,
                "ts": ts,
                "metric": "requests_waiting",
                "engine": "vllm",
                "value": 2.0,
            },
            {"target": live, "ts": ts, "metric": "kv_cache_usage", "engine": "vllm", "value": 0.42},
            {
                "target": live,
                "ts": ts,
                "metric": "generation_tokens_total",
                "engine": "vllm",
                "value": 1000.0 + 250.0 * i,
            },
            {
                "target": live,
                "ts": ts,
                "metric": "preemptions_total",
                "engine": "vllm",
                "value": i / 10,
            },
        ]
    for i in range(30):
        ts = now - 600 - 30 + i
        rows.append(
            {"target": dead, "ts": ts, "metric": "requests_running", "engine": "sglang", "value": 3}
        )
    gpus = []
    for i in range(60):
        gpus.append(
            {
                "host": "node-a",
                "gpu_index": 0,
                "ts": now - 59 + i,
                "gpu_name": "NVIDIA H100",
                "mem_used_bytes": 70.0 * GIB,
                "mem_total_bytes": 80.0 * GIB,
                "util_gpu": 0.9,
                "power_w": 600.0,
                "temp_c": 70.0,
                "source": "nvml",
            }
        )
        gpus.append(
            {
                "host": "node-b",
                "gpu_index": 0,
                "ts": now - 900 + i,
                "gpu_name": "NVIDIA L4",
                "mem_used_bytes": 1.0 * GIB,
                "mem_total_bytes": 24.0 * GIB,
                "util_gpu": 0.1,
                "source": "dcgm",
            }
        )
    store = open_store(url)
    try:
        ingest.add_rows(store, "engine_samples", rows)
        ingest.add_rows(store, "gpu_samples", gpus)
    finally:
        store.dispose()


def test_empty_store_names_the_commands(db_url: str) -> None:
    at = _run()
    assert len(at.info) == 1
    commands = "\n".join(c.value for c in at.code)
    assert "servescope watch --metrics" in commands
    assert "servescope demo" in commands
    assert len(at.metric) == 0


def test_live_and_stale_sources(db_url: str) -> None:
    _seed(db_url, time.time())
    at = _run()
    # two targets × six figures; the live vLLM target first (sorted by URL)
    values = [m.value for m in at.metric]
    assert len(values) == 12
    assert values[:3] == ["7", "2", "42.0 %"]
    assert values[4] == "250"  # generation tokens/s: +250 per 1 s scrape
    assert values[3] == "0.10"  # preemptions/s: +0.1 per 1 s scrape
    # the SGLang target stopped 10 minutes ago: marked stale, figures shown as they were
    assert len(at.warning) == 1
    assert display.md_escape("http://10.0.0.2:30000/metrics") in at.warning[0].value
    assert "stale" in at.warning[0].value and "10 min ago" in at.warning[0].value
    assert values[6] == "3"
    gpu = next(df.value for df in at.dataframe if "status" in df.value.columns)
    assert dict(zip(gpu["host"], gpu["status"], strict=True)) == {
        "node-a": "live",
        "node-b": "stale",
    }
    assert gpu.loc[gpu["host"] == "node-a", "memory used (GiB)"].iloc[0] == 70.0


def test_old_data_only_shows_the_last_recorded_window(db_url: str) -> None:
    _seed(db_url, time.time() - 86_400)
    at = _run()
    assert len(at.info) == 1 and "last recorded window" in at.info[0].value
    assert len(at.warning) == 2  # both targets are stale a day later
    assert [m.value for m in at.metric][:2] == ["7", "2"]


def test_figure_builders_are_pure() -> None:
    series = pd.DataFrame(
        {
            "target": ["a", "a", "b"],
            "ts": [0.0, 1.0, 0.0],
            "metric": ["kv_cache_usage"] * 3,
            "value": [0.5, 0.6, 0.1],
        }
    )
    fig = live_charts.engine_metric_chart(
        series, "kv_cache_usage", title="KV", y_title="%", scale=100.0, stale={"b"}
    )
    traces = fig.data
    assert [t.name for t in traces] == ["a", "b (stale)"]
    assert list(traces[0].y) == [50.0, 60.0]
    assert traces[1].line.dash == "dot"
    empty = live_charts.engine_metric_chart(series.iloc[0:0], "x", title="T", y_title="y")
    assert empty.to_dict()["layout"]["title"]["text"] == "T: no samples"
    gpus = pd.DataFrame(
        {
            "host": ["h"],
            "gpu_index": [0],
            "ts": [0.0],
            "mem_used_bytes": [2.0 * GIB],
            "mem_total_bytes": [8.0 * GIB],
            "util_gpu": [0.25],
        }
    )
    mem = live_charts.gpu_memory_chart(gpus).data
    assert list(mem[0].y) == [2.0] and list(mem[1].y) == [8.0, 8.0]
    util = live_charts.gpu_util_chart(gpus).data
    assert list(util[0].y) == [25.0]
