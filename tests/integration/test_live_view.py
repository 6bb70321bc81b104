"""services.views.live on a real DuckDB store at a fixed ``now``: the span shown, staleness of
targets and GPUs, counter rates; the on-call windows (percentiles from the engines' histograms,
request and error rate) judged against an SLO profile, each breach linked to its incident view;
the production length mix; the selection parsed from URL parameters, bad values refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pandas as pd
import pytest
from live_store import BURST, ERRORS, PER_S, TARGET
from live_store import seed as seed_oncall

from errors import InputError
from services.views.live import (
    REFRESH_S,
    SETTLE_S,
    SPAN_MIN,
    WINDOW_S,
    LiveSelection,
    LiveView,
    investigate_path,
    judged_windows,
    live_view,
    window_grid,
)
from store import ingest
from store.db import Store
from store.lifecycle import open_store

NOW = 1_900_000_200.0  # a multiple of every window used: the grid ends at NOW
LIVE, STOPPED = "http://10.0.0.1:8000/metrics", "http://10.0.0.2:30000/metrics"
TOKENS_PER_S = 250.0
GIB = 2**30
SPAN_S = SPAN_MIN * 60


def _seed(store: Store) -> None:
    """A vLLM target scraped every second over the last minute, an SGLang target that stopped
    10 minutes ago; GPU host a live, host b silent for 14 minutes."""
    ts = NOW - 59 + np.arange(60.0)
    live = [
        pd.DataFrame({"target": LIVE, "engine": "vllm", "ts": ts, "metric": m, "value": v})
        for m, v in (
            ("requests_running", np.full(ts.size, 7.0)),
            ("generation_tokens_total", 1000.0 + TOKENS_PER_S * np.arange(ts.size)),
        )
    ]
    stopped = pd.DataFrame(
        {
            "target": STOPPED,
            "engine": "sglang",
            "ts": NOW - 630 + np.arange(30.0),
            "metric": "requests_running",
            "value": 3.0,
        }
    )
    ingest.add_rows(store, "engine_samples", pd.concat([*live, stopped], ignore_index=True))
    gpus = [
        pd.DataFrame({"host": host, "gpu_index": 0, "ts": times, "mem_used_bytes": GIB})
        for host, times in (("a", ts), ("b", NOW - 900 + np.arange(60.0)))
    ]
    ingest.add_rows(
        store, "gpu_samples", pd.concat(gpus, ignore_index=True).assign(mem_total_bytes=8 * GIB)
    )


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"duckdb:///{tmp_path / 'store.duckdb'}"


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    opened = open_store(url)
    try:
        yield opened
    finally:
        opened.dispose()


def test_an_empty_store_shows_nothing(store: Store) -> None:
    view = live_view(store, LiveSelection(), now=NOW)
    assert view.empty and not view.current
    assert (view.start, view.end) == (NOW - SPAN_S, NOW)
    assert view.judged.empty and view.latency == {}
    assert "interactive-chat" in view.profiles and view.profile is not None


def test_current_span_with_stale_sources_and_rates(store: Store) -> None:
    _seed(store)
    view = live_view(store, LiveSelection(), now=NOW)
    # complete windows only, settled for SETTLE_S: the last one judged ends at NOW − 30
    assert view.current and (view.start, view.end) == (NOW - SPAN_S - WINDOW_S, NOW)
    assert view.windows_request is not None and view.windows_request.end == NOW - WINDOW_S
    assert view.targets["target"].tolist() == [LIVE, STOPPED]
    assert view.target_choices == (LIVE, STOPPED)
    assert view.stale_targets == {STOPPED}
    assert view.targets["generation_tps"].iloc[0] == pytest.approx(TOKENS_PER_S)
    rates = view.generation_rates
    assert set(rates["target"]) == {LIVE} and rates["rate"].to_numpy() == pytest.approx(
        TOKENS_PER_S
    )
    assert view.gpus_latest["host"].tolist() == ["a", "b"]
    assert view.stale_hosts == {"b"}
    # no histograms stored: windows exist but none has a request, so none breaches
    assert not view.breaches.shape[0]


def test_old_samples_show_the_last_recorded_span(store: Store) -> None:
    _seed(store)
    later = NOW + 86_400
    view = live_view(store, LiveSelection(), now=later)
    assert not view.current and not view.empty
    assert view.end == NOW and view.start == NOW - SPAN_S
    assert view.stale_targets == {LIVE, STOPPED} and view.stale_hosts == {"a", "b"}


def _oncall(url: str, **selection: Any) -> tuple[LiveView, pd.DataFrame]:
    seed_oncall(url, NOW)
    store = open_store(url)
    try:
        # SETTLE_S after NOW: the window ending at NOW is complete and settled
        view = live_view(
            store,
            LiveSelection(**selection),
            now=NOW + SETTLE_S,
        )
    finally:
        store.dispose()
    return view, view.judged


def test_windows_from_the_histograms_judged_against_the_profile(url: str) -> None:
    view, judged = _oncall(url, window_s=30, span_min=5, target=TARGET)
    assert view.profile is not None and view.profile.name == "interactive-chat"
    ttft = view.latency["ttft_seconds"]
    # ten 30 s windows over the five minutes, each with 300 requests
    assert ttft["window_start"].tolist() == [NOW - 300 + 30 * k for k in range(10)]
    assert ttft["count"].tolist() == [30.0 * PER_S] * 10
    burst = ttft["window_start"] == NOW - BURST[0]
    # every burst request in (1, 2.5] s: P99 = 1 + 1.5 × 297/300
    assert ttft.loc[burst, "p99"].iloc[0] == pytest.approx(1.0 + 1.5 * 0.99)
    assert ttft.loc[burst, "p99_precision"].iloc[0] == "P99 inside the 1–2.5 s bucket"
    assert (ttft.loc[~burst, "p99"] < 0.1).all()
    assert set(view.latency) == {"ttft_seconds", "e2e_seconds", "queue_time_seconds"}
    # request and error rate per window
    req = view.requests
    errors = req["window_start"] == NOW - ERRORS[0]
    assert req.loc[~errors, "request_rate"].to_numpy() == pytest.approx(PER_S)
    assert req.loc[errors, "request_rate"].iloc[0] == pytest.approx(PER_S + 1.0)
    assert req.loc[errors, "error_rate"].iloc[0] == pytest.approx(30 / 330)
    assert req.loc[~errors, "error_rate"].fillna(0).eq(0).all()
    # breaches: the burst (P99 TTFT 2.49 s > 500 ms) and the errors (9.1 % > 1 %)
    breaches = view.breaches
    assert breaches["window_start"].tolist() == [NOW - BURST[0], NOW - ERRORS[0]]
    assert "P99 TTFT 2.49 s > 500 ms" in breaches["reason"].iloc[0]
    assert "inside the 1–2.5 s bucket" in breaches["reason"].iloc[0]
    assert breaches["reason"].iloc[1].startswith("error rate 9.1% > 1.0%")
    assert int(judged["breach"].sum()) == 2 and len(judged) == 10
    # each window links to its incident view, for this target and exactly that window
    link = urlsplit(breaches["link"].iloc[0])
    assert link.path == "/incident"
    assert parse_qs(link.query) == {
        "target": [TARGET],
        "from": [str(int(NOW - BURST[0]))],
        "to": [str(int(NOW - BURST[1]))],
    }
    assert view.limit_s("ttft_seconds") == pytest.approx(0.5)
    assert view.limit_s("queue_time_seconds") is None
    assert view.slo_column == "p99" and view.quantile_columns == ("p50", "p90", "p99")


def test_another_profile_judges_another_percentile(url: str) -> None:
    # code-completion: P95 TTFT ≤ 200 ms, E2E ≤ 1.5 s, errors ≤ 0.5 %
    view, judged = _oncall(url, window_s=60, span_min=5, slo="code-completion")
    assert judged["breach"].tolist() == [False, False, False, True, True]
    assert view.slo_column == "p95" and "p95" in view.latency["ttft_seconds"].columns
    assert view.quantile_columns == ("p50", "p90", "p95", "p99")
    starts = view.breaches["window_start"].tolist()
    # 60 s windows: the burst (now−120, now−90] lies in (now−120, now−60]; the errors in the next
    assert starts == [NOW - 120, NOW - 60]
    assert "P95 E2E" in view.breaches["reason"].iloc[0]
    assert view.limit_s("e2e_seconds") == pytest.approx(1.5)
    # all targets (none named): the link leaves the target out
    assert "target=" not in view.breaches["link"].iloc[0]


def test_the_length_mix_over_the_span(url: str) -> None:
    view, _ = _oncall(url, window_s=30, span_min=5)
    prompt = view.lengths["prompt_length_tokens"]
    assert prompt.total == pytest.approx(300 * PER_S)
    assert prompt.shares[:3] == pytest.approx((0.6, 0.3, 0.1))
    output = view.lengths["output_length_tokens"]
    assert output.shares == pytest.approx((0.0, 1.0, 0.0))


def test_engine_state_and_gpus_share_the_span(url: str) -> None:
    view, _ = _oncall(url, window_s=30, span_min=5)
    assert view.engine["ts"].min() >= view.start and view.engine["ts"].max() <= view.end
    burst = view.engine[
        (view.engine["metric"] == "kv_cache_usage")
        & (view.engine["ts"] > NOW - BURST[0])
        & (view.engine["ts"] <= NOW - BURST[1])
    ]
    assert burst["value"].eq(0.97).all() and len(burst) == 30
    rates = view.preemption_rates
    in_burst = rates[(rates["ts"] > NOW - BURST[0]) & (rates["ts"] <= NOW - BURST[1])]
    assert in_burst["rate"].to_numpy() == pytest.approx(2.0)
    assert view.gpus["host"].unique().tolist() == ["node-a"]


def test_unknown_profile_and_target_name_what_is_accepted(url: str) -> None:
    seed_oncall(url, NOW)
    store = open_store(url)
    try:
        with pytest.raises(InputError, match=r"\?slo=nope is not an SLO profile.*interactive"):
            live_view(store, LiveSelection(slo="nope"), now=NOW)
        with pytest.raises(InputError, match=r"\?target=http://x is not a watched.*10\.0\.0\.1"):
            live_view(store, LiveSelection(target="http://x"), now=NOW)
        with pytest.raises(InputError, match="window"):
            live_view(store, LiveSelection.from_params({"window": "0"}), now=NOW)
    finally:
        store.dispose()


def test_selection_from_url_parameters() -> None:
    assert LiveSelection.from_params({}) == LiveSelection.default()
    sel = LiveSelection.from_params(
        {"slo": "code-completion", "target": TARGET, "window": "60", "span": "30", "refresh": "5"}
    )
    assert (sel.slo, sel.target, sel.window_s, sel.span_min, sel.refresh_s) == (
        "code-completion",
        TARGET,
        60,
        30,
        5.0,
    )
    assert sel.problem is None and LiveSelection.from_params(sel.params()) == sel
    assert LiveSelection.default().params() == {}
    assert LiveSelection.from_params({"refresh": "0.1"}).refresh_s == 1.0
    assert LiveSelection.from_params({"refresh": "3600"}).refresh_s == 60.0
    assert LiveSelection.from_params({"window": ""}).window_s == WINDOW_S
    assert LiveSelection.default().refresh_s == REFRESH_S


@pytest.mark.parametrize(
    ("params", "says"),
    [
        (
            {"window": "abc"},
            "?window=abc is not accepted: a whole number of seconds from 5 to 3600",
        ),
        ({"window": "2"}, "?window=2 is not accepted"),
        ({"window": "7.5"}, "?window=7.5 is not accepted"),
        ({"span": "0"}, "?span=0 is not accepted: a whole number of minutes from 1 to 180"),
        ({"span": "1", "window": "300"}, "?window=300 is longer than ?span=1 minutes"),
        ({"span": "180", "window": "10"}, "makes 1080 windows: accepted at most 180"),
        ({"span": "180", "window": "59"}, "(a window of at least 60 s for this span)"),
        ({"refresh": "soon"}, "?refresh=soon is not accepted"),
    ],
)
def test_bad_url_parameters_are_a_problem_naming_the_parameter(
    params: dict[str, str], says: str
) -> None:
    sel = LiveSelection.from_params(params)
    assert sel.problem is not None and says in sel.problem


def test_investigate_path_orders_the_range() -> None:
    assert investigate_path(TARGET, NOW, NOW - 60) == investigate_path(TARGET, NOW - 60, NOW)
    assert parse_qs(urlsplit(investigate_path(None, NOW - 60.5, NOW)).query) == {
        "from": [str(int(NOW - 61))],
        "to": [str(int(NOW))],
    }


def test_the_windowed_part_is_built_apart_and_added(url: str) -> None:
    seed_oncall(url, NOW)
    store = open_store(url)
    try:
        sel = LiveSelection(window_s=30, span_min=5)
        bare = live_view(store, sel, now=NOW + SETTLE_S, with_windows=False)
        whole = live_view(store, sel, now=NOW + SETTLE_S)
        request = bare.windows_request
        assert request is not None and request == whole.windows_request
        assert (request.start, request.end, request.target) == (NOW - 300, NOW, None)
        assert bare.judged.empty and bare.latency == {}
        added = bare.with_windows(judged_windows(store, request))
    finally:
        store.dispose()
    pd.testing.assert_frame_equal(added.judged, whole.judged)
    assert hash(request) == hash(whole.windows_request)  # a cache key


def test_windows_sit_on_a_grid_that_refreshes_do_not_move() -> None:
    # 15 minutes in 30 s windows, 12 s into a window: only complete windows, ending at NOW
    assert window_grid(NOW + 12, 900, 30) == (NOW - 900, NOW)
    assert window_grid(NOW + 29, 900, 30) == window_grid(NOW, 900, 30)
    assert window_grid(NOW + 30, 900, 30) == (NOW - 870, NOW + 30)
    # a window that does not divide the span: the span is covered, on the window's grid
    start, end = window_grid(NOW, 60, 7)
    assert start % 7 == 0 and end % 7 == 0 and NOW - 7 < end <= NOW and end - start == 63


def test_a_click_on_the_timeline_investigates_its_window(url: str) -> None:
    view, _ = _oncall(url, window_s=30, span_min=5)
    inside = NOW - BURST[0] + 12
    assert view.investigate_range(inside, inside) == (NOW - BURST[0], NOW - BURST[1])
    # a box wider than a window is kept, clipped to the span
    assert view.investigate_range(NOW + 50, NOW - 100) == (NOW - 100, NOW + SETTLE_S)
    assert view.investigate_range(NOW - 1000, NOW - 200) == (NOW - 300, NOW - 200)


def test_a_model_is_every_target_serving_it_summed(url: str) -> None:
    """Two replicas of one model (the model_name label of their series) and a third target:
    ``?target=model:<name>`` sums the two; the selector offers it; an unknown model is named."""
    other = "http://10.0.0.2:8000/metrics"
    third = "http://10.0.0.3:8000/metrics"
    for t in (TARGET, other, third):
        seed_oncall(url, NOW, target=t)
    store = open_store(url)
    try:
        raw = [
            {
                "target": t,
                "ts": NOW - 60,
                "name": "vllm:num_requests_running",
                "labels": f'{{"engine":"0","model_name":"{m}"}}',
                "value": 1.0,
            }
            for t, m in ((TARGET, "llama"), (other, "llama"), (third, "qwen"))
        ]
        ingest.add_rows(store, "engine_raw_samples", raw)
        one = live_view(store, LiveSelection(target=TARGET), now=NOW)
        model = live_view(store, LiveSelection(target="model:llama"), now=NOW)
        assert {"model:llama", "model:qwen"} <= set(model.target_choices)
        assert set(model.engine["target"]) == {TARGET, other}
        # the two replicas served the same traffic: twice the requests of one, per window
        assert model.requests["finished"].sum() == pytest.approx(2 * one.requests["finished"].sum())
        with pytest.raises(InputError, match=r"\?target=model:nope is not a watched.*model:llama"):
            live_view(store, LiveSelection(target="model:nope"), now=NOW)
    finally:
        store.dispose()
