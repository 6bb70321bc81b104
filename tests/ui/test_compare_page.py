"""AppTest: the Compare page on an empty, a seeded and an aggregate-only store; interactions by
widget key."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from services.views import compare as compare_views
from store import catalog, ingest
from store.lifecycle import open_store

PAGE = str(Path(__file__).resolve().parents[2] / "pages" / "compare.py")
TIMEOUT = 60


def _run(**query: str) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT)
    for key, value in query.items():
        at.query_params[key] = value
    return at.run()


def _ok(at: AppTest) -> None:
    assert [e.value for e in at.exception] == []


#: A column only each table has (AppTest does not expose a dataframe's key).
_MARKERS = {
    "compare_runs_table": "SLO",
    "compare_pct_table": "P99 confidence",
    "compare_capacity_table": "capacity (measured)",
    "compare_diff_table": "95% CI",
}


def _tables(at: AppTest, key: str) -> list[pd.DataFrame]:
    return [d.value for d in at.dataframe if _MARKERS[key] in d.value.columns]


def _table(at: AppTest, key: str) -> pd.DataFrame:
    found = _tables(at, key)
    assert len(found) == 1, f"no single table {key!r}"
    return found[0]


def _qp(at: AppTest, name: str) -> str:
    value = at.query_params[name]
    return value[0] if isinstance(value, list) else value


def _add_aggregates_only(url: str) -> None:
    store = open_store(url)
    try:
        ingest.add_run(
            store,
            {
                "run_id": "run-agg",
                "name": "guide *agg*",
                "source": "guidellm",
                "framework": "vllm",
                "gpu_count": 1,
                "arrival": "constant",
                "target_rate": 2.0,
                "started_at": 1_650_000_000.0,
                "tool_summary": {
                    "aggregates_only": True,
                    "metrics": {
                        "ttft_ms": {"p50": 40.0, "p99": 90.0},
                        "output_throughput": 300.0,
                        "completed": 99,
                        "failed": 1,
                    },
                },
            },
        )
    finally:
        store.dispose()


def test_empty_store_says_which_command_fills_it(db_url: str) -> None:
    at = _run()
    _ok(at)
    assert "servescope demo" in "\n".join(c.value for c in at.code)
    assert len(at.dataframe) == 0


def test_seeded_store_shows_runs_against_the_slo(seeded_url: str) -> None:
    at = _run()
    _ok(at)
    assert at.multiselect(key="compare_runs").value == ["run-sim", "run-import", "run-empty"]
    assert _qp(at, "runs") == "run-sim,run-import,run-empty"
    assert _qp(at, "slo") == "interactive-chat"
    runs = _table(at, "compare_runs_table").set_index("load")
    sim = runs.loc["c=8"]
    # 2 of 152 failed: 1.3% error rate > 1% → FAIL overall, latencies pass
    assert sim["SLO"] == "FAIL"
    assert sim["error rate ≤ 0.01"] == "FAIL"
    assert sim["TTFT P99 ≤ 500"] == "pass"
    assert sim["output tok/s"] == pytest.approx(125.0)
    assert sim["tok/s per GPU"] == pytest.approx(62.5)
    # every ok request meets interactive-chat: goodput 150 / 60 s, attainment 150 / 152
    assert sim["goodput req/s"] == pytest.approx(2.5)
    assert sim["attainment %"] == pytest.approx(98.7)
    pct = _table(at, "compare_pct_table")
    itl = pct[(pct["metric"] == "ITL") & pct["run"].str.startswith("sim c=8")]
    assert itl["samples"].tolist() == [450]
    cap = _table(at, "compare_capacity_table")
    assert "fails already" in str(cap.set_index("series").loc["sim · llama-3.1-8b", "note"])
    diff = _table(at, "compare_diff_table")
    assert set(diff["verdict"]) <= {
        "regressed",
        "improved",
        "no significant change",
        "not enough data",
    }
    assert _qp(at, "base") == "run-sim" and _qp(at, "cand") == "run-import"


def test_url_selects_runs_and_profile(seeded_url: str) -> None:
    at = _run(runs="run-sim,nope", slo="code-completion", by="framework")
    _ok(at)
    assert at.multiselect(key="compare_runs").value == ["run-sim"]
    assert at.selectbox(key="compare_slo").value == "code-completion"
    runs = _table(at, "compare_runs_table")
    assert list(runs["series"]) == ["sim"]
    # code-completion is a P95 profile: TTFT P95 ≤ 200 ms; the sim run's TTFT P95 is 161.55
    assert runs["TTFT P95"].iloc[0] == pytest.approx(161.55, abs=0.06)
    assert runs["TTFT P95 ≤ 200"].iloc[0] == "pass"


def test_choosing_runs_and_profile_updates_the_url(seeded_url: str) -> None:
    at = _run()
    at.multiselect(key="compare_runs").set_value(["run-import"]).run()
    _ok(at)
    assert _qp(at, "runs") == "run-import"
    assert len(_table(at, "compare_runs_table")) == 1
    at.selectbox(key="compare_slo").select("batch-summarisation").run()
    _ok(at)
    assert _qp(at, "slo") == "batch-summarisation"
    assert "TTFT P90 ≤ 10000" in _table(at, "compare_runs_table").columns
    # one run only: no baseline vs candidate
    assert not _tables(at, "compare_diff_table")


def test_editing_a_profile_saves_it_as_the_users(seeded_url: str) -> None:
    at = _run()
    at.text_input(key="slo_edit_name").set_value("tight *chat*")
    at.number_input(key="slo_edit_ttft_ms").set_value(50.0)
    at.number_input(key="slo_edit_max_error_rate").set_value(0.05)
    at.button(key="slo_edit_save").click().run()
    _ok(at)
    assert _qp(at, "slo") == "tight *chat*"
    assert at.selectbox(key="compare_slo").value == "tight *chat*"
    runs = _table(at, "compare_runs_table").set_index("load")
    # TTFT P99 of the sim run is 167.5 ms > 50 ms
    assert runs.loc["c=8", "TTFT P99 ≤ 50"] == "FAIL"
    assert runs.loc["c=8", "error rate ≤ 0.05"] == "pass"
    store = open_store(seeded_url)
    try:
        saved = catalog.get(store, "slo_profiles", "tight *chat*")
    finally:
        store.dispose()
    assert saved["ttft_ms"] == 50.0 and saved["tpot_ms"] == 50.0  # the rest kept from the base


def test_an_invalid_profile_is_refused_with_the_field(seeded_url: str) -> None:
    at = _run()
    at.text_input(key="slo_edit_name").set_value("bad")
    at.number_input(key="slo_edit_max_error_rate").set_value(2.0)
    at.button(key="slo_edit_save").click().run()
    _ok(at)
    assert any("max\\_error\\_rate" in e.value and "0 to 1" in e.value for e in at.error)
    assert "bad" not in at.selectbox(key="compare_slo").options


def test_aggregate_only_runs_show_the_tools_figures(
    seeded_url: str, seed: Callable[[], None]
) -> None:
    _add_aggregates_only(seeded_url)
    at = _run(runs="run-agg,run-sim")
    _ok(at)
    warning = [w.value for w in at.warning if w.value.startswith("Aggregates only")]
    assert len(warning) == 1
    assert "guide \\*agg\\*" in warning[0]  # escaped
    assert "goodput" in warning[0]
    runs = _table(at, "compare_runs_table").set_index("data")
    agg = runs.loc["tool's aggregates only"]
    assert agg["TTFT P99"] == pytest.approx(90.0)
    assert agg["output tok/s"] == pytest.approx(300.0)
    assert agg["error %"] == pytest.approx(1.0)
    assert pd.isna(agg["goodput req/s"])
    # only runs with per-request data can be baseline or candidate
    assert not _tables(at, "compare_diff_table")


def test_sampled_views_start_off_for_big_selections(
    seeded_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compare_views, "BIG_SELECTION", 100)  # the seeded runs hold 172
    at = _run()
    _ok(at)
    assert at.toggle(key="compare_distributions").value is False
    assert any("Off by default" in c.value and "172" in c.value for c in at.caption)
    assert not _tables(at, "compare_diff_table")
    assert _tables(at, "compare_runs_table")  # the aggregate views are there regardless
    at.toggle(key="compare_distributions").set_value(True).run()
    _ok(at)
    assert _tables(at, "compare_diff_table")


def test_grouping_and_baseline_follow_the_url(seeded_url: str) -> None:
    at = _run(base="run-import", cand="run-sim")
    _ok(at)
    diff = _table(at, "compare_diff_table").set_index("metric")
    # the sim run's TTFT P50 (94.5 ms) against the import's (109.5 ms): candidate − baseline
    assert diff.loc["TTFT P50", "difference ms"] == pytest.approx(-15.0)
    at.selectbox(key="compare_by").select("model").run()
    _ok(at)
    assert _qp(at, "by") == "model"
    assert set(_table(at, "compare_runs_table")["series"]) == {"llama-3.1-8b", "?"}
    at.selectbox(key="compare_cand").select("run-import").run()
    _ok(at)
    assert _qp(at, "cand") == "run-import"
    assert any("two different runs" in i.value for i in at.info)


def test_a_length_conditioned_ttft_profile(seeded_url: str) -> None:
    at = _run(runs="run-sim")
    at.text_input(key="slo_edit_name").set_value("by-length")
    at.number_input(key="slo_edit_ttft_base_ms").set_value(100.0)
    at.number_input(key="slo_edit_ttft_ms_per_1k_input").set_value(100.0)
    at.button(key="slo_edit_save").click().run()
    _ok(at)
    assert at.selectbox(key="compare_slo").value == "by-length"
    runs = _table(at, "compare_runs_table")
    # request i: TTFT 20 + i ms, input 100 + i tokens → limit 110 + 0.1 i ms: met for i ≤ 100,
    # i.e. 101 of the 150 successful requests (67.3%) < 99% → FAIL
    label = "TTFT ≤ 100 + 100 ms/1k in, % of ok"
    assert runs[label].iloc[0] == pytest.approx(67.3, abs=0.05)
    assert runs[f"{label} ≥ 99%"].iloc[0] == "FAIL"


def test_only_aggregate_only_runs(seeded_url: str) -> None:
    _add_aggregates_only(seeded_url)
    at = _run(runs="run-agg")
    _ok(at)
    assert any(w.value.startswith("Aggregates only") for w in at.warning)
    runs = _table(at, "compare_runs_table")
    assert runs["SLO"].tolist() == ["pass"]  # the tool's TTFT P99 of 90 ms, 1% errors
    assert not _tables(at, "compare_diff_table")
    assert any("two different runs" in i.value for i in at.info)


def test_memory_cap_is_judged_on_each_runs_gpu_samples(db_url: str) -> None:
    from test_latency_page import seed_series

    seed_series(db_url)  # c8: GPU memory 40 → 44 GiB of 80; c32: 70 of 80; c1: none
    store = open_store(db_url)
    try:
        entry = {"name": "mem-cap", "percentile": 99.0, "max_memory_fraction": 0.8}
        catalog.save_user_entry(store, "slo_profiles", entry)
    finally:
        store.dispose()
    at = _run(runs="c1,c8,c32", slo="mem-cap")
    _ok(at)
    runs = _table(at, "compare_runs_table")
    peaks = runs["GPU memory peak"].tolist()
    assert pd.isna(peaks[0]) and peaks[1:] == [pytest.approx(0.55), pytest.approx(0.875)]
    assert runs["GPU memory peak ≤ 0.8"].tolist() == ["no data", "pass", "FAIL"]
    assert runs["SLO"].tolist()[2] == "FAIL"


def test_sampled_views_start_on_when_prepared(
    seeded_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from services.commands import prepare

    monkeypatch.setattr(compare_views, "BIG_SELECTION", 100)  # the seeded runs hold 172
    store = open_store(seeded_url)
    try:  # as `servescope import` / `bench` leave large runs: their samples already kept
        assert prepare.prepare(store, ["run-sim", "run-import", "run-empty"], large_run=1)
    finally:
        store.dispose()
    at = _run()
    _ok(at)
    assert at.toggle(key="compare_distributions").value is True
    assert _tables(at, "compare_diff_table")


def _fairness(at: AppTest) -> list[str]:
    return [w.value for w in at.warning if "like-for-like" in w.value]


def test_fair_comparison_warning_lists_each_difference_escaped(seeded_url: str) -> None:
    store = open_store(seeded_url)
    try:
        ingest.add_run(
            store,
            {
                "run_id": "run-fp8",
                "name": "fp8 run",
                "source": "servescope",
                "framework": "vllm",
                "model": "qwen <b>*2*</b>",
                "precision": "fp8",
                "kv_cache_dtype": "fp8",
                "gpu_name": "H100-SXM-80GB",
                "gpu_count": 2,
                "workload": "mixed",
                "arrival": "concurrency",
                "concurrency": 8,
                "started_at": 1_700_000_100.0,
            },
        )
    finally:
        store.dispose()
    at = _run(runs="run-sim,run-fp8")
    _ok(at)
    [warning] = _fairness(at)
    lines = warning.split("\n")
    # one line per difference, in the order model, precision; framework never warns
    items = [line for line in lines if line.startswith("- ")]
    assert len(items) == 2
    assert items[0].startswith("- Model differs\\:")
    assert items[1].startswith("- Precision unknown for 1 of 2 runs \\(the others\\: fp8")
    assert "qwen \\<b\\>\\*2\\*\\<\\/b\\>" in warning  # Markdown and HTML made inert
    assert "fp8 · fp8\\-kv" in warning
    assert "framework" not in warning.lower()
    assert _tables(at, "compare_runs_table")  # the comparison is still shown


def test_matching_runs_show_no_fair_comparison_warning(seeded_url: str) -> None:
    at = _run(runs="run-sim")
    _ok(at)
    assert _fairness(at) == []
