"""On call, end to end on the sim: a watched engine driven into KV saturation by a burst.

The store is real (tests/oncall_store.py: ``servescope sim`` with 256 KV blocks, ``servescope
watch`` at 0.5 s, the load generator's calm / burst / calm phases). The windows are read back
through the one loader (``services.views.traffic.traffic``), judged against a catalog SLO
profile (``analysis.slo_windows.window_breaches``) and investigated
(``services.views.incident.incident_view``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pandas as pd
import pytest
from oncall_store import SaturationStore, build_saturation_store

from analysis import slo
from analysis.slo_windows import window_breaches
from services.commands.slo_profiles import slo_profiles
from services.views.incident import IncidentRequest, incident_view
from services.views.traffic import Traffic, incident_path, traffic
from store.db import Store
from store.lifecycle import open_store

WINDOW_S = 2.0
#: The burst needs a moment to fill the KV cache and build a queue; windows judged as "burst"
#: start this long after its first request.
SETTLE_S = 2.0


@pytest.fixture(scope="module")
def saturation(tmp_path_factory: pytest.TempPathFactory) -> SaturationStore:
    return build_saturation_store(tmp_path_factory.mktemp("oncall"))


@pytest.fixture(scope="module")
def store(saturation: SaturationStore) -> Iterator[Store]:
    s = open_store(saturation.url)
    try:
        yield s
    finally:
        s.dispose()


@pytest.fixture(scope="module")
def span(saturation: SaturationStore, store: Store) -> Traffic:
    # one second past the last request: the scrapes that saw it finish
    return traffic(
        store,
        targets=None,
        start=saturation.calm_start,
        end=saturation.end + 1.0,
        window_s=WINDOW_S,
    )


def _calm(df: pd.DataFrame, s: SaturationStore) -> pd.DataFrame:
    """Windows wholly before the burst in which requests finished."""
    return df[(df["window_end"] <= s.burst_start) & (df["count"] > 0)]


def _burst(df: pd.DataFrame, s: SaturationStore) -> pd.DataFrame:
    """Windows wholly inside the saturated part of the burst."""
    inside = (df["window_start"] >= s.burst_start + SETTLE_S) & (df["window_end"] <= s.burst_end)
    return df[inside & (df["count"] > 0)]


def test_the_watched_target_is_the_sim(saturation: SaturationStore, span: Traffic) -> None:
    assert span.targets == (saturation.target,)
    assert span.engine == "sim"


def test_ttft_and_queue_p99_rise_in_the_burst(saturation: SaturationStore, span: Traffic) -> None:
    ttft = span.windows["ttft_seconds"]
    queue = span.windows["queue_time_seconds"]
    calm, burst = _calm(ttft, saturation), _burst(ttft, saturation)
    assert len(calm) >= 2 and len(burst) >= 2, (calm, burst)
    # calm: one or two sequences at a time, TTFT is one prefill (tens of ms)
    assert calm["p99"].max() < 0.25, calm[["window_start", "p99", "p99_precision"]]
    # burst: requests wait for KV blocks; every saturated window's P99 is seconds
    assert burst["p99"].min() > 1.0, burst[["window_start", "p99", "p99_precision"]]
    assert burst["p99"].median() > 10 * calm["p99"].max()
    # the precision is stated with the bucket
    assert all(p.startswith("P99 inside the ") for p in burst["p99_precision"])
    assert (burst["p99_lower"] <= burst["p99"]).all() and (burst["p99"] <= burst["p99_upper"]).all()
    # the queue explains it: queue-time P99 rises with TTFT
    q_calm, q_burst = _calm(queue, saturation), _burst(queue, saturation)
    assert q_burst["p99"].min() > 1.0
    assert q_burst["p99"].median() > 3 * q_calm["p99"].max()
    # and the burst finishes far more requests per window than calm
    assert burst["count"].median() > 3 * calm["count"].median()


def test_engine_state_shows_the_kv_cache_full_and_a_queue(
    saturation: SaturationStore, span: Traffic
) -> None:
    state = span.state
    kv = state[state["metric"] == "kv_cache_usage"]
    waiting = state[state["metric"] == "requests_waiting"]
    in_burst = (kv["ts"] > saturation.burst_start) & (kv["ts"] < saturation.burst_end)
    before = kv["ts"] < saturation.burst_start
    assert kv[in_burst]["value"].max() >= 0.95
    assert kv[before]["value"].max() < 0.5
    w_burst = waiting[
        (waiting["ts"] > saturation.burst_start) & (waiting["ts"] < saturation.burst_end)
    ]
    assert w_burst["value"].max() >= 10
    assert waiting[waiting["ts"] < saturation.burst_start]["value"].max() <= 1
    pre = state[state["metric"] == "preemptions_total"].sort_values("ts")
    assert pre["value"].iloc[-1] - pre["value"].iloc[0] > 0


def test_every_request_is_counted_once(saturation: SaturationStore, span: Traffic) -> None:
    # the histograms' counts, the finished counter and the prompt-length mix all account for
    # exactly the requests the load generator completed
    assert span.windows["ttft_seconds"]["count"].sum() == saturation.requests
    assert span.windows["e2e_seconds"]["count"].sum() == saturation.requests
    req = span.requests
    assert req["finished"].sum() == saturation.requests
    assert req["failed"].sum() == 0
    burst_rate = req[
        (req["window_start"] >= saturation.burst_start + SETTLE_S)
        & (req["window_end"] <= saturation.burst_end)
    ]["request_rate"]
    calm_rate = req[req["window_end"] <= saturation.burst_start]["request_rate"]
    assert burst_rate.median() > 3 * calm_rate.mean()
    prompt = span.lengths["prompt_length_tokens"]
    assert prompt and prompt[-1][0] == math.inf
    assert prompt[-1][1] == saturation.requests
    # short-in-short-out: lognormal prompts of mean 128 tokens, capped at 512
    below_500 = dict(prompt)[500.0]
    assert below_500 == saturation.requests


def test_burst_windows_breach_interactive_chat_and_calm_ones_do_not(
    saturation: SaturationStore, store: Store, span: Traffic
) -> None:
    profile = slo.SloProfile.from_entry(slo_profiles(store)["interactive-chat"])
    assert profile.ttft_ms == 500.0 and profile.percentile == 99
    judged = window_breaches(span.windows, profile, span.requests)
    assert len(judged) == len(span.windows["ttft_seconds"])
    counts = span.windows["ttft_seconds"].set_index("window_start")["count"]
    judged = judged.assign(count=judged["window_start"].map(counts))
    calm = judged[judged["window_end"] <= saturation.burst_start]
    burst = _burst(judged, saturation)
    assert len(burst) >= 2
    assert not calm["breach"].any(), calm[["window_start", "reason"]]
    assert burst["breach"].all(), burst[["window_start", "reason"]]
    assert burst["ttft_ms_breach"].all()
    assert (burst["ttft_ms_value_ms"] > burst["ttft_ms_limit_ms"]).all()
    assert all("TTFT" in r and "> 500 ms" in r for r in burst["reason"])
    # windows where nothing finished are never a breach
    assert not judged[judged["count"] == 0]["breach"].any()


def test_the_incident_view_names_pattern_1_with_its_numbers(
    saturation: SaturationStore, store: Store
) -> None:
    # the burst's link, as the Live page's breach mark builds it, parsed back as the page does
    path = incident_path(saturation.target, saturation.burst_start, saturation.burst_end)
    params = {k: v[0] for k, v in parse_qs(urlsplit(path).query).items()}
    request = IncidentRequest.from_params(params)
    assert request is not None and request.target == saturation.target
    view = incident_view(store, request)
    assert view.targets == (saturation.target,)
    rules = [f.rule for f in view.findings]
    assert 1 in rules, [(f.rule, f.summary) for f in view.findings]
    kv_full = next(f for f in view.findings if f.rule == 1)
    assert kv_full.title == "Memory full and the queue building"
    during, before = view.during, view.before
    # its numbers are the window's: KV full, a queue, preemptions, TTFT mostly queueing
    assert during.kv_max is not None and during.kv_max >= 0.95
    assert during.kv_full_share is not None and during.kv_full_share >= 0.5
    assert during.waiting_max is not None and during.waiting_max >= 10
    assert during.preemptions is not None and during.preemptions > 0
    ev = kv_full.evidence
    assert ev["peak KV usage"] == f"{during.kv_max:.0%}"
    assert ev["waiting requests (peak)"] == f"{during.waiting_max:.0f}"
    assert ev["preemptions during"] == f"{during.preemptions:.0f}"
    assert float(ev["share of TTFT spent queueing"].rstrip("%")) >= 50
    assert kv_full.actions and "KV" in kv_full.actions[0]
    # before vs during: the same length before the burst was calm
    assert before.kv_max is not None and before.kv_max < 0.5
    assert during.latency["ttft_seconds"].quantiles["p99"] > (
        10 * before.latency["ttft_seconds"].quantiles["p99"]
    )
