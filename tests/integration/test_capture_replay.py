"""The real vLLM and SGLang ``/metrics`` captures, replayed as a time series and watched.

tests/replay_captures.py turns each capture into 40 scrapes (15 s apart in the store's time)
whose histograms grow — the capture's own counts × k/40 for SGLang, calm observations for the
idle vLLM capture — with a surge (scrapes 17–24) in the upper buckets and an engine restart at
scrape 31. A real loopback server answers one page per request and the real watcher stores
them in DuckDB. Every window's percentile read back through ``services.views.traffic`` must
equal ``histogram_quantile`` worked out here, independently, on what the engine served in that
window.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from replay_captures import (
    SGLANG_CAPTURE,
    VLLM_CAPTURE,
    WatchedReplay,
    build_replay,
    watch_replay,
)

from services.views.traffic import Traffic, traffic
from store import sample_series
from store.lifecycle import open_store

SCRAPES_PER_WINDOW = 4  # 60 s windows of 15 s scrapes
QUANTILES = (0.5, 0.9, 0.99)


def hand_quantile(q: float, cumulative: Sequence[tuple[float, float]]) -> float:
    """Prometheus' histogram_quantile, written out: the rank q × total falls in the first
    bucket whose cumulative count reaches it; linear inside it from the previous bound (0 for
    the first); in the +Inf bucket, the highest finite bound."""
    total = cumulative[-1][1]
    if total <= 0:
        return math.nan
    rank = q * total
    lower, below = 0.0, 0.0
    for le, count in cumulative:
        if count >= rank:
            if math.isinf(le):
                return lower
            return lower + (le - lower) * (rank - below) / (count - below)
        lower, below = le, count
    raise AssertionError("the +Inf bucket holds every observation")


def _watched(capture: Path, tmp: Path) -> WatchedReplay:
    replay = build_replay(capture)
    return watch_replay(replay, tmp / f"{capture.stem}.duckdb")


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> WatchedReplay:
    return _watched(VLLM_CAPTURE, tmp_path_factory.mktemp("replay-vllm"))


@pytest.fixture(scope="module")
def sglang(tmp_path_factory: pytest.TempPathFactory) -> WatchedReplay:
    return _watched(SGLANG_CAPTURE, tmp_path_factory.mktemp("replay-sglang"))


def _traffic(w: WatchedReplay) -> Iterator[Traffic]:
    store = open_store(w.url)
    try:
        yield traffic(
            store,
            targets=[w.target],
            start=w.ts(0),
            end=w.ts(len(w.replay.pages) - 1),
            window_s=SCRAPES_PER_WINDOW * w.step_s,
            quantiles=QUANTILES,
        )
    finally:
        store.dispose()


@pytest.fixture(scope="module")
def vllm_span(vllm: WatchedReplay) -> Iterator[Traffic]:
    yield from _traffic(vllm)


@pytest.fixture(scope="module")
def sglang_span(sglang: WatchedReplay) -> Iterator[Traffic]:
    yield from _traffic(sglang)


def _window_scrapes(w: WatchedReplay, j: int) -> tuple[int, int]:
    """Window j is (scrape 4j, scrape 4j + 4], the last cut at the last scrape."""
    return SCRAPES_PER_WINDOW * j, min(SCRAPES_PER_WINDOW * (j + 1), len(w.replay.pages) - 1)


def _check_windows(w: WatchedReplay, span: Traffic) -> int:
    """Every driven histogram's every window against the hand computation; returns how many
    percentiles were compared."""
    compared = 0
    for hist, plan in w.replay.hists.items():
        windows = span.windows[hist].reset_index(drop=True)
        assert len(windows) == 10, hist
        for j, row in windows.iterrows():
            first, last = _window_scrapes(w, int(str(j)))
            served = plan.served(first, last)
            assert row["window_start"] == w.ts(first)
            assert row["count"] == pytest.approx(served[-1][1], rel=1e-12), (hist, j)
            for q in QUANTILES:
                col = f"p{round(q * 100)}"
                want = hand_quantile(q, served)
                assert row[col] == pytest.approx(want, rel=1e-9), (hist, j, col, served)
                compared += 1
    return compared


def test_the_watcher_stored_every_page(vllm: WatchedReplay, sglang: WatchedReplay) -> None:
    for w, engine in ((vllm, "vllm"), (sglang, "sglang")):
        store = open_store(w.url)
        try:
            rows = sample_series.engine_histogram_series(store, w.target, "ttft_seconds", since=0)
        finally:
            store.dispose()
        counts = rows[rows["metric"] == "ttft_seconds_count"]
        stored = sorted(float(t) for t in counts["ts"])
        assert stored[: len(w.replay.pages)] == [w.ts(k) for k in range(len(w.replay.pages))]
        assert w.replay.engine == engine


def test_vllm_windows_match_histogram_quantile_by_hand(
    vllm: WatchedReplay, vllm_span: Traffic
) -> None:
    assert vllm_span.engine == "vllm"
    assert set(vllm.replay.hists) == {
        "ttft_seconds",
        "e2e_seconds",
        "queue_time_seconds",
        "prefill_time_seconds",
        "itl_seconds",
        "prompt_length_tokens",
        "output_length_tokens",
    }
    assert _check_windows(vllm, vllm_span) == 7 * 10 * len(QUANTILES)


def test_vllm_surge_raises_p99_and_worked_example(vllm_span: Traffic) -> None:
    ttft = vllm_span.windows["ttft_seconds"].reset_index(drop=True)
    # calm window: 40 TTFTs a window, 24 ≤ 0.04 s, 36 ≤ 0.08 s, 40 ≤ 0.25 s; rank 39.6 lies in
    # (0.1, 0.25]: 0.1 + 0.15 × (39.6 − 36) / 4 = 0.235 s
    assert ttft.loc[1, "p99"] == pytest.approx(0.235)
    assert ttft.loc[1, "p99_precision"] == "P99 inside the 0.1–0.25 s bucket"
    # surge windows (scrapes 17–24): 64 TTFTs, 16 in (2.5, 5], 8 in (10, 20]; rank 63.36:
    # 10 + 10 × (63.36 − 56) / 8 = 19.2 s
    assert ttft.loc[4, "p99"] == pytest.approx(19.2)
    assert ttft.loc[5, "p99"] == pytest.approx(19.2)
    assert ttft.loc[4, "p99_precision"] == "P99 inside the 10–20 s bucket"
    queue = vllm_span.windows["queue_time_seconds"].reset_index(drop=True)
    q99 = queue["p99"].to_numpy(dtype="float64")
    assert q99[4] > 10 * q99[1]


def test_vllm_restart_mid_window_keeps_what_was_served(
    vllm: WatchedReplay, vllm_span: Traffic
) -> None:
    assert vllm.replay.reset_at == 31
    ttft = vllm_span.windows["ttft_seconds"].reset_index(drop=True)
    # window 7 is (scrape 28, scrape 32]: 20 TTFTs before the restart, 20 after
    assert ttft.loc[7, "count"] == 40
    assert ttft.loc[7, "p99"] == pytest.approx(ttft.loc[1, "p99"])
    # the stored counter did drop: the restart is in the data, not smoothed away by the replay
    store = open_store(vllm.url)
    try:
        rows = sample_series.engine_histogram_series(store, vllm.target, "ttft_seconds", since=0)
    finally:
        store.dispose()
    counts = rows[rows["metric"] == "ttft_seconds_count"].sort_values("ts")["value"].to_list()
    assert counts[30] == 30 * 10 + 8 * 6 and counts[31] == 10


def test_vllm_request_and_error_rate(vllm: WatchedReplay, vllm_span: Traffic) -> None:
    req = vllm_span.requests.reset_index(drop=True)
    assert len(req) == 10
    for j, row in req.iterrows():
        first, last = _window_scrapes(vllm, int(str(j)))
        finished = sum(vllm.replay.finished[first + 1 : last + 1])
        failed = sum(vllm.replay.failed[first + 1 : last + 1])
        assert row["finished"] == finished, j
        assert row["failed"] == failed, j
        assert row["request_rate"] == pytest.approx(finished / 60.0)
    # the surge aborted 2 requests a scrape: 8 of 72 in window 4
    assert req.loc[4, "error_rate"] == pytest.approx(8 / 72)
    assert req.loc[1, "error_rate"] == 0


def test_vllm_prompt_lengths_are_the_production_length_mix(
    vllm: WatchedReplay, vllm_span: Traffic
) -> None:
    # vllm:request_prompt_tokens, stored as prompt_length_tokens (tokens, the capture's bounds)
    plan = vllm.replay.hists["prompt_length_tokens"]
    assert plan.family == "vllm:request_prompt_tokens"
    span_mix = vllm_span.lengths["prompt_length_tokens"]
    assert span_mix == plan.served(0, len(vllm.replay.pages) - 1)
    # 39 scrapes × 10 prompts, 8 surge scrapes × 6 more of 3 000 tokens (in (2 000, 5 000])
    assert span_mix[-1] == (math.inf, 39 * 10 + 8 * 6)
    assert dict(span_mix)[5000.0] - dict(span_mix)[2000.0] == 48
    out = vllm_span.lengths["output_length_tokens"]
    assert out[-1][1] == 39 * 10 + 8 * 6


def test_sglang_windows_match_histogram_quantile_by_hand(
    sglang: WatchedReplay, sglang_span: Traffic
) -> None:
    assert sglang_span.engine == "sglang"
    # the capture has TTFT, E2E and per-token histograms, no queue or length histograms
    assert set(sglang.replay.hists) == {"ttft_seconds", "e2e_seconds", "itl_seconds"}
    assert sglang.replay.hists["itl_seconds"].family == "sglang:time_per_output_token_seconds"
    assert _check_windows(sglang, sglang_span) == 3 * 10 * len(QUANTILES)
    assert sglang_span.lengths["prompt_length_tokens"] == []


def test_sglang_capture_distribution_is_kept_per_window(sglang_span: Traffic) -> None:
    # each calm window serves 4/40 of the capture: 8 495 of its 11 008 TTFTs are above the last
    # finite bound (30 s), so even the median is the +Inf bucket, reported as 30 s with the phrase
    ttft = sglang_span.windows["ttft_seconds"].reset_index(drop=True)
    assert ttft.loc[1, "count"] == pytest.approx(11008 * 4 / 40)
    assert ttft.loc[1, "p50"] == 30.0
    assert "+Inf" in str(ttft.loc[1, "p50_precision"])
    # inter-token latency: the capture's 7.4 M tokens, P50 inside (0.075, 0.1]
    itl = sglang_span.windows["itl_seconds"].reset_index(drop=True)
    assert 0.075 < itl["p50"].to_numpy(dtype="float64")[1] <= 0.1
