"""analysis.incident: the four troubleshooting patterns judged on hand-built window evidence —
each fires with the numbers that fired it, stays silent without its inputs, and sits exactly on
its thresholds (analysis.diagnose's); a span's figures from window rows and engine samples."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from analysis import incident as inc
from analysis.diagnose import (
    FLAT_GAIN,
    KV_SATURATED_SHARE,
    LATENCY_DRIFT,
    LENGTH_MIX_RATIO,
    LOAD_STEP,
    MEMORY_DRIFT,
    TAIL_RATIO,
)
from analysis.latency import MIN_TREND_SPAN_S, trend

INF = math.inf
T0 = 1_900_000_000.0


def _span(**kw: object) -> inc.SpanSummary:
    return inc.SpanSummary(start=T0, end=T0 + 600, **kw)  # type: ignore[arg-type]


def _ttft(p50: float, p99: float, mean: float | None = None) -> dict[str, inc.SpanLatency]:
    return {
        "ttft_seconds": inc.SpanLatency(
            count=1000,
            mean=mean,
            quantiles={"p50": p50, "p90": p99, "p99": p99},
            precision={"p50": "P50 inside the 0.1–0.25 s bucket", "p99": "P99 inside …"},
        )
    }


# --- rule 1 ---------------------------------------------------------------------------------


def _saturated(**kw: object) -> inc.SpanSummary:
    values: dict[str, object] = {
        "kv_full_share": 0.5,
        "kv_max": 0.98,
        "kv_samples": 300,
        "waiting_mean": 12.0,
        "waiting_max": 30.0,
        "waiting_first_half": 4.0,
        "waiting_second_half": 20.0,
        "preemptions": 7.0,
    }
    values.update(kw)
    return _span(**values)


def test_rule_1_fires_with_its_numbers() -> None:
    ev = inc.IncidentEvidence(during=_saturated(), before=_span(waiting_mean=0.5))
    f = inc.memory_full_queue(ev)
    assert f is not None and f.rule == 1 and f.chart == "state"
    assert f.evidence["samples with KV ≥ 90%"] == "50% of 300"
    assert f.evidence["waiting requests, mean before → during"] == "0.5 → 12.0"
    assert f.evidence["waiting, first half → second half (mean)"] == "4.0 → 20.0"
    assert f.evidence["preemptions during"] == "7"
    assert f.evidence["peak KV usage"] == "98%"
    assert (
        "the queue grew from 0.5 to 12.0" in f.summary and "7 requests were preempted" in f.summary
    )
    assert f.actions


def test_rule_1_boundary_and_each_way_the_queue_may_build() -> None:
    at = _saturated(kv_full_share=KV_SATURATED_SHARE)
    assert inc.memory_full_queue(inc.IncidentEvidence(during=at)) is not None
    below = _saturated(kv_full_share=KV_SATURATED_SHARE - 0.001)
    assert inc.memory_full_queue(inc.IncidentEvidence(during=below)) is None
    # nobody waited: no finding however full the cache
    assert inc.memory_full_queue(inc.IncidentEvidence(during=_saturated(waiting_max=0.0))) is None
    # a flat queue inside, no preemption, no before: silent; with a before that was lower: fires
    flat = _saturated(waiting_first_half=12.0, waiting_second_half=12.0, preemptions=0.0)
    assert inc.memory_full_queue(inc.IncidentEvidence(during=flat)) is None
    grew = inc.IncidentEvidence(during=flat, before=_span(waiting_mean=11.9))
    assert inc.memory_full_queue(grew) is not None
    same = inc.IncidentEvidence(during=flat, before=_span(waiting_mean=12.0))
    assert inc.memory_full_queue(same) is None
    # preemptions alone make it
    preempted = dataclasses.replace(flat, preemptions=1.0)
    assert inc.memory_full_queue(inc.IncidentEvidence(during=preempted)) is not None


def _queueing(queue_mean: float, ttft_mean: float) -> dict[str, inc.SpanLatency]:
    return {
        "ttft_seconds": inc.SpanLatency(count=35, mean=ttft_mean, quantiles={}, precision={}),
        "queue_time_seconds": inc.SpanLatency(
            count=35, mean=queue_mean, quantiles={}, precision={}
        ),
    }


def test_rule_1_on_a_standing_queue_that_is_draining() -> None:
    """The middle of a saturation (seen on a watched sim): KV full, 45 waiting at the peak but
    the queue draining (36.5 → 18.8), fewer waiting than before, no preemption — and 99.5 % of
    TTFT spent queueing. The queue stood through the window: pattern 1."""
    draining = _saturated(
        kv_full_share=0.14,
        waiting_mean=27.7,
        waiting_max=45.0,
        waiting_first_half=36.5,
        waiting_second_half=18.8,
        preemptions=0.0,
        latency=_queueing(27.45, 27.58),
    )
    ev = inc.IncidentEvidence(during=draining, before=_span(waiting_mean=30.0))
    f = inc.memory_full_queue(ev)
    assert f is not None
    assert "a queue of 27.7 requests on average stood through the window (100% of TTFT" in (
        f.summary
    )
    assert f.evidence["share of TTFT spent queueing"] == "100%"
    # on the thresholds: 1 waiting and half of TTFT queueing fire; just below either does not
    at = dataclasses.replace(draining, waiting_mean=inc.STANDING_QUEUE, latency=_queueing(1, 2))
    assert inc.memory_full_queue(inc.IncidentEvidence(during=at, before=ev.before)) is not None
    for below in (
        dataclasses.replace(at, waiting_mean=0.99),
        dataclasses.replace(at, latency=_queueing(0.99, 2)),
        dataclasses.replace(at, latency={}),  # no queue-time histogram: cannot tell
    ):
        assert inc.memory_full_queue(inc.IncidentEvidence(during=below, before=ev.before)) is None


def test_rule_1_is_silent_without_kv_or_queue_samples() -> None:
    assert inc.memory_full_queue(inc.IncidentEvidence(during=_span())) is None
    assert (
        inc.memory_full_queue(inc.IncidentEvidence(during=_saturated(kv_full_share=None))) is None
    )
    assert inc.memory_full_queue(inc.IncidentEvidence(during=_saturated(waiting_mean=None))) is None


# --- rule 2 ---------------------------------------------------------------------------------

#: Prompt lengths: 100 requests ≤ 100 tokens, 800 in (100, 1000], 100 in (1000, 8000].
WIDE = ((100.0, 100.0), (1000.0, 900.0), (8000.0, 1000.0), (INF, 1000.0))
#: 1 000 requests all in (400, 500]: P90/P10 = 490/410, P99/P50 = 499/450.
NARROW = ((400.0, 0.0), (500.0, 1000.0), (INF, 1000.0))


def test_rule_2_fires_on_a_wide_prompt_mix_with_its_numbers() -> None:
    ev = inc.IncidentEvidence(during=_span(latency=_ttft(0.2, 0.8, 0.3), prompt_buckets=WIDE))
    f = inc.tail_from_mix_or_bursts(ev)
    assert f is not None and f.rule == 2 and f.chart == "lengths"
    assert f.title == "Mean fine, P99 high: length mixing"
    assert f.evidence["TTFT mean / P50 / P99 during"] == "300 ms / 200 ms / 800 ms (P99 = 4.0× P50)"
    # P10: rank 100 is the top of (0, 100] → 100; P90: rank 900 is the top of (100, 1000] →
    # 1000 → P90/P10 = 10×
    assert f.evidence["prompt length P10 / P50 / P90 / P99"].startswith("100 / 550 / 1 000 / ")
    assert f.evidence["prompt-length spread (max of P90/P10, P99/P50)"].startswith("13.3×")
    assert any("chunked prefill" in a for a in f.actions)


def test_rule_2_needs_the_tail_and_a_cause() -> None:
    below = inc.IncidentEvidence(
        during=_span(latency=_ttft(0.2, 0.2 * TAIL_RATIO - 1e-9), prompt_buckets=WIDE)
    )
    assert inc.tail_from_mix_or_bursts(below) is None
    at = inc.IncidentEvidence(
        during=_span(latency=_ttft(0.2, 0.2 * TAIL_RATIO), prompt_buckets=WIDE)
    )
    assert inc.tail_from_mix_or_bursts(at) is not None
    narrow = inc.IncidentEvidence(during=_span(latency=_ttft(0.2, 2.0), prompt_buckets=NARROW))
    assert inc.length_spread(NARROW) is not None
    assert inc.length_spread(NARROW).ratio < LENGTH_MIX_RATIO  # type: ignore[union-attr]
    assert inc.tail_from_mix_or_bursts(narrow) is None
    # no TTFT histogram, or no cause measured: silent
    assert (
        inc.tail_from_mix_or_bursts(inc.IncidentEvidence(during=_span(prompt_buckets=WIDE))) is None
    )
    assert (
        inc.tail_from_mix_or_bursts(inc.IncidentEvidence(during=_span(latency=_ttft(0.2, 2))))
        is None
    )


def test_length_mix_boundary_is_the_diagnose_ratio() -> None:
    # 10 % ≤ 100, 80 % in (100, 400], 10 % above: P10 = 100, P90 = 400 → exactly 4×
    at = ((100.0, 100.0), (400.0, 900.0), (401.0, 1000.0), (INF, 1000.0))
    spread = inc.length_spread(at)
    assert spread is not None and spread.p10 == pytest.approx(100.0)
    assert spread.p90 == pytest.approx(400.0)
    ev = inc.IncidentEvidence(during=_span(latency=_ttft(0.1, 0.5), prompt_buckets=at))
    assert spread.ratio >= LENGTH_MIX_RATIO
    assert inc.tail_from_mix_or_bursts(ev) is not None


def test_rule_2_fires_on_bursts_with_the_stated_threshold() -> None:
    bursts = (2.0, 2.0, 40.0, 2.0, 2.0, 38.0, 2.0, 2.0)
    b = inc.burstiness(bursts)
    assert b is not None and b.cv >= inc.BURST_CV and b.dispersion >= inc.BURST_DISPERSION
    ev = inc.IncidentEvidence(
        during=_span(latency=_ttft(0.1, 0.9), prompt_buckets=NARROW),
        request_counts=bursts,
        sub_window_s=20.0,
    )
    f = inc.tail_from_mix_or_bursts(ev)
    assert f is not None and f.title == "Mean fine, P99 high: bursts"
    text = f.evidence["requests per sub-window (CV, variance/mean)"]
    assert text.startswith(f"mean {np.mean(bursts):,.1f} over 8 × 20 s, CV {b.cv:.2f}")
    assert "bursty at CV ≥ 0.5 and variance/mean ≥ 2" in text
    assert any("gateway" in a for a in f.actions)


def test_steady_or_poisson_like_counts_are_not_bursts() -> None:
    steady = (20.0, 21.0, 19.0, 20.0, 22.0, 18.0)
    assert not inc.burstiness(steady).bursty  # type: ignore[union-attr]
    # few requests per sub-window: a CV above 0.5 that Poisson arrivals give (variance ≈ mean)
    sparse = (1.0, 0.0, 2.0, 1.0, 0.0, 1.0, 2.0, 1.0)
    b = inc.burstiness(sparse)
    assert b is not None and b.cv >= inc.BURST_CV and b.dispersion < inc.BURST_DISPERSION
    assert not b.bursty
    # too few sub-windows, NaN (no scrape) skipped, none with requests: not judged
    assert inc.burstiness((1.0, 50.0, 1.0)) is None
    assert inc.burstiness((1.0, math.nan, 50.0, 1.0)) is None
    assert inc.burstiness((0.0, 0.0, 0.0, 0.0)) is None


# --- rule 3 ---------------------------------------------------------------------------------


def _load(
    rate: tuple[float | None, float | None],
    tps: tuple[float | None, float | None],
    waiting: tuple[float | None, float | None] = (None, None),
    **during: object,
) -> inc.IncidentEvidence:
    return inc.IncidentEvidence(
        before=_span(request_rate=rate[0], generation_tps=tps[0], waiting_mean=waiting[0]),
        during=_span(
            request_rate=rate[1], generation_tps=tps[1], waiting_mean=waiting[1], **during
        ),
    )


def test_rule_3_fires_with_its_numbers_and_classifies() -> None:
    f = inc.flat_throughput(_load((4.0, 8.0), (1000.0, 1050.0), gpu_util_mean=0.95))
    assert f is not None and f.rule == 3
    assert f.title == "Throughput flat as load grows (GPU-bound)"
    assert f.evidence["request rate before → during"] == (
        "4.00 → 8.00 req/s (2.0×, a step at ≥ 1.5×)"
    )
    assert f.evidence["generated tokens/s before → during"] == (
        "1,000 → 1,050 (+5%; flat below +10%)"
    )
    cpu = inc.flat_throughput(_load((4.0, 8.0), (1000.0, 1000.0), gpu_util_mean=0.3))
    assert cpu is not None and "CPU-bound" in cpu.title
    unknown = inc.flat_throughput(_load((4.0, 8.0), (1000.0, 1000.0)))
    assert unknown is not None and "unknown" in unknown.title
    assert "watch with --gpu" in unknown.summary


def test_rule_3_boundaries() -> None:
    assert inc.flat_throughput(_load((4.0, 4.0 * LOAD_STEP), (1000.0, 1000.0))) is not None
    assert inc.flat_throughput(_load((4.0, 4.0 * LOAD_STEP - 0.01), (1000.0, 1000.0))) is None
    grew = 1000.0 * (1 + FLAT_GAIN)
    assert inc.flat_throughput(_load((4.0, 8.0), (1000.0, grew))) is None
    assert inc.flat_throughput(_load((4.0, 8.0), (1000.0, grew - 1))) is not None


def test_rule_3_on_a_growing_queue_floors_the_before_at_one_request() -> None:
    # 0 → 1.4 waiting is 1.4× the floor of 1: no step; 0 → 1.5 is one
    assert inc.flat_throughput(_load((None, None), (900.0, 900.0), (0.0, 1.4))) is None
    f = inc.flat_throughput(_load((None, None), (900.0, 900.0), (0.0, 1.5)))
    assert f is not None
    assert f.evidence["waiting requests before → during"].startswith("0.0 → 1.5 (mean) (1.5×")


def test_rule_3_is_silent_without_a_before_or_tokens() -> None:
    assert inc.flat_throughput(inc.IncidentEvidence(during=_span(generation_tps=1.0))) is None
    assert inc.flat_throughput(_load((4.0, 8.0), (None, 1000.0))) is None
    assert inc.flat_throughput(_load((4.0, 8.0), (0.0, 1000.0))) is None
    assert inc.flat_throughput(_load((None, None), (900.0, 900.0))) is None


# --- rule 4 ---------------------------------------------------------------------------------


def _rising(start: float, rel: float, span_s: float, n: int = 40) -> inc.Trend:
    ts = np.linspace(T0, T0 + span_s, n)
    values = start * (1 + rel * (ts - T0) / span_s)
    t = trend(ts, values + np.resize([0.5, -0.5], n))
    assert t is not None
    return t


def test_rule_4_fires_on_a_rising_p99_with_its_numbers() -> None:
    ev = inc.IncidentEvidence(during=_span(), ttft_p99_trend=_rising(400.0, 0.5, 3600.0))
    f = inc.degradation_over_window(ev)
    assert f is not None and f.rule == 4 and f.chart == "latency"
    assert f.evidence["TTFT P99 over the window"].startswith("400 → 600 ms (+50%")
    slope = f.evidence["TTFT P99 slope"]  # 200 ms/h, give or take the ±0.5 ms jitter
    assert slope.endswith(", n=40)")
    assert float(slope.split(" ms/h")[0]) == pytest.approx(200.0, abs=1.0)
    assert "over 60 min" in f.summary


def test_rule_4_thresholds_and_too_short() -> None:
    below = inc.IncidentEvidence(
        during=_span(), e2e_p99_trend=_rising(1000.0, LATENCY_DRIFT - 0.02, 3600.0, n=400)
    )
    assert inc.degradation_over_window(below) is None
    short = _rising(400.0, 0.5, MIN_TREND_SPAN_S - 1)
    ev = inc.IncidentEvidence(during=_span(), ttft_p99_trend=short)
    assert inc.degradation_over_window(ev) is None
    assert any(
        m.startswith("a trend over the window (pattern 4): too short to judge (needs ≥ 10 min")
        for m in inc.missing_inputs(ev)
    )


def test_rule_4_on_gpu_memory() -> None:
    total = 80 * 2**30
    rising = _rising(60 * 2**30, MEMORY_DRIFT * total / (60 * 2**30) + 0.01, 7200.0)
    ev = inc.IncidentEvidence(during=_span(), memory=inc.MemoryTrend("node-a GPU 0", rising, total))
    f = inc.degradation_over_window(ev)
    assert f is not None and "GPU memory slope (node-a GPU 0)" in f.evidence
    flat = _rising(60 * 2**30, 0.01, 7200.0)  # +0.6 GiB of 80: under 2 %
    quiet = inc.IncidentEvidence(during=_span(), memory=inc.MemoryTrend("g", flat, total))
    assert inc.degradation_over_window(quiet) is None


def test_no_evidence_no_finding_and_what_is_missing_is_said() -> None:
    ev = inc.IncidentEvidence(during=_span())
    assert inc.judge(ev) == []
    missing = inc.missing_inputs(ev)
    assert len(missing) == 4
    assert [m[-11:] for m in missing] == [
        "(pattern 1)",
        "(pattern 2)",
        "(pattern 3)",
        "(pattern 4)",
    ]


# --- one span's figures -----------------------------------------------------------------------


def _state(metric: str, ts: list[float], values: list[float], target: str = "a") -> pd.DataFrame:
    return pd.DataFrame(
        {"target": target, "engine": "vllm", "ts": ts, "metric": metric, "value": values}
    )


def test_span_summary_from_window_rows_and_samples() -> None:
    window = pd.DataFrame(
        [
            {
                "window_start": T0, "window_end": T0 + 600, "targets": 1, "count": 200.0,
                "mean": 0.3, "p50": 0.2, "p50_precision": "P50 inside the 0.1–0.25 s bucket",
                "p99": 1.5, "p99_precision": "P99 inside the 1–2.5 s bucket",
            }
        ]
    )  # fmt: skip
    queue = window.assign(mean=0.15)
    ts = [T0 - 10, T0, T0 + 100, T0 + 200, T0 + 400, T0 + 600]
    state = pd.concat(
        [
            # the sample at T0 belongs to the span before (a window is (start, end])
            _state("kv_cache_usage", ts, [0.1, 0.1, 0.95, 0.95, 0.5, 0.2]),
            _state("requests_waiting", ts, [0, 0, 2, 4, 6, 8]),
            _state("requests_waiting", ts, [0, 0, 1, 1, 1, 1], target="b"),
            _state("generation_tokens_total", ts, [0, 1000, 4000, 7000, 13000, 19000]),
            _state("preemptions_total", ts, [5, 5, 6, 1, 2, 2]),  # a restart at T0+200
        ]
    )
    requests = pd.DataFrame(
        [{"finished": 120.0, "failed": 6.0, "request_rate": 0.2, "error_rate": 0.05}]
    )
    s = inc.span_summary(
        start=T0,
        end=T0 + 600,
        windows={"ttft_seconds": window, "queue_time_seconds": queue},
        requests=requests,
        state=state,
        gpus=pd.DataFrame(),
        prompt_buckets=[(100.0, 10.0), (INF, 20.0)],
    )
    assert s.latency["ttft_seconds"].get("p99") == 1.5
    assert s.latency["ttft_seconds"].precision["p99"] == "P99 inside the 1–2.5 s bucket"
    assert s.ttft_share("queue_time_seconds") == pytest.approx(0.5)
    assert s.ttft_share("prefill_time_seconds") is None
    assert s.kv_samples == 4 and s.kv_full_share == pytest.approx(0.5) and s.kv_max == 0.95
    # waiting summed over targets: 3, 5, 7, 9; halves split at T0+300
    assert s.waiting_max == 9 and s.waiting_mean == pytest.approx(6.0)
    assert (s.waiting_first_half, s.waiting_second_half) == (4.0, 8.0)
    assert s.preemptions == pytest.approx(1 + 1 + 1)  # +1, restart to 1, +1
    assert s.generation_tps == pytest.approx(18000 / 600)
    assert s.request_rate == pytest.approx(0.2) and s.error_rate == pytest.approx(0.05)
    assert s.prompt_lengths.total == 20.0
    assert s.gpu_util_mean is None and s.running_mean is None


def test_before_is_the_same_length_immediately_before() -> None:
    assert inc.before_span(1000.0, 1600.0) == (400.0, 1000.0)


def test_comparison_rows_name_before_during_and_change() -> None:
    before = _span(latency=_ttft(0.1, 0.3, 0.12), request_rate=2.0, error_rate=0.0)
    during = _span(latency=_ttft(0.2, 3.0, 0.6), request_rate=4.0, error_rate=0.1, failed=4.0,
                   finished=40.0)  # fmt: skip
    table = inc.comparison(before, during).set_index("measure")
    assert table.loc["TTFT P99", "before"] == "300 ms"
    assert table.loc["TTFT P99", "during"] == "3.00 s"
    assert table.loc["TTFT P99", "change"] == "×10"
    assert table.loc["TTFT P99", "note"] == "during: P99 inside …; before: P99 inside …"
    assert table.loc["error rate", "change"] == "+10 pts"
    assert table.loc["error rate", "note"] == "4 failed of 40 during"
    assert table.loc["request rate", "change"] == "×2"
    # a histogram with no requests before: said, not left blank
    only_during = inc.comparison(_span(), during).set_index("measure")
    assert only_during.loc["TTFT P50", "before"] == "—"
    assert only_during.loc["TTFT P50", "change"] == "—"
    assert only_during.loc["TTFT P50", "note"] == "during: P50 inside the 0.1–0.25 s bucket"
    assert table.loc["generated tokens/s", "during"] == "—"
