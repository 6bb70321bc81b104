"""AppTest: the run detail of imported runs shows ours beside the tool's figures, and says so
clearly when a run holds only the tool's aggregates (tables found by their columns)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from streamlit.testing.v1 import AppTest

from store import ingest
from store.lifecycle import open_store

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")
TIMEOUT = 30

#: GuideLLM-style import: 4 requests with TTFT 10/20/30/40 ms and TPOT 4/5/6/7 ms.
#: Ours: TTFT mean = P50 = 25 ms (linear interpolation); TPOT P50 = 5.5 ms.
#: The tool's: TTFT mean 25 (0 %), TPOT P50 5.0 → (5.5 − 5.0) / 5.0 = +10 %, marked.
GUIDELLM_SUMMARY = {
    "format": "guidellm",
    "aggregates_only": False,
    "per_request": "full",
    "metrics": {"ttft_ms": {"mean": 25.0}, "tpot_ms": {"p50": 5.0}},
}
GENAI_SUMMARY = {
    "format": "genai-perf",
    "aggregates_only": True,
    "per_request": "none",
    "metrics": {"ttft_ms": {"mean": 31.5, "p99": 80.0}, "output_throughput": 1234.5},
}


def _seed(url: str) -> None:
    store = open_store(url)
    try:
        requests = pd.DataFrame(
            {
                "run_id": "imp-guidellm",
                "seq": range(4),
                "status": "ok",
                "output_tokens": 11,
                "ttft_ms": [10.0, 20.0, 30.0, 40.0],
                "tpot_ms": [4.0, 5.0, 6.0, 7.0],
                "e2e_ms": [50.0, 70.0, 90.0, 110.0],
            }
        )
        ingest.replace_runs(
            store,
            [
                ingest.RunRows(
                    {
                        "run_id": "imp-guidellm",
                        "name": "guidellm import",
                        "source": "guidellm",
                        "started_at": 1_700_000_100.0,
                        "duration_s": 2.0,
                        "tool_summary": GUIDELLM_SUMMARY,
                    },
                    requests,
                ),
                ingest.RunRows(
                    {
                        "run_id": "imp-aggregates",
                        "name": "genai-perf summary",
                        "source": "genai-perf",
                        "started_at": 1_700_000_000.0,
                        "duration_s": 60.0,
                        "tool_summary": GENAI_SUMMARY,
                    }
                ),
                ingest.RunRows(
                    {"run_id": "own-run", "source": "servescope", "started_at": 1_600_000_000.0},
                    requests.assign(run_id="own-run"),
                ),
            ],
        )
    finally:
        store.dispose()


def _app(db_url: str, run: str) -> AppTest:
    _seed(db_url)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params["run"] = run
    at.run()
    assert [e.value for e in at.exception] == []
    assert at.selectbox(key="run_select").value == run
    return at


#: Each table is found by a column only it has (st.dataframe without selection carries no key).
TABLES = {
    "crosscheck": "known reason",
    "aggregates": "tool's definition",
    "latency": "P99 confidence",
}


def _table(at: AppTest, name: str) -> pd.DataFrame | None:
    found = [d.value for d in at.dataframe if TABLES[name] in d.value.columns]
    assert len(found) <= 1
    return found[0] if found else None


def test_imported_run_shows_ours_beside_the_tools(db_url: str) -> None:
    at = _app(db_url, "imp-guidellm")
    table = _table(at, "crosscheck")
    assert table is not None
    rows = table.set_index("figure")
    assert rows.loc["TTFT mean (ms)", "ours"] == 25.0
    assert rows.loc["TTFT mean (ms)", "difference"] == "+0.0%"
    assert rows.loc["TTFT mean (ms)", "over 1%"] == ""
    assert rows.loc["TPOT P50 (ms)", "ours"] == 5.5
    assert rows.loc["TPOT P50 (ms)", "tool's"] == 5.0
    assert rows.loc["TPOT P50 (ms)", "difference"] == "+10.0%"
    assert rows.loc["TPOT P50 (ms)", "over 1%"] == "yes"
    assert "includes the first token" in str(rows.loc["TPOT P50 (ms)", "known reason"])
    assert _table(at, "latency") is not None  # our own analysis is still there
    assert _table(at, "aggregates") is None


def test_aggregates_only_run_says_so_and_shows_the_tools_figures(db_url: str) -> None:
    at = _app(db_url, "imp-aggregates")
    assert any("aggregates only" in w.value.lower() for w in at.warning)
    table = _table(at, "aggregates")
    assert table is not None
    assert table["figure"].tolist() == [
        "TTFT mean (ms)",
        "TTFT P99 (ms)",
        "Output throughput (tok/s)",
    ]
    assert table["tool's"].tolist() == [31.5, 80.0, 1234.5]
    # the latest-runs table flags it too (rows in latest_runs order: newest first)
    latest = next(d.value for d in at.dataframe if d.key == "latest_runs_table")
    flags = dict(zip(latest["name"], latest["per-request data"], strict=True))
    assert flags == {
        "guidellm import": "",
        "genai-perf summary": "aggregates only",
        "own-run": "",
    }
    # no empty per-request analysis instead: no latency table, no charts, no cross-check
    assert _table(at, "latency") is None
    assert _table(at, "crosscheck") is None
    assert len(at.get("plotly_chart")) == 0


def test_own_runs_have_no_crosscheck(db_url: str) -> None:
    at = _app(db_url, "own-run")
    assert _table(at, "latency") is not None
    assert _table(at, "crosscheck") is None
    assert _table(at, "aggregates") is None
