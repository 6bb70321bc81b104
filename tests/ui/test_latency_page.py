"""AppTest: the Latency page on an empty store, the shared seeded store, and a store with a
three-level series whose top level saturates its KV cache (engine and GPU samples included)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from streamlit.testing.v1 import AppTest

from store import ingest
from store.db import Store
from store.lifecycle import open_store

ROOT = Path(__file__).resolve().parents[2]
PAGE = str(ROOT / "pages" / "latency.py")
TIMEOUT = 60
T0 = 1_800_000_000.0
#: c8's and c32's length: longer than the 10 minutes a trend needs (analysis.diagnose).
LEVEL_S = 720.0
TARGET = "http://sim:8000/metrics"
HOST = "sim-host"
GIB = 2**30


def _run(**query: str) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT)
    for key, value in query.items():
        at.query_params[key] = value
    return at.run()


def _no_exception(at: AppTest) -> None:
    assert [e.value for e in at.exception] == []
    assert [e.value for e in at.error] == []


def _run_row(run_id: str, concurrency: int, start: float, end: float) -> dict[str, object]:
    return {
        "run_id": run_id,
        "name": f"mixed c={concurrency}",
        "source": "servescope",
        "framework": "sim",
        "model": "llama-3.1-8b",
        "endpoint": "http://sim:8000",
        "workload": "mixed",
        "arrival": "concurrency",
        "concurrency": concurrency,
        "gpu_count": 1,
        "started_at": start,
        "ended_at": end,
        "status": "completed",
        "client_bound": False,
        "client_params": {
            "bench_id": "b1",
            "collectors": {"targets": [TARGET], "hosts": [HOST]},
        },
    }


def seed_series(url: str) -> None:
    """Three load levels of one bench invocation (bench_id b1), each with its engine and GPU
    samples:

    - ``c1`` (100 s): one request at a time; TTFT = 10 ms + 0.05 ms × input tokens exactly.
    - ``c8`` (LEVEL_S): KV usage flat at 50 %, GPU memory rising 40 → 44 GiB of 80 (a leak),
      2 preemptions at 50 % KV (fragmentation); healthy latency.
    - ``c32`` (LEVEL_S): 80 % short (100–200 tokens) and 20 % long (8,000) prompts; KV ≥ 95 %
      from 30 s on, the queue growing 0 → 30, preemptions; short requests' TTFT blown up by
      head-of-line blocking; TTFT rising over the run; throughput ≈ c8's (a plateau).
    """
    rng = np.random.default_rng(7)
    store = open_store(url)
    try:
        # c1 ----------------------------------------------------------------------------
        t1 = T0
        ingest.add_run(store, _run_row("c1", 1, t1, t1 + 200))
        n = 100
        inp = rng.integers(100, 4000, n)
        ttft = 10.0 + 0.05 * inp
        ingest.add_requests(
            store,
            pd.DataFrame(
                {
                    "run_id": "c1",
                    "seq": range(n),
                    "status": "ok",
                    "sent_at": t1 + np.arange(n) * 2.0,
                    "done_at": t1 + np.arange(n) * 2.0 + 1.0,
                    "input_tokens": inp,
                    "output_tokens": 100,
                    "ttft_ms": ttft,
                    "tpot_ms": 10.0,
                    "e2e_ms": ttft + 990.0,
                }
            ),
        )
        # c8: healthy latency, a leak ----------------------------------------------------
        t8 = T0 + 1000
        ingest.add_run(store, _run_row("c8", 8, t8, t8 + LEVEL_S))
        n = 1200
        sent = t8 + np.sort(rng.uniform(0, LEVEL_S - 2, n))
        inp = rng.integers(100, 2000, n)
        ttft = 20.0 + 0.05 * inp + rng.uniform(0, 5, n)
        ingest.add_requests(
            store,
            pd.DataFrame(
                {
                    "run_id": "c8",
                    "seq": range(n),
                    "status": "ok",
                    "sent_at": sent,
                    "done_at": sent + 2.0,
                    "input_tokens": inp,
                    "output_tokens": 200,
                    "ttft_ms": ttft,
                    "tpot_ms": 9.0,
                    "e2e_ms": ttft + 1791.0,
                }
            ),
        )
        ts = t8 + np.arange(0, LEVEL_S, 1.0)
        _engine(store, ts, kv=0.5 + rng.uniform(-0.01, 0.01, ts.size), waiting=0 * ts,
                preempt=np.where(ts > t8 + 150, 2.0, 0.0), running=8 + 0 * ts)  # fmt: skip
        _gpu(store, ts, used=(40 + 4 * (ts - t8) / LEVEL_S) * GIB, util=0.7)
        # c32: saturated -------------------------------------------------------------------
        t32 = T0 + 2000
        ingest.add_run(store, _run_row("c32", 32, t32, t32 + LEVEL_S))
        n = 1200
        sent = t32 + np.sort(rng.uniform(0, LEVEL_S - 2, n))
        long_ = rng.uniform(0, 1, n) < 0.2
        inp = np.where(long_, 8000, rng.integers(100, 200, n))
        progress = (sent - t32) / LEVEL_S
        blocked = rng.uniform(0, 1, n) < 0.05
        ttft = 30.0 + 0.05 * inp + 200 * progress + np.where(blocked, 1500.0, 0.0)
        ingest.add_requests(
            store,
            pd.DataFrame(
                {
                    "run_id": "c32",
                    "seq": range(n),
                    "status": ["ok"] * (n - 3) + ["error"] * 3,
                    "sent_at": sent,
                    "done_at": sent + 8.0,
                    "input_tokens": inp,
                    "output_tokens": 52,
                    "ttft_ms": ttft,
                    "tpot_ms": 40.0,
                    "e2e_ms": ttft + 2040.0,
                }
            ),
        )
        ts = t32 + np.arange(0, LEVEL_S, 1.0)
        kv = np.where(ts < t32 + 30, 0.5 + 0.45 * (ts - t32) / 30, 0.97)
        _engine(store, ts, kv=kv, waiting=np.floor(30 * (ts - t32) / LEVEL_S),
                preempt=np.floor((ts - t32) / 10), running=32 + 0 * ts)  # fmt: skip
        _gpu(store, ts, used=70 * GIB + 0 * ts, util=0.97)
    finally:
        store.dispose()


def _engine(
    store: Store,
    ts: np.ndarray,
    *,
    kv: np.ndarray,
    waiting: np.ndarray,
    preempt: np.ndarray,
    running: np.ndarray,
) -> None:
    frames = [
        pd.DataFrame({"target": TARGET, "ts": ts, "metric": m, "engine": "sim", "value": v})
        for m, v in (
            ("kv_cache_usage", kv),
            ("requests_waiting", waiting),
            ("preemptions_total", preempt),
            ("requests_running", running),
        )
    ]
    ingest.add_rows(store, "engine_samples", pd.concat(frames, ignore_index=True))


def _gpu(store: Store, ts: np.ndarray, *, used: np.ndarray, util: float) -> None:
    ingest.add_rows(
        store,
        "gpu_samples",
        pd.DataFrame(
            {
                "host": HOST,
                "gpu_index": 0,
                "ts": ts,
                "mem_used_bytes": used,
                "mem_total_bytes": 80.0 * GIB,
                "util_gpu": util,
                "source": "sim",
            }
        ),
    )


# --- tests ------------------------------------------------------------------------------------


def test_empty_store_says_which_command_fills_it(db_url: str) -> None:
    at = _run()
    _no_exception(at)
    assert "servescope demo" in "\n".join(c.value for c in at.code)
    assert len(at.dataframe) == 0


def test_seeded_store_shows_buckets_and_no_issue(seeded_url: str) -> None:
    at = _run(run="run-sim")
    _no_exception(at)
    table = next(d.value for d in at.dataframe if "P99 confidence" in d.value.columns)
    ttft = table[table["metric"] == "TTFT"]
    assert ttft["bucket"].tolist() == ["<256"]
    assert ttft["samples"].tolist() == [150]  # ok requests only (152 sent)
    assert ttft["P50"].tolist() == [94.5]  # TTFT 20..169 ms: median 94.5
    assert ttft["P99 confidence"].tolist() == ["ok"]
    assert set(table["metric"]) == {"TTFT"}  # the shown metric only
    assert [s.value for s in at.success] == ["No issue found by the four rules."]
    at.selectbox(key="latency_metric").select("itl_ms").run()
    _no_exception(at)
    assert at.query_params["metric"] in ("itl_ms", ["itl_ms"])
    table = next(d.value for d in at.dataframe if "P99 confidence" in d.value.columns)
    assert table["metric"].tolist() == ["ITL"]
    assert table["samples"].tolist() == [450]  # 3 gaps × 150 ok requests
    assert table["P50"].tolist() == [5.0]


def test_import_without_send_times_still_shows_buckets(seeded_url: str) -> None:
    at = _run(run="run-import")
    _no_exception(at)
    table = next(d.value for d in at.dataframe if "P99 confidence" in d.value.columns)
    ttft = table[table["metric"] == "TTFT"]
    assert ttft["bucket"].tolist() == ["256–1k"]
    assert ttft["P99 confidence"].iloc[0].startswith("low")
    assert any("no send times" in i.value for i in at.info)


def test_aggregates_only_import_says_what_cannot_be_shown(db_url: str) -> None:
    store = open_store(db_url)
    try:
        ingest.add_run(
            store,
            {
                "run_id": "agg",
                "source": "vllm-bench",
                "started_at": T0,
                "tool_summary": {"aggregates_only": True, "mean_ttft_ms": 12.5},
            },
        )
    finally:
        store.dispose()
    at = _run(run="agg")
    _no_exception(at)
    assert len(at.warning) == 1
    assert "no per-request rows" in at.warning[0].value
    assert "cannot be computed" in at.warning[0].value


def test_saturated_run_fires_every_rule_with_evidence(db_url: str) -> None:
    seed_series(db_url)
    at = _run(run="c32")
    _no_exception(at)
    titles = [m.value for m in at.markdown if m.value.startswith("**")]
    rules = sorted(t[2] for t in titles)
    assert rules == ["1", "2", "3", "4"], titles
    assert any("GPU\\-bound" in t for t in titles)
    # the slowest requests carry the engine state when they arrived
    slow = next(d.value for d in at.dataframe if "in flight (run)" in d.value.columns)
    assert len(slow) == 20
    assert slow["TTFT ms"].is_monotonic_decreasing
    assert slow["KV usage"].notna().all()
    assert (slow["running"] == 32).all()
    assert (slow["in flight (run)"] > 0).all()


def test_healthy_level_finds_no_issue_and_fits_prefill(db_url: str) -> None:
    seed_series(db_url)
    at = _run(run="c1")
    _no_exception(at)
    captions = " ".join(c.value for c in at.caption)
    assert "+ 50.00 ms per 1k input tokens" in captions  # 0.05 ms/token, exact data
    assert "Prefill ≈ 10.0 ms" in captions


def test_widgets_update_the_url(db_url: str) -> None:
    seed_series(db_url)
    at = _run(run="c32")
    at.text_input(key="latency_edges").input("1k,4k").run()
    _no_exception(at)
    assert at.query_params["edges"] in ("1k,4k", ["1k,4k"])
    table = next(d.value for d in at.dataframe if "P99 confidence" in d.value.columns)
    assert set(table["bucket"]) == {"<1k", "≥4k"}
    at.radio(key="latency_by").set_value("output").run()
    _no_exception(at)
    assert at.query_params["by"] in ("output", ["output"])
    at.number_input(key="latency_top").set_value(5).run()
    slow = next(d.value for d in at.dataframe if "in flight (run)" in d.value.columns)
    assert len(slow) == 5
    at.slider(key="latency_window").set_value((0.0, 60.0)).run()
    _no_exception(at)
    assert at.query_params["window"] in ("0-60", ["0-60"])


def test_url_selections_are_restored(db_url: str) -> None:
    seed_series(db_url)
    at = _run(run="c32", edges="4k", window="0-100", top="3", metric="e2e_ms")
    _no_exception(at)
    assert at.text_input(key="latency_edges").value == "4k"
    assert at.slider(key="latency_window").value == (0.0, 100.0)
    assert at.selectbox(key="latency_metric").value == "e2e_ms"
    slow = next(d.value for d in at.dataframe if "in flight (run)" in d.value.columns)
    assert len(slow) == 3


def test_bad_edges_are_reported_not_raised(db_url: str) -> None:
    seed_series(db_url)
    at = _run(run="c1", edges="4k,1k")
    assert [e.value for e in at.exception] == []
    assert any("not strictly increasing" in e.value for e in at.error)
