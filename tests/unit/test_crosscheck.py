"""Ours vs the tool's (analysis.crosscheck): differences computed by hand from the inputs."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest

from analysis import crosscheck
from ui import crosscheck_view


def _row(df: pd.DataFrame, metric: str, stat: str, ours_metric: str | None = None) -> Any:
    hit = df[
        (df["metric"] == metric)
        & (df["stat"] == stat)
        & (df["ours_metric"] == (ours_metric or metric))
    ]
    assert len(hit) == 1, f"expected one row for {metric} {stat} vs {ours_metric or metric}"
    return hit.iloc[0]


GUIDELLM = {
    "format": "guidellm",
    "aggregates_only": False,
    "per_request": "full",
    "metrics": {
        "tpot_ms": {"mean": 10.0, "p50": 10.0},
        "itl_ms": {"mean": 9.05},
        "request_throughput": 4.0,
    },
}


def test_guidellm_tpot_includes_first_token_and_itl_is_our_tpot() -> None:
    ours = {"tpot_ms.mean": 9.1, "tpot_ms.p50": 9.0, "itl_ms.mean": 9.0, "request_throughput": 4.0}
    df = crosscheck.compare(GUIDELLM, ours)
    # TPOT P50: (9.0 − 10.0) / 10.0 = −10 % → marked, with GuideLLM's definition as the reason
    tpot = _row(df, "tpot_ms", "p50")
    assert tpot["diff_pct"] == pytest.approx(-10.0)
    assert bool(tpot["differs"]) and "includes the first token" in tpot["reason"]
    # ITL mean vs our pooled ITL: (9.0 − 9.05) / 9.05 = −0.5525 % → within 1 %
    itl = _row(df, "itl_ms", "mean")
    assert itl["diff_pct"] == pytest.approx(-0.5524861878)
    assert not bool(itl["differs"])
    # … and vs our TPOT, its equivalent: (9.1 − 9.05) / 9.05 = +0.5525 %
    equiv = _row(df, "itl_ms", "mean", "tpot_ms")
    assert equiv["ours"] == 9.1 and equiv["diff_pct"] == pytest.approx(0.5524861878)
    assert equiv["reason"] == "same definition as our TPOT"
    # a scalar: 4.0 vs 4.0 → 0 %
    rt = _row(df, "request_throughput", "")
    assert rt["diff_pct"] == 0.0 and not bool(rt["differs"])
    assert len(df) == 5  # tpot mean, tpot p50, itl mean ×2, request_throughput


def test_threshold_is_strictly_over_one_percent() -> None:
    summary = {"format": "vllm-bench", "metrics": {"ttft_ms": {"p50": 100.0, "p99": 100.0}}}
    df = crosscheck.compare(summary, {"ttft_ms.p50": 101.0, "ttft_ms.p99": 101.5})
    assert not bool(_row(df, "ttft_ms", "p50")["differs"])  # exactly +1.0 %
    p99 = _row(df, "ttft_ms", "p99")
    assert bool(p99["differs"]) and p99["diff_pct"] == pytest.approx(1.5)


def test_llmperf_itl_reason_and_unknown_reason_hint() -> None:
    note = "llmperf's inter_token_latency_s is total time / output tokens"
    summary: dict[str, Any] = {
        "format": "llmperf",
        "metrics": {"itl_ms": {"mean": 12.0}, "ttft_ms": {"p50": 50.0}},
        "definitions": {"itl_ms": note},
    }
    df = crosscheck.compare(summary, {"itl_ms.mean": 10.0, "ttft_ms.p50": 60.0})
    itl = _row(df, "itl_ms", "mean")
    assert itl["diff_pct"] == pytest.approx(-100.0 / 6.0)  # (10 − 12) / 12
    assert itl["reason"] == note  # the importer's note wins over the built-in one
    ttft = _row(df, "ttft_ms", "p50")  # +20 %, and no known definition difference
    assert bool(ttft["differs"]) and ttft["reason"] == crosscheck.UNKNOWN_REASON


def test_known_reason_without_importer_note_and_source_argument() -> None:
    summary = {"metrics": {"e2e_ms": {"mean": 200.0}}}
    df = crosscheck.compare(summary, {"e2e_ms.mean": 210.0}, "sglang-bench")
    e2e = _row(df, "e2e_ms", "mean")
    assert e2e["diff_pct"] == pytest.approx(5.0) and "reconstructed" in e2e["reason"]


def test_sampled_requests_are_named_as_a_reason() -> None:
    summary = {"format": "guidellm", "per_request": "sampled", "metrics": {"completed": 100}}
    df = crosscheck.compare(summary, {"completed": 20.0})
    row = _row(df, "completed", "")
    assert row["diff_pct"] == pytest.approx(-80.0)
    assert crosscheck.SAMPLED_REASON in row["reason"]


def test_zero_and_missing_figures() -> None:
    summary = {
        "format": "vllm-bench",
        "metrics": {"failed": 0, "completed": 5, "tpot_ms": {"p99": 7}},
    }
    df = crosscheck.compare(summary, {"failed": 2.0, "completed": 5.0})
    failed = _row(df, "failed", "")
    assert math.isinf(failed["diff_pct"]) and bool(failed["differs"])
    missing = _row(df, "tpot_ms", "p99")  # we have no TPOT: shown, never marked
    assert math.isnan(missing["ours"]) and not bool(missing["differs"])
    assert crosscheck_view.crosscheck_table(df)["difference"].tolist() == [
        "—",  # latencies first: TPOT P99
        "+0.0%",  # then the scalars in a fixed order: completed, failed
        "tool's is 0",
    ]


def test_empty_or_missing_summary_gives_an_empty_frame() -> None:
    for summary in (None, {}, {"metrics": "junk"}):
        df = crosscheck.compare(summary, {"ttft_ms.p50": 1.0})
        assert df.empty and list(df.columns) == list(crosscheck.COLUMNS)


def test_our_figures_from_run_detail_and_itl_rows() -> None:
    detail = {
        "requests": 10,
        "ok": 9,
        "errors": 1,
        "ttft_n": 9,
        "ttft_mean_ms": 20.0,
        "ttft_p50_ms": 19.0,
        "tpot_n": 0,
        "tpot_p50_ms": None,
        "e2e_n": 9,
        "e2e_p99_ms": float("nan"),
        "request_throughput": 0.9,
        "duration_s": 10.0,
    }
    itl = {"itl_n": 90, "itl_p99_ms": 12.5}
    ours = crosscheck.our_figures(detail, itl)
    assert ours == {
        "ttft_ms.mean": 20.0,
        "ttft_ms.p50": 19.0,
        "itl_ms.p99": 12.5,
        "request_throughput": 0.9,
        "completed": 9.0,
        "failed": 1.0,
        "duration_s": 10.0,
    }
    # no requests: only the duration (the run's own) is a figure of ours
    assert crosscheck.our_figures({"requests": 0, "ok": 0, "duration_s": 5.0}) == {
        "duration_s": 5.0
    }


def test_tool_aggregates_and_flag() -> None:
    summary = {
        "format": "genai-perf",
        "aggregates_only": True,
        "metrics": {"itl_ms": {"mean": 8.0, "p99": 11.0, "std": 1.0}, "output_throughput": 900.0},
    }
    assert crosscheck.is_aggregates_only(summary)
    assert not crosscheck.is_aggregates_only({"aggregates_only": False})
    assert not crosscheck.is_aggregates_only(None)
    agg = crosscheck.tool_aggregates(summary)
    assert agg[["metric", "stat", "value"]].values.tolist() == [
        ["itl_ms", "mean", 8.0],
        ["itl_ms", "p99", 11.0],
        ["output_throughput", "", 900.0],
    ]
    assert "our TPOT" in agg["definition"].iloc[0]
    table = crosscheck_view.aggregates_table(summary)
    assert table["figure"].tolist() == [
        "ITL mean (ms)",
        "ITL P99 (ms)",
        "Output throughput (tok/s)",
    ]


def test_different_request_counts_are_named_as_a_reason() -> None:
    """A records file cut short: 3 of the tool's 64 requests (e.g. a head of the export)."""
    summary = {"format": "aiperf", "metrics": {"completed": 64, "e2e_ms": {"p50": 0.67}}}
    df = crosscheck.compare(summary, {"completed": 3.0, "e2e_ms.p50": 12.51})
    e2e = _row(df, "e2e_ms", "p50")
    assert e2e["diff_pct"] == pytest.approx((12.51 - 0.67) / 0.67 * 100)
    assert e2e["reason"] == "ours cover 3 successful requests, the tool's 64"
    completed = _row(df, "completed", "")
    assert completed["diff_pct"] == pytest.approx(-95.3125)  # (3 − 64) / 64
    assert "ours cover 3" in completed["reason"]
