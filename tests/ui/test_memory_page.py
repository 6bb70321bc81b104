"""AppTest: the Memory page on an empty store, the shared seeded store and the KV/GPU series of
``test_latency_page.seed_series``; interactions by widget key."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest
from test_latency_page import T0, seed_series

from store import ingest
from store.db import Store

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
    assert _metrics(at)["GPU memory peak"] == "41.3 GiB"  # 40 + 4 × 100 / 300


def test_url_selections_are_restored(db_url: str) -> None:
    seed_series(db_url)
    at = _run(run="c8", overlay="c32,c1", cap="0.8")
    _no_exception(at)
    assert at.multiselect(key="memory_overlay").value == ["c32", "c1"]
    assert at.number_input(key="memory_cap").value == 0.8


def test_aggregates_only_import_says_what_cannot_be_shown(db_url: str) -> None:
    store = Store.open(db_url)
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
