"""Windowed percentiles summed over targets, their precision, request/error rates — against
hand-computed cases, and replayed from the real vLLM and SGLang /metrics captures."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest

from analysis import engine_series
from analysis import histogram_windows as hw
from collectors import watch
from collectors.prometheus_text import labels_key, parse
from store import ingest, sample_series
from store.lifecycle import open_store

INF = math.inf
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
VLLM_CAPTURE = FIXTURES / "vllm" / "metrics_v1_full_qwen2.5-0.5b_k8s-ai-conformance_kops.prom"
SGLANG_CAPTURE = FIXTURES / "sglang" / "production_metrics_doc_llama-3.1-8b.prom"


def _rows(target: str, scrapes: list[tuple[float, dict[float, float], float]]) -> pd.DataFrame:
    """Store-shaped rows of ``ttft_seconds`` for one target: (ts, {le: cumulative}, sum)."""
    rows = []
    for ts, buckets, total in scrapes:
        for le, c in buckets.items():
            name = "+Inf" if math.isinf(le) else repr(le)
            rows.append((target, ts, f"ttft_seconds_bucket:{name}", c))
        rows.append((target, ts, "ttft_seconds_count", buckets[INF]))
        rows.append((target, ts, "ttft_seconds_sum", total))
    return pd.DataFrame(rows, columns=["target", "ts", "metric", "value"])


def _windows(rows: pd.DataFrame, **kw: float) -> pd.DataFrame:
    return hw.summed_histogram_windows(rows, "ttft_seconds", **kw)  # type: ignore[arg-type]


def test_linear_interpolation_inside_a_bucket_and_the_inf_bucket() -> None:
    zero = {0.1: 0.0, 0.5: 0.0, 1.0: 0.0, INF: 0.0}
    rows = _rows(
        "a", [(0.0, zero, 0.0), (10.0, {0.1: 10.0, 0.5: 60.0, 1.0: 90.0, INF: 100.0}, 55.0)]
    )
    w = _windows(rows, window_s=10.0, start=0.0, end=10.0)
    assert len(w) == 1
    r = w.iloc[0]
    assert r["count"] == 100.0 and r["targets"] == 1
    assert r["mean"] == pytest.approx(0.55)
    # P50: rank 50 in (0.1, 0.5] holding 50 → 0.1 + (50 − 10)/(60 − 10) × 0.4
    assert r["p50"] == pytest.approx(0.42)
    assert (r["p50_lower"], r["p50_upper"]) == (0.1, 0.5)
    assert r["p50_precision"] == "P50 inside the 0.1–0.5 s bucket"
    # P90: rank 90 is the top of (0.5, 1] → 1.0
    assert r["p90"] == pytest.approx(1.0)
    # P99: rank 99 lies in +Inf → Prometheus answers the highest finite bound, and we say so
    assert r["p99"] == 1.0
    assert r["p99_lower"] == 1.0 and math.isinf(r["p99_upper"])
    assert r["p99_precision"].startswith("P99 above 1 s (the +Inf bucket)")
    assert "highest finite bound" in r["p99_precision"]
    assert r["note"] == ""


def test_a_counter_reset_mid_window_keeps_what_was_served_before_and_after() -> None:
    rows = _rows(
        "a",
        [
            (0.0, {0.1: 100.0, 1.0: 100.0, INF: 100.0}, 5.0),  # baseline
            (4.0, {0.1: 110.0, 1.0: 120.0, INF: 120.0}, 9.0),  # +10 ≤0.1, +10 in (0.1, 1]
            (6.0, {0.1: 2.0, 1.0: 3.0, INF: 3.0}, 0.5),  # restart: 2 ≤0.1, 1 in (0.1, 1]
            (10.0, {0.1: 4.0, 1.0: 6.0, INF: 6.0}, 1.0),  # +2, +2
        ],
    )
    r = _windows(rows, window_s=10.0, start=0.0, end=10.0).iloc[0]
    # 20 before the restart + 3 at it + 3 after = 26; ≤0.1: 10 + 2 + 2 = 14
    assert r["count"] == 26.0
    assert r["mean"] == pytest.approx((4.0 + 0.5 + 0.5) / 26.0)
    # P50: rank 13 ≤ 0.1 → 0.1 × 13/14
    assert r["p50"] == pytest.approx(0.1 * 13.0 / 14.0)
    # P90: rank 23.4 in (0.1, 1] holding 12 → 0.1 + 0.9 × 9.4/12
    assert r["p90"] == pytest.approx(0.1 + 0.9 * 9.4 / 12.0)


def test_summed_over_targets_one_of_which_restarts_mid_window() -> None:
    a = _rows(
        "a",
        [
            (0.0, {0.1: 0.0, 1.0: 0.0, INF: 0.0}, 0.0),
            (10.0, {0.1: 40.0, 1.0: 50.0, INF: 50.0}, 3.0),
        ],
    )
    b = _rows(
        "b",
        [
            (0.0, {0.1: 70.0, 1.0: 80.0, INF: 80.0}, 9.0),
            (5.0, {0.1: 70.0, 1.0: 90.0, INF: 90.0}, 15.0),  # +10 in (0.1, 1]
            (8.0, {0.1: 0.0, 1.0: 0.0, INF: 0.0}, 0.0),  # restarted, nothing served yet
            (10.0, {0.1: 0.0, 1.0: 5.0, INF: 5.0}, 3.0),  # +5 in (0.1, 1]
        ],
    )
    r = _windows(pd.concat([a, b]), window_s=10.0, start=0.0, end=10.0).iloc[0]
    assert r["targets"] == 2
    # a: 40 ≤0.1, 10 in (0.1, 1]; b: 15 in (0.1, 1] → 65 requests, 40 ≤ 0.1
    assert r["count"] == 65.0
    assert r["mean"] == pytest.approx((3.0 + 6.0 + 3.0) / 65.0)
    # P50: rank 32.5 ≤ 0.1 → 0.1 × 32.5/40; P90: rank 58.5 in (0.1, 1] holding 25
    assert r["p50"] == pytest.approx(0.1 * 32.5 / 40.0)
    assert r["p90"] == pytest.approx(0.1 + 0.9 * (58.5 - 40.0) / 25.0)


def test_summing_buckets_differs_from_averaging_per_target_percentiles() -> None:
    fast = _rows("fast", [(0.0, {0.1: 0.0, 2.0: 0.0, INF: 0.0}, 0.0)])
    fast = pd.concat([fast, _rows("fast", [(10.0, {0.1: 100.0, 2.0: 100.0, INF: 100.0}, 5.0)])])
    slow = _rows("slow", [(0.0, {0.1: 0.0, 2.0: 0.0, INF: 0.0}, 0.0)])
    slow = pd.concat([slow, _rows("slow", [(10.0, {0.1: 0.0, 2.0: 10.0, INF: 10.0}, 15.0)])])
    both = pd.concat([fast, slow])
    summed = _windows(both, window_s=10.0, start=0.0, end=10.0).iloc[0]
    per = {
        t: _windows(df, window_s=10.0, start=0.0, end=10.0).iloc[0]
        for t, df in both.groupby("target")
    }
    # per target: fast P99 = 0.1 × 99/100, slow P99 = 0.1 + 1.9 × 9.9/10
    assert per["fast"]["p99"] == pytest.approx(0.099)
    assert per["slow"]["p99"] == pytest.approx(0.1 + 1.9 * 0.99)
    # summed: rank 108.9 of 110, 100 ≤ 0.1 → 0.1 + 1.9 × 8.9/10
    assert summed["p99"] == pytest.approx(0.1 + 1.9 * 0.89)
    assert summed["p50"] == pytest.approx(0.1 * 55.0 / 100.0)
    average_p99 = (per["fast"]["p99"] + per["slow"]["p99"]) / 2
    average_p50 = (per["fast"]["p50"] + per["slow"]["p50"]) / 2
    assert summed["p99"] != pytest.approx(average_p99, rel=0.05)
    assert summed["p50"] != pytest.approx(average_p50, rel=0.05)


def test_empty_windows_have_count_zero_nan_percentiles_and_say_why() -> None:
    rows = _rows(
        "a",
        [
            (0.0, {0.5: 1.0, INF: 1.0}, 0.2),
            (5.0, {0.5: 1.0, INF: 1.0}, 0.2),  # nothing finished in (0, 5]
            (10.0, {0.5: 3.0, INF: 3.0}, 0.6),
        ],
    )
    w = _windows(rows, window_s=5.0, start=0.0, end=20.0)
    assert w["window_start"].tolist() == [0.0, 5.0, 10.0, 15.0]
    assert w["count"].tolist() == [0.0, 2.0, 0.0, 0.0]
    assert w["note"].tolist() == [hw.NOTE_NO_REQUESTS, "", hw.NOTE_NO_SCRAPE, hw.NOTE_NO_SCRAPE]
    for i in (0, 2, 3):
        assert math.isnan(w["p50"].iloc[i]) and math.isnan(w["p99_lower"].iloc[i])
        assert math.isnan(w["mean"].iloc[i]) and w["p99_precision"].iloc[i] == ""
    assert w["p50"].iloc[1] == pytest.approx(0.25)
    assert hw.precision_phrase(0.99, None) == "P99: no requests in the window"
    empty = _windows(rows.iloc[0:0], window_s=5.0)
    assert empty.empty and "p99_precision" in empty.columns
    with pytest.raises(ValueError, match="window_s"):
        _windows(rows, window_s=0.0)


def test_quantile_bucket_and_phrases() -> None:
    pairs = [(0.5, 0.0), (1.0, 100.0), (INF, 100.0)]
    assert hw.quantile_bucket(0.99, pairs) == hw.BucketBounds(0.5, 1.0)
    assert hw.precision_phrase(0.99, hw.BucketBounds(0.5, 1.0)) == ("P99 inside the 0.5–1 s bucket")
    assert hw.precision_phrase(0.999, hw.BucketBounds(0.5, 1.0)).startswith("P99.9 inside")
    assert hw.quantile_bucket(0.5, [(0.1, 0.0), (INF, 0.0)]) is None
    with pytest.raises(ValueError, match="quantile"):
        hw.quantile_bucket(1.5, pairs)


def _raw(target: str, ts: float, name: str, labels: dict[str, str], value: float) -> dict:
    return {"target": target, "ts": ts, "name": name, "labels": labels_key(labels), "value": value}


def test_request_and_error_rate_from_vllm_finish_reasons() -> None:
    name = "vllm:request_success_total"
    rows = []
    for target, series in {
        "a": [(0.0, 10, 1, 0), (10.0, 60, 3, 0), (20.0, 60, 3, 0)],
        # b restarts between 10 and 20: 5 stop and 1 error after the restart
        "b": [(0.0, 100, 0, 2), (10.0, 130, 0, 4), (20.0, 5, 0, 1)],
    }.items():
        for ts, stop, abort, error in series:
            rows.append(_raw(target, ts, name, {"finished_reason": "stop", "engine": "0"}, stop))
            rows.append(_raw(target, ts, name, {"finished_reason": "abort", "engine": "0"}, abort))
            rows.append(_raw(target, ts, name, {"finished_reason": "error", "engine": "0"}, error))
    w = hw.request_rate_windows(pd.DataFrame(rows), "vllm", window_s=10.0, start=0.0, end=30.0)
    # (0, 10]: a 50 stop + 2 abort, b 30 stop + 2 error → 84 finished, 4 failed
    assert w["finished"].tolist() == [84.0, 6.0, 0.0]
    assert w["failed"].tolist() == [4.0, 1.0, 0.0]
    assert w["request_rate"].iloc[0] == pytest.approx(8.4)
    assert w["failure_rate"].iloc[0] == pytest.approx(0.4)
    assert w["error_rate"].iloc[0] == pytest.approx(4.0 / 84.0)
    assert w["failed_by_reason"].iloc[0] == {"abort": 2.0, "error": 2.0}
    # (10, 20]: only b moved, from its restart: 5 stop + 1 error
    assert w["error_rate"].iloc[1] == pytest.approx(1.0 / 6.0)
    assert w["failed_by_reason"].iloc[1] == {"error": 1.0}
    # (20, 30]: no scrape
    assert math.isnan(w["request_rate"].iloc[2]) and math.isnan(w["error_rate"].iloc[2])
    assert w["note"].iloc[2] == hw.NOTE_NO_SCRAPE
    with pytest.raises(ValueError, match="llamacpp"):
        hw.request_rate_windows(pd.DataFrame(rows), "llamacpp", window_s=10.0)
    assert name in hw.finished_series_names(["vllm"])


def _set_ttft_buckets(text: str, cumulative: dict[str, float], total: float) -> str:
    """The vLLM capture with TTFT buckets, count, sum and finish reasons of a second scrape."""

    def bucket(m: re.Match[str]) -> str:
        return f"{m.group(1)} {cumulative[m.group(2)]}"

    text = re.sub(
        r'^(vllm:time_to_first_token_seconds_bucket\{[^}]*le="([^"]+)"[^}]*\}) \S+$',
        bucket,
        text,
        flags=re.M,
    )
    text = re.sub(
        r"^(vllm:time_to_first_token_seconds_count\{[^}]*\}) \S+$",
        rf"\g<1> {total}",
        text,
        flags=re.M,
    )
    text = re.sub(
        r"^(vllm:time_to_first_token_seconds_sum\{[^}]*\}) \S+$", r"\g<1> 42.5", text, flags=re.M
    )
    for reason, n in (("stop", 95.0), ("abort", 3.0), ("error", 2.0)):
        text = re.sub(
            rf'^(vllm:request_success_total\{{[^}}]*finished_reason="{reason}"[^}}]*\}}) \S+$',
            rf"\g<1> {n}",
            text,
            flags=re.M,
        )
    return text


def _scale_counters(text: str, factor: float) -> str:
    """A later scrape of a capture: every histogram and counter sample × ``factor``."""

    def scaled(m: re.Match[str]) -> str:
        return f"{m.group(1)} {float(m.group(2)) * factor!r}"

    return re.sub(
        r"^(\S+?(?:_bucket|_count|_sum|_total)(?:\{[^}]*\})?) (\S+)$", scaled, text, flags=re.M
    )


def test_replaying_the_real_vllm_and_sglang_captures(tmp_path: Path) -> None:
    store = open_store(f"duckdb:///{tmp_path / 'oncall.duckdb'}")
    try:
        # vLLM: the (idle) capture, then the same page after 100 requests
        vllm_text = VLLM_CAPTURE.read_text()
        # 50 at 30 ms, 40 at 300 ms, 10 at 3 s
        bounds = re.findall(r'time_to_first_token_seconds_bucket\{[^}]*le="([^"]+)"', vllm_text)
        cum = {
            le: (0.0 if float(le) < 0.04 else 50.0 if float(le) < 0.5 else 90.0)
            if float(le) < 5.0
            else 100.0
            for le in bounds
        }
        src = watch.ScrapeSource("http://vllm-a:8000/metrics")
        for ts, text in ((0.0, vllm_text), (60.0, _set_ttft_buckets(vllm_text, cum, 100.0))):
            for table, rows in src.rows(parse(text), ts).items():
                ingest.add_rows(store, table, rows)
        # SGLang: the production capture, then the same page with every counter doubled
        sg_text = SGLANG_CAPTURE.read_text()
        sg = watch.ScrapeSource("http://sglang-a:30000/metrics")
        for ts, text in ((0.0, sg_text), (60.0, _scale_counters(sg_text, 2.0))):
            for table, rows in sg.rows(parse(text), ts).items():
                ingest.add_rows(store, table, rows)

        hist = sample_series.engine_histogram_series(
            store, "http://vllm-a:8000/metrics", "ttft_seconds", since=0.0
        )
        hist.insert(0, "target", "http://vllm-a:8000/metrics")
        r = hw.summed_histogram_windows(
            hist, "ttft_seconds", window_s=60.0, start=0.0, end=60.0
        ).iloc[0]
        assert r["count"] == 100.0 and r["mean"] == pytest.approx(0.425)
        # P50: rank 50 tops (0.02, 0.04]; P90: rank 90 tops (0.25, 0.5]; P99 in (2.5, 5]
        assert r["p50"] == pytest.approx(0.04)
        assert r["p90"] == pytest.approx(0.5)
        assert r["p99"] == pytest.approx(2.5 + 2.5 * 9.0 / 10.0)
        assert r["p99_precision"] == "P99 inside the 2.5–5 s bucket"

        raw = sample_series.engine_raw_series(store, hw.finished_series_names(["vllm"]), since=0.0)
        rates = hw.request_rate_windows(raw, "vllm", window_s=60.0, start=0.0, end=60.0)
        assert rates["finished"].iloc[0] == 100.0
        assert rates["error_rate"].iloc[0] == pytest.approx(0.05)
        assert rates["failed_by_reason"].iloc[0] == {"abort": 3.0, "error": 2.0}

        # SGLang: the window's increase is the capture itself, so its percentiles are the
        # capture's own buckets through histogram_quantile
        sg_hist = sample_series.engine_histogram_series(
            store, "http://sglang-a:30000/metrics", "ttft_seconds", since=0.0
        )
        sg_hist.insert(0, "target", "sglang-a")
        s = hw.summed_histogram_windows(
            sg_hist, "ttft_seconds", window_s=60.0, start=0.0, end=60.0
        ).iloc[0]
        page = [x for x in parse(sg_text).samples if x.name.endswith("first_token_seconds_bucket")]
        buckets = [(float(x.label("le") or "nan"), x.value) for x in page]
        assert s["count"] == 11008.0
        for q, col in ((0.5, "p50"), (0.9, "p90"), (0.99, "p99")):
            assert s[col] == pytest.approx(engine_series.histogram_quantile(q, buckets))
        # 2513 of 11008 within 30 s: P50 and up are in the +Inf bucket → 30 s, stated
        assert s["p50"] == 30.0 and "the +Inf bucket" in s["p50_precision"]
        # the capture carries no finished-request counter: no rate, said by an empty frame
        sg_raw = sample_series.engine_raw_series(
            store, hw.finished_series_names(["sglang"]), since=0.0
        )
        assert hw.request_rate_windows(sg_raw, "sglang", window_s=60.0).empty
    finally:
        store.dispose()


def test_tgi_failures_by_error_kind() -> None:
    rows = [
        _raw("t", 0.0, "tgi_request_success", {}, 10.0),
        _raw("t", 10.0, "tgi_request_success", {}, 28.0),
        _raw("t", 0.0, "tgi_request_failure", {"err": "overloaded"}, 1.0),
        _raw("t", 10.0, "tgi_request_failure", {"err": "overloaded"}, 2.0),
        _raw("t", 0.0, "tgi_request_failure", {"err": "validation"}, 0.0),
        _raw("t", 10.0, "tgi_request_failure", {"err": "validation"}, 1.0),
    ]
    w = hw.request_rate_windows(pd.DataFrame(rows), "tgi", window_s=10.0, start=0.0, end=10.0)
    # 18 succeeded + 2 failed = 20 finished; failures by err
    assert w["finished"].iloc[0] == 20.0 and w["failed"].iloc[0] == 2.0
    assert w["error_rate"].iloc[0] == pytest.approx(0.1)
    assert w["failed_by_reason"].iloc[0] == {"overloaded": 1.0, "validation": 1.0}


def test_per_target_windows_share_one_grid() -> None:
    a = _rows("a", [(0.0, {1.0: 0.0, INF: 0.0}, 0.0), (10.0, {1.0: 4.0, INF: 4.0}, 2.0)])
    b = _rows("b", [(10.0, {1.0: 0.0, INF: 0.0}, 0.0), (20.0, {1.0: 0.0, INF: 2.0}, 6.0)])
    w = hw.histogram_windows_by_target(pd.concat([a, b]), "ttft_seconds", window_s=10.0)
    assert w["target"].tolist() == ["a", "a", "b", "b"]
    assert w["window_start"].tolist() == [0.0, 10.0, 0.0, 10.0]
    assert w["count"].tolist() == [4.0, 0.0, 0.0, 2.0]
    assert w["p50"].iloc[0] == pytest.approx(0.5)
    assert w["p50"].iloc[3] == 1.0 and "+Inf" in w["p50_precision"].iloc[3]
    assert w["note"].iloc[2] == hw.NOTE_NO_SCRAPE
    assert hw.histogram_windows_by_target(a.iloc[0:0], "ttft_seconds", window_s=10.0).empty


def test_bucket_increase_sums_targets_over_the_span_with_a_reset() -> None:
    """A span's buckets: each target's increase over (start, end] (a restart counts from 0),
    summed over targets, so the span's P50 is one quantile over all its requests."""
    a = _rows(
        "a",
        [
            (0.0, {0.1: 100.0, 1.0: 100.0, INF: 100.0}, 5.0),
            (6.0, {0.1: 2.0, 1.0: 3.0, INF: 3.0}, 0.5),  # restarted: 2 ≤0.1, 1 in (0.1, 1]
            (10.0, {0.1: 4.0, 1.0: 6.0, INF: 6.0}, 1.0),
        ],
    )
    b = _rows(
        "b",
        [
            (0.0, {0.1: 0.0, 1.0: 0.0, INF: 0.0}, 0.0),
            (10.0, {0.1: 0.0, 1.0: 4.0, INF: 10.0}, 30.0),
            (20.0, {0.1: 0.0, 1.0: 9.0, INF: 90.0}, 300.0),  # after the span: not counted
        ],
    )
    pairs = hw.bucket_increase(pd.concat([a, b]), "ttft_seconds", start=0.0, end=10.0)
    assert pairs == [(0.1, 4.0), (1.0, 10.0), (INF, 16.0)]
    assert engine_series.histogram_quantile(0.5, pairs) == pytest.approx(0.1 + 0.9 * 4 / 6)
    # a span no target has two scrapes across: nothing
    assert hw.bucket_increase(a, "ttft_seconds", start=20.0, end=30.0) == []
    assert hw.bucket_increase(a.iloc[0:0], "ttft_seconds", start=0.0, end=10.0) == []
    with pytest.raises(ValueError, match="after start"):
        hw.bucket_increase(a, "ttft_seconds", start=10.0, end=10.0)


def test_length_histograms_state_their_precision_in_tokens() -> None:
    rows = _rows("a", [(0.0, {128.0: 0.0, 512.0: 0.0, INF: 0.0}, 0.0)])
    rows = pd.concat([rows, _rows("a", [(10.0, {128.0: 10.0, 512.0: 100.0, INF: 100.0}, 30000.0)])])
    rows["metric"] = rows["metric"].str.replace("ttft_seconds", "prompt_length_tokens")
    w = hw.summed_histogram_windows(rows, "prompt_length_tokens", window_s=10.0, start=0.0)
    assert w.iloc[0]["p50_precision"] == "P50 inside the 128–512 tokens bucket"
    assert w.iloc[0]["mean"] == pytest.approx(300.0)


# --- moved from test_engine_series (the single-source reader it tested is gone) ---------


def _queue_rows(scrapes: list[tuple[float, dict[float, float], float]]) -> pd.DataFrame:
    rows = []
    for ts, buckets, total in scrapes:
        for le, c in buckets.items():
            name = "+Inf" if math.isinf(le) else repr(le)
            rows.append(
                {"target": "a", "ts": ts, "metric": f"queue_time_seconds_bucket:{name}", "value": c}
            )
        rows.append(
            {
                "target": "a",
                "ts": ts,
                "metric": "queue_time_seconds_count",
                "value": buckets[math.inf],
            }
        )
        rows.append({"target": "a", "ts": ts, "metric": "queue_time_seconds_sum", "value": total})
    return pd.DataFrame(rows, columns=["ts", "metric", "value"]).assign(target="a")


def test_histogram_windows_use_bucket_increases_and_survive_a_reset() -> None:
    inf = math.inf
    rows = _queue_rows(
        [
            (0.0, {0.1: 100.0, 1.0: 100.0, inf: 100.0}, 5.0),  # baseline: history before
            (5.0, {0.1: 110.0, 1.0: 120.0, inf: 120.0}, 9.0),  # +10 ≤0.1, +10 in (0.1,1]
            (10.0, {0.1: 110.0, 1.0: 120.0, inf: 120.0}, 9.0),  # window 2: nothing new
            (15.0, {0.1: 4.0, 1.0: 4.0, inf: 4.0}, 0.2),  # engine restarted: 4 fast requests
        ]
    )
    w = hw.summed_histogram_windows(rows, "queue_time_seconds", window_s=5.0, start=0.0, end=20.0)
    assert w["window_start"].tolist() == [0.0, 5.0, 10.0, 15.0]
    # (0,5]: baseline at 0, 20 requests, sum +4 s → mean 0.2; P50 = rank 10 → 0.1
    assert w["count"].iloc[0] == 20.0
    assert w["mean"].iloc[0] == pytest.approx(0.2)
    assert w["p50"].iloc[0] == pytest.approx(0.1)
    # P90 = rank 18 → 0.1 + 0.9 × 8/10 = 0.82
    assert w["p90"].iloc[0] == pytest.approx(0.82)
    # (5,10]: no increase
    assert w["count"].iloc[1] == 0.0 and math.isnan(w["p99"].iloc[1])
    # (10,15]: reset → counts from zero: 4 requests, all ≤ 0.1 s
    assert w["count"].iloc[2] == 4.0
    assert w["mean"].iloc[2] == pytest.approx(0.05)
    assert w["p50"].iloc[2] == pytest.approx(0.05)
    # (15,20]: no scrape after 15 → nothing measurable
    assert w["count"].iloc[3] == 0.0 and math.isnan(w["p50"].iloc[3])
    # the default start is the first scrape
    d = hw.summed_histogram_windows(rows, "queue_time_seconds", window_s=100.0)
    # one window over all: 20 before the restart and 4 after it (a drop counts from 0)
    assert d["count"].tolist() == [24.0]


def test_histogram_windows_without_buckets_give_the_mean_only() -> None:
    rows = pd.DataFrame(
        {
            "target": ["a"] * 4,
            "ts": [0.0, 0.0, 10.0, 10.0],
            "metric": ["e2e_seconds_sum", "e2e_seconds_count"] * 2,
            "value": [1.0, 2.0, 7.0, 5.0],
        }
    )
    w = hw.summed_histogram_windows(rows, "e2e_seconds", window_s=10.0, start=0.0, end=10.0)
    assert w["count"].tolist() == [3.0]
    assert w["mean"].iloc[0] == pytest.approx(2.0)
    assert math.isnan(w["p50"].iloc[0])


def test_histogram_windows_carry_buckets_forward_over_count_only_scrapes() -> None:
    inf = math.inf
    full = _queue_rows(
        [(0.0, {0.1: 1.0, 1.0: 2.0, inf: 2.0}, 0.6), (2.0, {0.1: 5.0, 1.0: 6.0, inf: 6.0}, 1.2)]
    )
    count_only = pd.DataFrame(
        {
            "target": ["a"] * 4,
            "ts": [1.0, 1.0, 3.0, 3.0],
            "metric": ["queue_time_seconds_count", "queue_time_seconds_sum"] * 2,
            "value": [2.0, 0.6, 6.0, 1.2],
        }
    )
    rows = pd.concat([full, count_only], ignore_index=True)
    w = hw.summed_histogram_windows(rows, "queue_time_seconds", window_s=1.0, start=0.0, end=4.0)
    assert w["count"].tolist() == [0.0, 4.0, 0.0, 0.0]
    assert w["p50"].iloc[1] == pytest.approx(0.1 * 2 / 4)  # rank 2 of the 4 new ≤ 0.1
