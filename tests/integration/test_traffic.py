"""services.views.traffic on a real DuckDB file holding rows as the watcher writes them: two
targets of one model, one restarting, windows summed over both; request and error rates; the
span's length histograms; bad spans and unknown targets refused with the known ones listed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from analysis import engine_series
from errors import InputError
from services.views import traffic as tv
from store import ingest
from store.lifecycle import open_store

INF = math.inf
A, B = "http://a:8000/metrics", "http://b:8000/metrics"
C = "http://c:8000/metrics"


def _hist_rows(target: str, hist: str, ts: float, buckets: dict[float, float], total: float):
    rows = [
        {
            "target": target,
            "ts": ts,
            "metric": f"{hist}_bucket:{'+Inf' if math.isinf(le) else repr(le)}",
            "engine": "vllm",
            "value": c,
        }
        for le, c in buckets.items()
    ]
    rows.append(
        {
            "target": target,
            "ts": ts,
            "metric": f"{hist}_count",
            "engine": "vllm",
            "value": buckets[INF],
        }
    )
    rows.append(
        {"target": target, "ts": ts, "metric": f"{hist}_sum", "engine": "vllm", "value": total}
    )
    return rows


def _raw(target: str, ts: float, reason: str, value: float) -> dict[str, object]:
    labels = json.dumps({"finished_reason": reason}, sort_keys=True, separators=(",", ":"))
    return {
        "target": target,
        "ts": ts,
        "name": "vllm:request_success_total",
        "labels": labels,
        "value": value,
    }


@pytest.fixture()
def store_url(tmp_path: Path) -> str:
    url = f"duckdb:///{tmp_path / 'traffic.duckdb'}"
    s = open_store(url)
    rows: list[dict[str, object]] = []
    raw: list[dict[str, object]] = []
    # A: 100 fast requests in (0, 60], then 100 with 10 slow in (60, 120]
    for ts, c in ((0.0, (0, 0, 0)), (60.0, (100, 100, 100)), (120.0, (190, 200, 200))):
        rows += _hist_rows(A, "ttft_seconds", ts, {0.5: c[0], 5.0: c[1], INF: c[2]}, c[2] * 0.3)
        rows += _hist_rows(
            A, "prompt_length_tokens", ts, {512.0: c[2] / 2, 2048.0: c[2], INF: c[2]}, c[2] * 600
        )
        rows.append(
            {
                "target": A,
                "ts": ts,
                "metric": "kv_cache_usage",
                "engine": "vllm",
                "value": c[2] / 200,
            }
        )
        raw += [_raw(A, ts, "stop", c[2] * 0.9), _raw(A, ts, "abort", c[2] * 0.1)]
    # B restarts between 60 and 120: 20 requests before, 10 after (5 of them slow)
    for ts, c in ((0.0, (0, 0, 0)), (60.0, (20, 20, 20)), (120.0, (5, 10, 10))):
        rows += _hist_rows(B, "ttft_seconds", ts, {0.5: c[0], 5.0: c[1], INF: c[2]}, c[2] * 0.3)
        raw += [_raw(B, ts, "stop", c[2]), _raw(B, ts, "abort", 0.0)]
    # both serve one model (the model_name label of their series); a third, idle, another
    for target, model in ((A, "llama-3.1-8b"), (B, "llama-3.1-8b"), (C, "qwen3-8b")):
        labels = json.dumps(
            {"engine": "0", "model_name": model}, sort_keys=True, separators=(",", ":")
        )
        raw.append(
            {
                "target": target,
                "ts": 60.0,
                "name": "vllm:num_requests_running",
                "labels": labels,
                "value": 1.0,
            }
        )
    rows.append(
        {"target": C, "ts": 60.0, "metric": "requests_running", "engine": "vllm", "value": 1.0}
    )
    ingest.add_rows(s, "engine_samples", rows)
    ingest.add_rows(s, "engine_raw_samples", raw)
    s.dispose()
    return url


def test_windows_are_summed_over_targets_with_a_restart(store_url: str) -> None:
    s = open_store(store_url)
    try:
        t = tv.traffic(s, targets=None, start=0.0, end=120.0, window_s=60.0)
    finally:
        s.dispose()
    assert t.targets == (A, B, C) and t.engine == "vllm"
    w = t.windows["ttft_seconds"]
    assert list(w["count"]) == [120.0, 110.0]
    # second window: A +90 ≤0.5, +10 in (0.5, 5]; B restarted: 5 ≤0.5, 5 in (0.5, 5] → 95/15
    second = t.windows["ttft_seconds"].iloc[1]
    expected = engine_series.histogram_quantile(0.99, [(0.5, 95.0), (5.0, 110.0), (INF, 110.0)])
    assert second["p99"] == pytest.approx(expected)
    assert second["p95"] == pytest.approx(
        engine_series.histogram_quantile(0.95, [(0.5, 95.0), (5.0, 110.0), (INF, 110.0)])
    )
    per = t.by_target["ttft_seconds"]
    assert set(per["target"]) == {A, B}
    # requests: A 100 per window with 10 % aborted; B 20, then 10 after its restart
    r = t.requests
    assert list(r["finished"]) == [120.0, 110.0]
    assert r["error_rate"].iloc[0] == pytest.approx(10 / 120)
    # the span's prompt lengths (A only exports them): 200 requests, half ≤ 512
    assert t.lengths["prompt_length_tokens"] == [(512.0, 100.0), (2048.0, 200.0), (INF, 200.0)]
    assert t.windows["prompt_length_tokens"]["mean"].iloc[0] == pytest.approx(600.0)
    assert set(t.state["metric"]) == {"kv_cache_usage", "requests_running"}


def test_one_target_alone_and_the_incident_link(store_url: str) -> None:
    s = open_store(store_url)
    try:
        t = tv.traffic(s, targets=[B], start=0.0, end=120.0, window_s=120.0)
    finally:
        s.dispose()
    assert t.targets == (B,)
    assert list(t.windows["ttft_seconds"]["count"]) == [30.0]
    assert t.lengths["prompt_length_tokens"] == []
    assert tv.incident_path(B, 59.5, 120.2) == (
        "/incident?target=http%3A%2F%2Fb%3A8000%2Fmetrics&from=59&to=121"
    )
    assert tv.incident_path(None, 0, 60) == "/incident?from=0&to=60"


def test_bad_spans_and_unknown_targets_are_refused(store_url: str) -> None:
    s = open_store(store_url)
    try:
        with pytest.raises(InputError, match=r"known targets: http://a:8000/metrics, http://b"):
            tv.traffic(s, targets=["http://nope/metrics"], start=0.0, end=60.0, window_s=10.0)
        with pytest.raises(InputError, match="before it starts"):
            tv.traffic(s, targets=None, start=60.0, end=0.0, window_s=10.0)
        with pytest.raises(InputError, match="at most 7 days"):
            tv.traffic(s, targets=None, start=0.0, end=8 * 86400.0, window_s=60.0)
        with pytest.raises(InputError, match="above 0"):
            tv.traffic(s, targets=None, start=0.0, end=60.0, window_s=0.0)
        assert list(tv.known_targets(s)["key"]) == [A, B, C]
    finally:
        s.dispose()


def test_a_model_sums_the_targets_serving_it(store_url: str) -> None:
    """``model:<name>`` is every target whose series carry model_name=<name>, summed."""
    s = open_store(store_url)
    try:
        assert tv.model_groups(s) == {"model:llama-3.1-8b": (A, B), "model:qwen3-8b": (C,)}
        by_model = tv.traffic(
            s, targets=["model:llama-3.1-8b"], start=0.0, end=120.0, window_s=60.0
        )
        both = tv.traffic(s, targets=[A, B], start=0.0, end=120.0, window_s=60.0)
        with pytest.raises(InputError, match=r"known models: model:llama-3.1-8b, model:qwen3"):
            tv.traffic(s, targets=["model:nope"], start=0.0, end=120.0, window_s=60.0)
    finally:
        s.dispose()
    assert by_model.targets == (A, B)
    assert list(by_model.windows["ttft_seconds"]["count"]) == [120.0, 110.0]
    pd.testing.assert_frame_equal(by_model.windows["ttft_seconds"], both.windows["ttft_seconds"])
