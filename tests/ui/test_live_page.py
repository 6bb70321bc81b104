"""AppTest of pages/live.py: empty store, live + stale sources, the on-call panels (windows judged
against ``?slo=``, breaches marked and linked, ``?target=``, the length mix, a range chosen on
the timeline), bad URL parameters as messages, and the figure builders."""

from __future__ import annotations

import base64
import json
import math
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pandas as pd
import pytest
from live_store import BURST, TARGET
from live_store import seed as seed_oncall
from streamlit.testing.v1 import AppTest

from analysis.length_mix import from_buckets
from store import ingest
from store.lifecycle import open_store
from ui import display, live_charts

ROOT = Path(__file__).resolve().parents[2]
PAGE = str(ROOT / "pages" / "live.py")
GIB = 1024**3


def _run(params: dict[str, str] | None = None, state: dict[str, Any] | None = None) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=60)
    for k, v in (params or {}).items():
        at.query_params[k] = v
    for k, v in (state or {}).items():
        at.session_state[k] = v
    at.run()
    assert [e.value for e in at.exception] == []
    return at


def _values(array: Any) -> list[Any]:
    """A trace's array as plotly sent it: a list, or a typed array (dtype + base64 bdata)."""
    if isinstance(array, dict) and "bdata" in array:
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"]).tolist()
    return list(array)


def _timeline(at: AppTest) -> dict[str, Any]:
    """The first chart's spec as sent to the browser."""
    charts = at.get("plotly_chart")
    assert charts, "no chart drawn"
    spec: dict[str, Any] = json.loads(charts[0].proto.spec)
    return spec


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
    _seed(db_url, time.time() + 10)  # the live target stays live while a busy machine renders
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
    assert len(at.info) == 1 and "last recorded span" in at.info[0].value
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


# --- on call ------------------------------------------------------------------------------------


def _markdown(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown)


def test_breaches_against_the_profile_marked_and_linked(db_url: str) -> None:
    now = time.time()
    seed_oncall(db_url, now)
    at = _run({"slo": "interactive-chat", "target": TARGET, "window": "30", "span": "5"})
    assert len(at.error) == 0
    breach_note = next(w.value for w in at.warning if "windows breach" in w.value)
    assert breach_note.startswith("**")
    assert "windows breach interactive" in breach_note
    n = int(breach_note.split()[0].strip("*"))
    # the burst (P99 TTFT ≈ 2.5 s) and the aborted requests: 2 to 4 windows, by the grid
    assert 2 <= n <= 4
    spec = _timeline(at)
    shapes = spec["layout"].get("shapes", [])
    assert len(shapes) == n and all(s["fillcolor"] == "#d62728" for s in shapes)
    names = [d.get("name") for d in spec["data"]]
    assert "SLO P99 TTFT ≤ 0.5 s" in names and names.count("P99") == 3  # TTFT, E2E, queue
    crosses = [d for d in spec["data"] if d.get("name") == "breach"]
    assert len(crosses) == 1 and crosses[0]["yaxis"] == "y"  # on the TTFT row only
    assert all(1.0 < y <= 2.5 for y in _values(crosses[0]["y"]))  # the burst's P99: (1, 2.5]
    # the same time axis: latency, traffic, engine state and GPUs are rows of one figure
    assert {"requests/s", "error rate %", "memory % · node-a / GPU 0"} <= set(names)
    assert any(str(x).startswith("KV % · vllm") for x in names)
    table = _markdown(at)
    links = [part.split(")")[0] for part in table.split("[Investigate](")[1:]]
    assert len(links) == n
    for link in links:
        q = parse_qs(urlsplit(link).query)
        assert q["target"] == [TARGET] and int(q["to"][0]) - int(q["from"][0]) in (30, 31)
    plain = table.replace("\\", "")
    assert "P99 TTFT" in plain and "inside the 1–2.5 s bucket" in plain
    assert "error rate" in plain
    captions = " ".join(c.value for c in at.caption)
    assert "P99 inside the" in captions  # the precision of the newest window
    # the production length mix
    assert "**Prompt length**: P50" in table and "**Output length**: P50" in table
    assert len(at.get("plotly_chart")) == 2
    assert at.query_params["slo"] == "interactive-chat"


def test_another_profile_is_picked_from_the_url(db_url: str) -> None:
    seed_oncall(db_url, time.time())
    at = _run({"slo": "code-completion", "span": "5"})
    captions = " ".join(c.value for c in at.caption)
    assert "P95 TTFT ≤ 200 ms · E2E ≤ 1\\.5 s" in captions
    names = [d.get("name") for d in _timeline(at)["data"]]
    assert "SLO P95 E2E ≤ 1.5 s" in names and "P95" in names
    assert at.selectbox(key="live_slo").value == "code-completion"
    assert at.selectbox(key="live_target").value == "All targets"


def test_a_range_chosen_on_the_timeline_links_to_the_incident_view(db_url: str) -> None:
    now = time.time()
    seed_oncall(db_url, now)
    lo, hi = now - BURST[0], now - BURST[1]
    at = _run({"target": TARGET, "span": "5"}, state={"live_investigate": (lo, hi)})
    link = next(m.value for m in at.markdown if m.value.startswith("[Investigate "))
    path = link.split("](")[1].rstrip(")")
    q = parse_qs(urlsplit(path).query)
    assert urlsplit(path).path == "/incident"
    assert (int(q["from"][0]), int(q["to"][0])) == (math.floor(lo), math.ceil(hi))


def test_choosing_a_profile_writes_the_url(db_url: str) -> None:
    seed_oncall(db_url, time.time())
    at = _run({"span": "5"})
    at.selectbox(key="live_slo").set_value("batch-summarisation").run()
    assert [e.value for e in at.exception] == []
    assert at.query_params["slo"] == "batch-summarisation"
    assert "P90 TTFT ≤ 10 s" in " ".join(c.value for c in at.caption)
    # a second choice keeps the first (the selectors' state is read before the URL)
    at.selectbox(key="live_window").set_value(60).run()
    assert at.query_params["slo"] == "batch-summarisation" and at.query_params["window"] == "60"
    assert "in 60 s windows" in " ".join(c.value for c in at.caption)
    at.selectbox(key="live_target").set_value(TARGET).run()
    assert at.query_params["target"] == TARGET
    assert f"target {TARGET}" in " ".join(c.value for c in at.caption).replace("\\", "")


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"window": "abc"}, "window=abc is not accepted: a whole number of seconds from 5 to 3600"),
        ({"span": "9999"}, "span=9999 is not accepted: a whole number of minutes from 1 to 180"),
        ({"slo": "nope"}, "slo=nope is not an SLO profile of this store; accepted: "),
        ({"target": "http://nowhere"}, "target=http://nowhere is not a watched engine target"),
    ],
)
def test_bad_url_parameters_are_messages(db_url: str, params: dict[str, str], says: str) -> None:
    seed_oncall(db_url, time.time())
    at = _run(params)
    errors = " ".join(e.value for e in at.error)
    plain = errors.replace("\\", "")
    assert says in plain
    assert len(at.get("plotly_chart")) == 0


def test_length_mix_and_selection_builders_are_pure() -> None:
    dist = from_buckets([(128.0, 6.0), (512.0, 9.0), (math.inf, 10.0)])
    fig = live_charts.length_mix_figure([("Prompt length", dist), ("Output length", None)])
    bars = fig.data
    assert len(bars) == 1 and list(bars[0].x) == ["≤128", "128–512", ">512"]
    assert list(bars[0].y) == pytest.approx([60.0, 30.0, 10.0])
    titles = [a.text for a in fig.layout.annotations]
    assert titles == ["Prompt length", "Output length: no requests"]
    box = {"box": [{"x": ["2026-12-02 00:55:00", "2026-12-02 00:54:30.5"]}], "points": []}
    lo, hi = live_charts.selected_range(box) or (0.0, 0.0)
    assert hi - lo == pytest.approx(29.5)
    assert pd.Timestamp(lo, unit="s", tz="UTC") == pd.Timestamp("2026-12-02 00:54:30.5", tz="UTC")
    click = {"box": [], "points": [{"x": "2026-12-02 00:55:00"}]}
    assert live_charts.selected_range(click) == (hi - 0.0, hi)
    assert live_charts.selected_range({"box": [], "points": []}) is None
    assert live_charts.selected_range(None) is None
