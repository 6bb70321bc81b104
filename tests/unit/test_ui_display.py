"""ui.display: escaping, labels and the display tables the home page shows."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from ui import display


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("plain run 1", "plain run 1"),
        ("**bold**", r"\*\*bold\*\*"),
        ("[x](http://e)", r"\[x\]\(http\:\/\/e\)"),
        ("<b>hi</b>", r"\<b\>hi\<\/b\>"),
        (":red[x] $y$", r"\:red\[x\] \$y\$"),
        ("# h\nnext", r"\# h next"),
    ],
)
def test_md_escape(raw: str, escaped: str) -> None:
    assert display.md_escape(raw) == escaped


@pytest.mark.parametrize(
    ("arrival", "concurrency", "rate", "label"),
    [
        ("concurrency", 8, None, "c=8"),
        (None, 32.0, float("nan"), "c=32"),
        ("poisson", None, 4.0, "4 req/s poisson"),
        ("constant", None, 2.5, "2.5 req/s"),
        ("gamma", 16, 8.0, "8 req/s gamma"),
        ("poisson", None, None, "∞ req/s"),
        (None, None, None, "—"),
    ],
)
def test_load_label(
    arrival: str | None, concurrency: float | None, rate: float | None, label: str
) -> None:
    assert display.load_label(arrival, concurrency, rate) == label


def test_client_bound_label() -> None:
    assert display.client_bound_label(True, "lag") == "⚠ client-bound: lag"
    assert display.client_bound_label(True, None) == "⚠ client-bound"
    assert display.client_bound_label(False, "x") == ""
    assert display.client_bound_label(pd.NA, None) == ""


def test_fmt_number() -> None:
    assert display.fmt_number(1234.567, 1, "ms") == "1,234.6 ms"
    assert display.fmt_number(None) == "—"
    assert display.fmt_number(float("nan")) == "—"
    assert display.fmt_count(12345) == "12,345"


def _latest() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run_id": ["r1", "r2"],
            "name": ["fast", None],
            "source": ["servescope", "vllm-bench"],
            "framework": ["sim", None],
            "framework_version": [None, "0.11.0"],
            "model": ["m", "m"],
            "precision": ["fp8", None],
            "kv_cache_dtype": ["fp8", None],
            "gpu_name": ["H100", None],
            "gpu_count": [2.0, math.nan],
            "workload": ["mixed", None],
            "arrival": ["concurrency", "poisson"],
            "concurrency": [8.0, math.nan],
            "target_rate": [math.nan, 4.0],
            "client_bound": pd.array([False, True], dtype="boolean"),
            "client_bound_reason": [None, "lag"],
            "requests": [10, 5],
            "errors": [1, 0],
            "output_throughput": [123.456, math.nan],
            "request_throughput": [1.234, 0.5],
            "ttft_p50_ms": [10.04, 1.0],
            "ttft_p99_ms": [20.0, 2.0],
            "tpot_p50_ms": [1.234, 1.0],
            "tpot_p99_ms": [2.0, 2.0],
        }
    )


def test_runs_table_keeps_row_order_and_shows_the_flag() -> None:
    table = display.runs_table(_latest())
    assert table["name"].tolist() == ["fast", "r2"]  # a run without a name shows its id
    assert table.columns[1] == "client-bound"
    assert table["client-bound"].tolist() == ["", "⚠ client-bound: lag"]
    assert table["gpu"].tolist() == ["2× H100", "—"]
    assert table["framework"].tolist() == ["sim", "— 0.11.0"]
    assert table["precision"].tolist() == ["fp8 · fp8-kv", ""]
    assert table["load"].tolist() == ["c=8", "4 req/s poisson"]
    assert table["output tok/s"].iloc[0] == pytest.approx(123.5)
    assert pd.isna(table["output tok/s"].iloc[1])
    assert table["TPOT P50 ms"].iloc[0] == pytest.approx(1.23)
    assert display.run_choices(_latest()) == {
        "r1": "fast · sim · m · c=8",
        "r2": "r2 · ? · m · 4 req/s poisson · ⚠ client-bound",
    }
    older = {"run_id": "r0", "name": "old", "framework": "vllm", "model": "m", "concurrency": 1}
    choices = display.run_choices(_latest(), first=older)
    assert list(choices) == ["r0", "r1", "r2"]  # an older run a link asked for comes first
    assert choices["r0"] == "old · vllm · m · c=1"


def test_latency_table_counts_and_confidence() -> None:
    detail = {
        "ttft_n": 150,
        "ttft_mean_ms": 1.0,
        "ttft_p50_ms": 2.0,
        "ttft_p99_ms": 9.999,
        "tpot_n": 99,
        "tpot_p99_ms": 5.0,
        "e2e_n": 0,
        "lag_n": None,
    }
    table = display.latency_table(detail, {"itl_n": 1000, "itl_p50_ms": 3.0}).set_index("metric")
    assert table.loc["TTFT", "samples"] == 150
    assert table.loc["TTFT", "P99"] == pytest.approx(10.0)
    assert table.loc["TTFT", "P99 confidence"] == "ok"
    assert table.loc["TPOT", "P99 confidence"] == "low (<100)"
    assert table.loc["E2E", "P99 confidence"] == "—"
    assert table.loc["client lag", "samples"] == 0
    assert table.loc["ITL (pooled)", "P50"] == pytest.approx(3.0)


def test_summary_figures_and_marks() -> None:
    figures = {
        label: value
        for label, value, _ in display.summary_figures(
            {
                "requests": 200,
                "ok": 150,
                "errors": 50,
                "duration_s": 10.0,
                "output_throughput": 1000.0,
                "output_throughput_per_gpu": None,
                "request_throughput": 15.0,
                "tpot_p50_ms": 20.0,
            }
        )
    }
    assert figures["Requests"] == "150 ok / 200"
    assert figures["Errors"] == "50 (25.0%)"
    assert figures["Per GPU"] == "—"
    assert figures["Interactivity per user"] == "50.0 tok/s"
    assert display.percentile_marks(
        {"ttft_p50_ms": 1.0, "ttft_p99_ms": float("nan")}, "ttft_ms"
    ) == {
        "P50": 1.0,
        "P99": None,
    }
    assert display.first_row(pd.DataFrame({"a": []})) == {}
