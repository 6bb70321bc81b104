"""services.views.incident on a real DuckDB store filled with engine samples as the watcher
writes them (histogram buckets ``<hist>_bucket:<le>``, ``_sum``, ``_count``, gauges, counters,
raw finished-request counters): a calm quarter hour, then a KV-saturation episode. The view
names pattern 1 with its numbers, compares before and during, and refuses bad URLs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from incident_store import GIB, OTHER, SPAN, T0, TARGET, Engine, episode, write
from replay_captures import (
    SGLANG_CAPTURE,
    VLLM_CAPTURE,
    WatchedReplay,
    build_replay,
    watch_replay,
)

from analysis.engine_series import histogram_quantile
from analysis.incident import length_spread
from errors import InputError
from services.views.incident import (
    IncidentRequest,
    incident_choices,
    incident_view,
    parse_time,
    sub_window_s,
)
from services.views.traffic import incident_path
from store.db import Store
from store.lifecycle import open_store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = open_store(f"duckdb:///{tmp_path / 'store.duckdb'}")
    try:
        yield opened
    finally:
        opened.dispose()


@pytest.fixture
def saturated(store: Store) -> Store:
    engine = Engine(TARGET)
    episode(engine)
    write(store, [engine])
    return store


def _during() -> IncidentRequest:
    return IncidentRequest(TARGET, T0 + SPAN, T0 + 2 * SPAN)


def test_a_saturation_episode_names_pattern_1_with_its_numbers(saturated: Store) -> None:
    view = incident_view(saturated, _during())
    assert view.targets == (TARGET,) and view.engine == "vllm"
    assert (view.before.start, view.before.end) == (T0, T0 + SPAN)
    rules = [f.rule for f in view.findings]
    assert 1 in rules
    one = next(f for f in view.findings if f.rule == 1)
    assert one.title == "Memory full and the queue building"
    assert one.evidence["peak KV usage"] == "97%"
    # every sample of the during span is ≥ 90 % (the one at T0+900 is the calm span's last)
    assert one.evidence["samples with KV ≥ 90%"] == "100% of 900"
    assert one.evidence["waiting requests, mean before → during"] == "0.0 → 22.5"
    assert one.evidence["preemptions during"] == "90"
    assert one.evidence["waiting requests (peak)"] == "45"
    assert "share of TTFT spent queueing" in one.evidence
    assert float(one.evidence["share of TTFT spent queueing"].rstrip("%")) > 90
    assert one.actions and one.chart == "state"
    # the narrow prompt mix and steady arrivals do not make pattern 2
    assert 2 not in rules
    # the queue rose (0 → 22.5, floored at 1: 22.5×) while tokens/s grew 4 %: pattern 3, and
    # the full KV cache / busy GPU make it GPU-bound
    three = next(f for f in view.findings if f.rule == 3)
    assert "GPU-bound" in three.title
    assert "+4%" in three.evidence["generated tokens/s before → during"]


def test_before_vs_during_figures(saturated: Store) -> None:
    view = incident_view(saturated, _during())
    b, d = view.before, view.during
    # 4 requests/s over 900 s in each span, from the finished-request counter
    assert b.finished == pytest.approx(3600) and d.finished == pytest.approx(3600)
    assert d.request_rate == pytest.approx(4.0) and d.error_rate == 0.0
    assert d.request_source == "finished-request counters"
    # TTFT percentiles over the whole span from the summed bucket increases, with precision:
    # before every TTFT is 50 ms (≤0.1 bucket); during the P50 rank 1800 lies in (1, 2.5]
    # (2 700 requests there) → 1 + 1.5 × 1800/2700 = 2.0 s; P99 in (2.5, 10] → 2.5 + 7.5 ×
    # (3564 − 2700)/900 = 9.7 s
    assert b.latency["ttft_seconds"].get("p50") == pytest.approx(0.05)
    assert d.latency["ttft_seconds"].get("p50") == pytest.approx(2.0)
    assert d.latency["ttft_seconds"].get("p99") == pytest.approx(9.7)
    assert d.latency["ttft_seconds"].precision["p99"] == "P99 inside the 2.5–10 s bucket"
    # queueing share of TTFT: mean queue / mean TTFT from _sum / _count
    assert d.ttft_share("queue_time_seconds") == pytest.approx(3.2 / 3.26, rel=1e-6)
    assert b.ttft_share("prefill_time_seconds") == pytest.approx(0.045 / 0.05)
    assert b.generation_tps == pytest.approx(500.0) and d.generation_tps == pytest.approx(520.0)
    assert d.gpu_util_mean == pytest.approx(0.95) and b.gpu_mem_total_bytes == 80 * GIB
    # the same prompt mix before and during: KS distance 0
    assert view.prompt_during.total == pytest.approx(3600)
    assert view.length_distance == pytest.approx(0.0)
    table = view.comparison.set_index("measure")
    assert table.loc["TTFT P99", "during"] == "9.70 s"
    assert table.loc["TTFT P99", "note"] == (
        "during: P99 inside the 2.5–10 s bucket; before: P99 inside the 0–0.1 s bucket"
    )
    assert table.loc["request rate", "during"] == "4.00 req/s"
    # charts: 30 sub-windows of 30 s per span, on one grid
    assert view.window_s == 30.0
    assert len(view.windows["ttft_seconds"]) == 60
    assert not view.state.empty and not view.gpus.empty
    # 15 minutes is long enough to judge a trend: the flat P99 of 30 s sub-windows is none
    assert not any("pattern 4" in m for m in view.missing)


def test_a_window_over_3_5_days_is_read_span_by_span(saturated: Store) -> None:
    """Before + during over 7 days cannot be one read: each span is read alone, with the same
    figures (here the same samples: the episode's calm quarter hour is the 4-day before's end,
    its saturated quarter hour the 4-day window's start)."""
    days = 4 * 86_400.0
    view = incident_view(saturated, IncidentRequest(TARGET, T0 + SPAN, T0 + SPAN + days))
    assert (view.before.start, view.before.end) == (T0 + SPAN - days, T0 + SPAN)
    short = incident_view(saturated, _during())
    for span, same in ((view.before, short.before), (view.during, short.during)):
        assert span.finished == same.finished
        assert span.latency["ttft_seconds"].quantiles == same.latency["ttft_seconds"].quantiles
        assert span.kv_full_share == same.kv_full_share
    assert 1 in [f.rule for f in view.findings]
    assert len(view.windows["ttft_seconds"]) == 60  # 30 sub-windows of 3.2 h per span
    assert view.window_s == days / 30


def test_a_calm_window_finds_nothing(saturated: Store) -> None:
    view = incident_view(saturated, IncidentRequest(TARGET, T0 + 600, T0 + 900))
    assert view.findings == ()
    # 5 minutes: a trend is too short to judge, and the page says so
    assert any("too short to judge (needs ≥ 10 min" in m for m in view.missing)


def test_all_targets_are_summed_when_none_is_named(store: Store) -> None:
    a, b = Engine(TARGET), Engine(OTHER)
    episode(a)
    episode(b)
    write(store, [a, b], gpu=False)
    view = incident_view(store, IncidentRequest(None, T0 + SPAN, T0 + 2 * SPAN))
    assert view.targets == (TARGET, OTHER)
    assert view.during.finished == pytest.approx(7200)
    assert view.during.waiting_max == pytest.approx(90)  # summed over the two targets
    assert 1 in [f.rule for f in view.findings]


def test_an_unknown_target_lists_the_known_ones(saturated: Store) -> None:
    with pytest.raises(InputError, match=re.escape(f"known targets: {TARGET}")):
        incident_view(saturated, IncidentRequest("http://nope:1/metrics", T0, T0 + 60))


def test_a_window_with_no_samples_is_empty(saturated: Store) -> None:
    view = incident_view(saturated, IncidentRequest(TARGET, T0 + 86_400, T0 + 86_460))
    assert view.empty and view.findings == ()


def test_the_form_defaults_to_the_last_15_minutes_of_the_newest_target(saturated: Store) -> None:
    choices = incident_choices(saturated)
    assert choices.targets == ((TARGET, T0 + 2 * SPAN),)
    assert (choices.target, choices.start, choices.end) == (TARGET, T0 + 900, T0 + 1800)
    req = _during()
    assert incident_choices(saturated, req).start == req.start


def test_request_from_url_parameters() -> None:
    assert IncidentRequest.from_params({}) is None
    req = IncidentRequest.from_params({"target": TARGET, "from": "1900000900", "to": "1900001800"})
    assert req == _during()
    assert req is not None and req.path == incident_path(TARGET, T0 + SPAN, T0 + 2 * SPAN)
    assert IncidentRequest.from_params(req.params()) == req
    iso = IncidentRequest.from_params(
        {"target": TARGET, "from": "2030-03-17T17:46:40Z", "to": "2030-03-17T18:01:40+00:00"}
    )
    assert iso is not None and (iso.start, iso.end) == (1_900_000_000.0, 1_900_000_900.0)
    assert parse_time("from", "2030-03-17T17:46:40") == 1_900_000_000.0  # no offset: UTC
    assert IncidentRequest.from_params({"from": "1", "to": "2"}) == IncidentRequest(None, 1, 2)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"target": TARGET}, "from is missing; accepted: epoch seconds"),
        ({"from": "100"}, "to is missing"),
        ({"from": "yesterday", "to": "200"}, "from='yesterday' is not a time; accepted"),
        ({"from": "100", "to": "nan"}, "to='nan' is not a time"),
        ({"from": "200", "to": "100"}, "must be before to"),
        ({"from": "0", "to": str(8 * 86400)}, "spans 8.0 days; accepted: at most 7 days"),
    ],
)
def test_bad_url_parameters_name_the_parameter(params: dict[str, str], message: str) -> None:
    with pytest.raises(InputError, match=message):
        IncidentRequest.from_params(params)


def test_sub_windows_tile_the_span() -> None:
    assert sub_window_s(900) == 30.0
    assert sub_window_s(60) == 10.0
    assert sub_window_s(5) == 5.0


# --- the real vLLM and SGLang captures, replayed as a time series and watched -----------------


@pytest.fixture(scope="module")
def vllm_replay(tmp_path_factory: pytest.TempPathFactory) -> WatchedReplay:
    return watch_replay(build_replay(VLLM_CAPTURE), tmp_path_factory.mktemp("i") / "v.duckdb")


def test_the_vllm_capture_surge_is_pattern_2_from_length_mixing(vllm_replay: WatchedReplay) -> None:
    """Scrapes 17–24 of the replayed vLLM capture add long prompts (3 000 tokens) and slow
    TTFTs (3 s, 12 s) to the calm mix: the incident view of the surge names pattern 2, and its
    figures are what the engine served in each span."""
    w = vllm_replay
    request = IncidentRequest(w.target, w.ts(16), w.ts(24))  # scrapes 17..24: the surge
    store = open_store(w.url)
    try:
        view = incident_view(store, request)
    finally:
        store.dispose()
    assert (view.before.start, view.before.end) == (w.ts(8), w.ts(16))
    plans = w.replay.hists
    served = plans["prompt_length_tokens"].served(16, 24)
    assert [le for le, _ in view.during.prompt_buckets] == [le for le, _ in served]
    assert [c for _, c in view.during.prompt_buckets] == pytest.approx([c for _, c in served])
    ttft = plans["ttft_seconds"].served(16, 24)
    during = view.during.latency["ttft_seconds"]
    assert during.get("p50") == pytest.approx(histogram_quantile(0.5, ttft))
    assert during.get("p99") == pytest.approx(histogram_quantile(0.99, ttft))
    assert view.before.latency["ttft_seconds"].get("p99") == pytest.approx(
        histogram_quantile(0.99, plans["ttft_seconds"].served(8, 16))
    )
    two = next(f for f in view.findings if f.rule == 2)
    assert "length mixing" in two.title
    spread = length_spread(served)
    assert spread is not None and spread.ratio >= 4
    assert two.evidence["prompt-length spread (max of P90/P10, P99/P50)"].startswith(
        f"{spread.ratio:.1f}×"
    )
    assert two.evidence["TTFT P99 precision"].startswith("P99 inside the 10–20 s bucket")
    # the surge's aborted requests are its error rate, from vLLM's finished_reason counter
    assert view.during.error_rate is not None and view.during.error_rate > 0
    assert view.before.error_rate == 0


def test_the_sglang_capture_says_its_percentiles_are_in_the_inf_bucket(
    tmp_path: Path,
) -> None:
    w = watch_replay(build_replay(SGLANG_CAPTURE), tmp_path / "s.duckdb")
    store = open_store(w.url)
    try:
        view = incident_view(store, IncidentRequest(w.target, w.ts(20), w.ts(30)))
    finally:
        store.dispose()
    assert view.engine == "sglang"
    table = view.comparison.set_index("measure")
    assert "(the +Inf bucket)" in str(table.loc["TTFT P50", "note"])
    assert table.loc["TTFT P50", "during"] == "30.0 s"  # the highest finite bound, as stated
