"""AppTest: the Memory page on an empty store, the shared seeded store and the KV/GPU series of
``test_latency_page.seed_series``; interactions by widget key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from streamlit.testing.v1 import AppTest
from test_latency_page import GIB, LEVEL_S, T0, _engine, _gpu, _run_row, seed_series

from store import ingest
from store.lifecycle import open_store

ROOT = Path(__file__).resolve().parents[2]
PAGE = str(ROOT / "pages" / "memory.py")
TIMEOUT = 60


def _run(**query: str) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT)
    for key, value in query.items():
        at.query_params[key] = value
    return at.run()


def _no_exception(at: AppTest) -> None:
    assert [e.value for e in at.exception] == []
    assert [e.value for e in at.error] == []


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_empty_store_says_which_command_fills_it(db_url: str) -> None:
    at = _run()
    _no_exception(at)
    assert "servescope demo" in "\n".join(c.value for c in at.code)


def test_run_without_samples_says_how_to_collect_them(seeded_url: str) -> None:
    at = _run(run="run-sim")
    _no_exception(at)
    assert any("No engine or GPU samples" in i.value for i in at.info)
    assert any("--dcgm" in i.value for i in at.info)


def test_leaking_run_shows_timeline_headroom_and_warnings(db_url: str) -> None:
    seed_series(db_url)
    at = _run(run="c8")
    _no_exception(at)
    m = _metrics(at)
    assert m["GPU memory peak"] == "44.0 GiB"  # 40 → 44 GiB over the run
    assert m["Headroom to cap"] == "+28.0 GiB"  # 0.9 × 80 − 44
    assert m["KV usage peak"] == "51%"
    assert m["Preemptions"] == "2"
    assert m["GPU memory slope"].endswith("↑")
    warnings = " ".join(w.value for w in at.warning)
    assert "GPU memory rises while KV\\-cache usage is flat" in warnings
    assert "Preemptions while KV\\-cache usage is below full" in warnings
    assert len(at.get("plotly_chart")) == 1


def test_a_29_second_run_shows_no_slopes_but_the_window_a_trend_needs(db_url: str) -> None:
    """Issue 10 item 12: a 29 s run showed "TTFT P50 slope −182,356.2 ms/h ↓"."""
    t0 = T0 + 5000
    store = open_store(db_url)
    try:
        ingest.add_run(store, _run_row("short", 8, t0, t0 + 30))
        sent = t0 + np.arange(0.0, 30.0, 0.25)
        ttft = 6000.0 - 50.7 * (sent - t0)  # falling 1.5 s in 30 s: "−182,520 ms/h" if judged
        ingest.add_requests(
            store,
            pd.DataFrame(
                {
                    "run_id": "short",
                    "seq": range(sent.size),
                    "status": "ok",
                    "sent_at": sent,
                    "done_at": sent + 7.0,
                    "input_tokens": 500,
                    "output_tokens": 50,
                    "ttft_ms": ttft,
                    "tpot_ms": 20.0,
                    "e2e_ms": ttft + 1000.0,
                }
            ),
        )
        ts = t0 + np.arange(0.0, 30.0, 1.0)
        _engine(store, ts, kv=0.3 + 0 * ts, waiting=0 * ts, preempt=0 * ts, running=8 + 0 * ts)
        _gpu(store, ts, used=(40 + (ts - t0) / 30) * GIB, util=0.7)
    finally:
        store.dispose()
    at = _run(run="short")
    _no_exception(at)
    m = _metrics(at)
    assert m["GPU memory slope"] == "too short to judge"
    assert m["TTFT P50 slope"] == "too short to judge"
    needs = [c.value for c in at.caption if c.value.startswith("needs ≥")]
    # GPU samples at 0 … 29 s; TTFT P50 per time window, the last window starting at 28 s
    assert needs == ["needs ≥ 10 min of data, have 29 s", "needs ≥ 10 min of data, have 28 s"]


def test_a_long_run_shows_its_slopes(db_url: str) -> None:
    seed_series(db_url)  # c8: LEVEL_S, longer than the 10 minutes a trend needs
    assert LEVEL_S >= 600
    at = _run(run="c8")
    _no_exception(at)
    m = _metrics(at)
    assert m["GPU memory slope"].endswith("MiB/h ↑")  # 4 GiB over 12 min: +20,480 MiB/h
    assert m["GPU memory slope"].startswith("+20,4")
    assert m["TTFT P50 slope"] != "too short to judge"
    assert not [c.value for c in at.caption if c.value.startswith("needs ≥")]


def test_saturated_run_has_no_leak_warning(db_url: str) -> None:
    seed_series(db_url)
    at = _run(run="c32")
    _no_exception(at)
    m = _metrics(at)
    assert m["KV usage peak"] == "97%"
    assert m["Headroom to cap"] == "+2.0 GiB"  # 0.9 × 80 − 70
    assert not any("rises while KV" in w.value for w in at.warning)


def test_cap_overlay_and_window_update_the_url(db_url: str) -> None:
    seed_series(db_url)
    at = _run(run="c8")
    at.number_input(key="memory_cap").set_value(0.5).run()
    _no_exception(at)
    assert at.query_params["cap"] in ("0.5", ["0.5"])
    assert _metrics(at)["Headroom to cap"] == "-4.0 GiB"  # 0.5 × 80 − 44: over the cap
    at.multiselect(key="memory_overlay").select("c32").run()
    _no_exception(at)
    assert at.query_params["overlay"] in ("c32", ["c32"])
    assert len(at.get("plotly_chart")) == 2
    at.slider(key="memory_window").set_value((0.0, 100.0)).run()
    _no_exception(at)
    assert at.query_params["window"] in ("0-100", ["0-100"])
    assert _metrics(at)["GPU memory peak"] == "40.6 GiB"  # 40 + 4 × 100 / LEVEL_S (720)


def test_url_selections_are_restored(db_url: str) -> None:
    seed_series(db_url)
    at = _run(run="c8", overlay="c32,c1", cap="0.8")
    _no_exception(at)
    assert at.multiselect(key="memory_overlay").value == ["c32", "c1"]
    assert at.number_input(key="memory_cap").value == 0.8


def test_aggregates_only_import_says_what_cannot_be_shown(db_url: str) -> None:
    store = open_store(db_url)
    try:
        ingest.add_run(
            store,
            {
                "run_id": "agg",
                "source": "vllm-bench",
                "started_at": T0,
                "duration_s": 60.0,
                "ended_at": T0 + 60,
                "tool_summary": {"aggregates_only": True},
            },
        )
    finally:
        store.dispose()
    at = _run(run="agg")
    _no_exception(at)
    assert any("latency trend cannot be computed" in w.value for w in at.warning)


# --- Memory vs load ---------------------------------------------------------------------------


def _seed_c1_samples(url: str) -> None:
    """Engine samples for ``c1`` (seed_series gives it none): KV at most 30 %, no preemption."""
    store = open_store(url)
    try:
        ts = T0 + np.arange(0.0, 200.0, 10.0)
        _engine(
            store,
            ts,
            kv=0.1 + 0.2 * (ts - T0) / 190,
            waiting=0 * ts,
            preempt=0 * ts,
            running=1 + 0 * ts,
        )
    finally:
        store.dispose()


def test_series_url_plots_memory_against_load(db_url: str) -> None:
    seed_series(db_url)
    _seed_c1_samples(db_url)
    at = _run(series="c1,c8,c32")
    _no_exception(at)
    m = _metrics(at)
    # c1 clean with KV at most 30 %, c8 preempts: KV would be full at 1 / 0.30 = 3.33 streams
    assert m["Measured knee"] == "3.33"
    assert "Predicted knee" not in m  # the seeded runs name no GPU: no prediction
    assert any("no prediction" in c.value and "not in the catalogue" in c.value for c in at.caption)
    assert at.multiselect(key="memory_series").value == ["c1", "c8", "c32"]
    table = at.dataframe[0].value
    assert list(table["load"]) == [1.0, 8.0, 32.0]
    assert list(table["preemptions"].fillna(-1)) == [0.0, 2.0, 71.0]
    assert table["per 1,000 requests"].iloc[1] == round(2 / 1200 * 1000, 2)
    # the chart of the series and the over-time chart of its highest-load run
    assert len(at.get("plotly_chart")) == 2
    assert _metrics(at)["KV usage peak"] == "97%"  # c32's


def test_a_run_offers_the_runs_like_it_as_a_series(db_url: str) -> None:
    seed_series(db_url)
    at = _run(run="c8")
    _no_exception(at)
    assert any("3 runs share this run's configuration" in c.value for c in at.caption)
    at.button(key="memory_show_series").click().run()
    _no_exception(at)
    assert at.query_params["series"] in ("c1,c8,c32", ["c1,c8,c32"])
    assert "Measured knee" in _metrics(at)


def test_one_run_says_what_fills_memory_vs_load(db_url: str) -> None:
    seed_series(db_url)
    at = _run(series="c8,ghost")
    _no_exception(at)
    text = " ".join(i.value for i in at.info)
    assert "servescope sweep" in text and "--concurrency 1,8,32" in text
    assert any("ghost" in c.value and "not in the store" in c.value for c in at.caption)


def test_a_sweep_link_offers_its_points(db_url: str) -> None:
    """Sweep s1: points b8 and b32 (max_batch_size), each at rates 1 and 2 req/s."""
    store = open_store(db_url)
    try:
        for p, batch in (("b8", 8), ("b32", 32)):
            for rate in (1.0, 2.0):
                row = _run_row(f"{p}-r{rate:g}", 1, T0 + 9000 + 100 * rate, T0 + 9060 + 100 * rate)
                row |= {
                    "name": f"{p} {rate:g}/s",
                    "arrival": "poisson",
                    "concurrency": None,
                    "target_rate": rate,
                    "sweep_id": "s1",
                    "engine_params": {"max_batch_size": batch},
                    "client_params": {"sweep_point": {"sweep_id": "s1", "point_id": p}},
                }
                ingest.add_run(store, row)
    finally:
        store.dispose()
    at = _run(sweep="s1", point="b32")
    _no_exception(at)
    box = at.selectbox(key="memory_point")
    assert box.value == "b32" and set(box.options) == {
        "max_batch_size=8 (2 runs)",
        "max_batch_size=32 (2 runs)",
    }
    assert list(at.dataframe[0].value["run"]) == ["b32 1/s", "b32 2/s"]
    assert list(at.dataframe[0].value["load"]) == [1.0, 2.0]
    box.set_value("b8").run()
    _no_exception(at)
    assert at.query_params["point"] in ("b8", ["b8"])
    assert list(at.dataframe[0].value["run"]) == ["b8 1/s", "b8 2/s"]
