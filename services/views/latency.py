"""The Latency page's view model (the on-call view): percentiles by length bucket, P99 TTFT over
time, the slowest requests beside the engine's state when they arrived, TTFT split into
queueing and prefill, and a diagnosis.

URL: ``?run=<id>&edges=256,1k,4k&by=input&window=60-300&top=20&metric=ttft_ms`` (window: seconds
from the run's first request). :class:`LatencySelection` is what the URL asks for,
:class:`LatencyView` everything the page shows, :func:`latency_view` builds it from store reads
and ``analysis.latency`` / ``analysis.diagnose``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import pandas as pd

from analysis import diagnose
from analysis import latency as latency_analysis
from analysis.buckets import DEFAULT_EDGES, bucket_labels, parse_edges
from analysis.metrics import low_confidence, min_samples_for
from errors import ConfigError
from services.views import imported_runs
from services.views.measurement import RunMeasurement, run_measurement
from services.views.run_window import WINDOW_PARAM, RunWindow, parse_window, run_window
from store import request_rows, request_stats, runs_table, sample_timelines
from store.db import Store

#: The metrics a bucket chart can show, with their names.
METRICS: Final[Mapping[str, str]] = {
    "ttft_ms": "TTFT",
    "tpot_ms": "TPOT",
    "itl_ms": "ITL",
    "e2e_ms": "E2E",
}
#: What the buckets are made of, with their names.
BY: Final[Mapping[str, str]] = {"input": "input length", "output": "output length"}
#: Most requests read for the scatter, the prefill fit and the in-flight estimate.
SAMPLE_LIMIT: Final = request_rows.SAMPLE_LIMIT
#: How many of the slowest requests are explained by default, and at most.
DEFAULT_TOP: Final = request_rows.DEFAULT_TOP
MAX_TOP: Final = 200
#: Runs offered in the picker (plus the one asked for).
RUNS_LIMIT: Final = 200
#: The URL parameters of the page's selections (and ``?window=``, ``run_window.WINDOW_PARAM``).
RUN_PARAM, EDGES_PARAM, BY_PARAM, TOP_PARAM, METRIC_PARAM = "run", "edges", "by", "top", "metric"

Bounds = tuple[float | None, float | None]
_ENGINE_COLUMNS: Final = ("target", "metric", "ts", "value", "max_value")


def edges_from_text(text: str | None) -> tuple[tuple[int, ...], ConfigError | None]:
    """The bucket edges ``text`` gives (``"256,1k,4k"``; None: the default edges), and None;
    for unreadable or empty text, the default edges and the error that says why."""
    if text is None:
        return DEFAULT_EDGES, None
    try:
        return parse_edges(text), None
    except ConfigError as exc:
        return DEFAULT_EDGES, exc


def top_from_text(text: str | None) -> int:
    """``?top=``: how many slowest requests, within 1..MAX_TOP (unreadable: the default)."""
    with contextlib.suppress(ValueError):
        return max(1, min(MAX_TOP, int(text or DEFAULT_TOP)))
    return DEFAULT_TOP


@dataclass(frozen=True)
class LatencySelection:
    """What the Latency page is asked to show; the defaults are the page's first view."""

    run_id: str | None = None  # None (or a run that does not exist): the newest run
    edges: tuple[int, ...] = DEFAULT_EDGES
    by: str = "input"  # a key of BY
    window: tuple[float, float] | None = None  # seconds from the first request; None: all
    top: int = DEFAULT_TOP
    metric: str = "ttft_ms"  # a key of METRICS: the one the bucket chart and table show

    @classmethod
    def default(cls, run_id: str | None = None) -> LatencySelection:
        """The page's first view of ``run_id`` (the newest run when None)."""
        return cls(run_id=run_id)

    @classmethod
    def from_params(cls, params: Mapping[str, str | None]) -> LatencySelection:
        """The selection a URL's query parameters describe (unreadable values: the defaults)."""
        by = params.get(BY_PARAM) or ""
        metric = params.get(METRIC_PARAM) or ""
        return cls(
            run_id=params.get(RUN_PARAM) or None,
            edges=edges_from_text(params.get(EDGES_PARAM))[0],
            by=by if by in BY else "input",
            window=parse_window(params.get(WINDOW_PARAM)),
            top=top_from_text(params.get(TOP_PARAM)),
            metric=metric if metric in METRICS else "ttft_ms",
        )


@dataclass(frozen=True)
class BucketPercentiles:
    """P50 … P99.9 of the shown metric per length bucket."""

    metric: str
    by: str
    rows: pd.DataFrame  # bucket_latency's rows (the chart)
    table: pd.DataFrame  # one row per bucket, ready to show (:func:`bucket_table`)


@dataclass(frozen=True)
class OverTime:
    """P99 TTFT per bucket × time window, and the request sample of the scatter."""

    t0: float  # the first window's start (epoch seconds)
    window_s: float  # each window's length
    heatmap: pd.DataFrame  # ttft_heatmap: per bucket × window, per window (bucket −1), all
    sample: pd.DataFrame  # request_sample: every ``stride``-th request of the selection
    stride: int
    total: int  # requests in the selection


@dataclass(frozen=True)
class SlowestRequests:
    """The top-N slowest requests (by TTFT), with the run's in-flight count and the engine's
    state when each arrived."""

    table: pd.DataFrame  # ready to show (:func:`slowest_table`); empty: no request with a TTFT
    engine_sampled: bool  # False: the run has no engine samples (the state columns are empty)
    every_target: bool  # True: engine state from every target that reported during the run


@dataclass(frozen=True)
class PrefillSplit:
    """TTFT split into queueing and prefill, from the prefill fit of lightly loaded requests."""

    fit: latency_analysis.PrefillFit | None  # None: too few lightly loaded requests
    fit_run_id: str  # the run fitted: this one, else the lightest of its series that fits
    split: pd.DataFrame | None  # ttft_split_by_bucket (None without a fit)


@dataclass(frozen=True)
class Diagnosis:
    """The four rules' findings, and the evidence their charts draw."""

    evidence: diagnose.DiagnosisInput
    findings: tuple[diagnose.Finding, ...]  # empty: no issue found
    missing: tuple[str, ...]  # what the rules could not look at
    ttft_by_input: pd.DataFrame  # bucket_latency's TTFT rows by input length
    timeline: pd.DataFrame  # TTFT P50 over time (the trend's points)


@dataclass(frozen=True)
class LatencyView:
    """Everything the Latency page shows, for ``selection`` as resolved (the run shown; no
    window when it spans the whole run). ``run_id`` None: the store holds no run. An
    aggregates-only import or a run without requests has nothing more; ``span`` None: the
    requests carry no send times (no window, no views over time, no TTFT split)."""

    selection: LatencySelection
    runs: pd.DataFrame  # the run choices (runs_table.list_runs), newest first
    run_id: str | None = None
    tool: imported_runs.ToolSummary = field(default_factory=imported_runs.ToolSummary)
    aggregates_only: bool = False
    requests: int = 0
    span: tuple[float, float] | None = None  # first send, last done (epoch seconds)
    window: RunWindow | None = None
    labels: tuple[str, ...] = ()  # the buckets' names, by index (from the selection's edges)
    buckets: BucketPercentiles | None = None
    over_time: OverTime | None = None
    slowest: SlowestRequests | None = None
    prefill: PrefillSplit | None = None
    diagnosis: Diagnosis | None = None
    measurement: RunMeasurement | None = None  # ServeScope's own runs: how it was measured


def latency_view(store: Store, selection: LatencySelection) -> LatencyView:
    """The Latency page for ``selection``: the run asked for (else the newest) and, when it has
    requests, every part of the page. Reads only what is shown: the bucket percentiles of the
    chosen metric (plus TTFT by input for the diagnosis)."""
    listed = runs_table.list_runs(store, limit=RUNS_LIMIT, include=selection.run_id)
    run_ids = [str(r) for r in listed["run_id"]]
    if not run_ids:
        return LatencyView(selection=selection, runs=listed)
    run_id = selection.run_id if selection.run_id in run_ids else run_ids[0]
    tool = imported_runs.tool_summary(store, run_id)
    count, span = run_span(request_rows.request_span(store, (run_id,)))
    window = run_window(*span, selection.window) if span is not None else None
    # the selection as resolved: this run, and no window when it spans the whole run
    selection = dataclasses.replace(
        selection, run_id=run_id, window=None if window is None or window.whole else window.chosen
    )
    if imported_runs.is_aggregates_only({"requests": count}, tool.summary):
        return LatencyView(selection, listed, run_id, tool, aggregates_only=True)
    if count == 0:
        return LatencyView(selection, listed, run_id, tool, span=span)
    bounds: Bounds = window.bounds if window is not None else (None, None)
    labels = tuple(bucket_labels(selection.edges))
    buckets = bucket_percentiles(store, run_id, selection, bounds, labels)
    levels = runs_table.load_levels(store, run_id)
    over_time, prefill, engine = None, None, None
    if span is None:
        slowest = slowest_requests(store, run_id, selection.top, bounds, pd.DataFrame(), {})
    else:
        over_time = _over_time(store, run_id, selection.edges, span, bounds, count)
        engine, sources = engine_for_run(store, run_id)
        slowest = slowest_requests(store, run_id, selection.top, bounds, engine, sources)
        prefill = _prefill(store, run_id, over_time, levels, selection.edges)
    return LatencyView(
        selection=selection,
        runs=listed,
        run_id=run_id,
        tool=tool,
        requests=count,
        span=span,
        window=window,
        labels=labels,
        buckets=buckets,
        over_time=over_time,
        slowest=slowest,
        prefill=prefill,
        diagnosis=_diagnosis(store, run_id, selection, bounds, buckets, over_time, engine, levels),
        measurement=run_measurement(store, run_id),
    )


def _diagnosis(
    store: Store,
    run_id: str,
    selection: LatencySelection,
    bounds: Bounds,
    buckets: BucketPercentiles,
    over_time: OverTime | None,
    engine: pd.DataFrame | None,
    levels: pd.DataFrame,
) -> Diagnosis:
    """The four rules over what the page read (the heatmap's TTFT, else a summary of its own;
    TTFT by input: the shown buckets when they are those, else a read of their own) and the
    series' load levels."""
    if over_time is None:
        ttft = _first_row(request_rows.ttft_summary(store, (run_id,), *bounds))
        timeline = diagnose.ttft_over_time(None, t0=0.0, window_s=1.0)
    else:
        ttft = diagnose.heatmap_ttft(over_time.heatmap)
        timeline = diagnose.ttft_over_time(
            over_time.heatmap, t0=over_time.t0, window_s=over_time.window_s
        )
    ttft_by_input = (
        buckets.rows
        if selection.by == "input" and selection.metric == "ttft_ms"
        else request_stats.bucket_latency(
            store, (run_id,), selection.edges, "input", *bounds, ("ttft_ms",)
        )
    )
    evidence = diagnose.diagnosis_input(
        ttft=ttft,
        buckets=diagnose.input_buckets(
            ttft_by_input, selection.edges, over_time.sample if over_time is not None else None
        ),
        timeline=timeline,
        engine=engine,
        load=_load_points(store, levels),
    )
    return Diagnosis(
        evidence=evidence,
        findings=tuple(diagnose.diagnose(evidence)),
        missing=tuple(diagnose.missing_inputs(evidence)),
        ttft_by_input=ttft_by_input,
        timeline=timeline,
    )


def _first_row(frame: pd.DataFrame) -> dict[str, Any]:
    return {str(k): v for k, v in frame.iloc[0].items()} if not frame.empty else {}


def _number(value: Any) -> float | None:
    return None if value is None or bool(pd.isna(value)) else float(value)


def run_span(span: pd.DataFrame) -> tuple[int, tuple[float, float] | None]:
    """``request_span``'s row → (requests, (first send, last done — else last send)); the span
    is None when no request has a send time."""
    row = _first_row(span)
    count = int(_number(row.get("requests")) or 0)
    first = _number(row.get("first_sent"))
    if first is None:
        return count, None
    last = _number(row.get("last_done"))
    if last is None:
        last = _number(row.get("last_sent"))
    return count, (first, last if last is not None else first)


def bucket_percentiles(
    store: Store,
    run_id: str,
    selection: LatencySelection,
    bounds: Bounds,
    labels: tuple[str, ...],
) -> BucketPercentiles:
    """The shown metric's percentiles per bucket (each metric is a sort of the whole selection,
    so only the shown one is read)."""
    rows = request_stats.bucket_latency(
        store, (run_id,), selection.edges, selection.by, *bounds, (selection.metric,)
    )
    return BucketPercentiles(selection.metric, selection.by, rows, bucket_table(rows, labels))


def bucket_table(rows: pd.DataFrame, labels: tuple[str, ...] | list[str]) -> pd.DataFrame:
    """``bucket_latency``'s rows for display: metric, bucket, samples, P50 … P99.9 (ms, one
    decimal) and the P99's confidence (low under ``min_samples_for(99)`` samples)."""
    if rows.empty:
        return pd.DataFrame()
    low = f"low (< {min_samples_for(99.0)} samples)"
    return pd.DataFrame(
        {
            "metric": rows["metric"].map(METRICS),
            "bucket": ["all" if int(b) < 0 else labels[int(b)] for b in rows["bucket"]],
            "samples": rows["n"].astype("int64"),
            **{
                name: rows[column].astype("float64").round(1)
                for column, name, _ in latency_analysis.BUCKET_PERCENTILES
            },
            "P99 confidence": [low if low_confidence(99.0, int(n)) else "ok" for n in rows["n"]],
        }
    )


def _over_time(
    store: Store,
    run_id: str,
    edges: tuple[int, ...],
    span: tuple[float, float],
    bounds: Bounds,
    requests_in_run: int,
) -> OverTime:
    """The heatmap over about 24 windows of the selection, and its request sample."""
    t0 = bounds[0] if bounds[0] is not None else span[0]
    t1 = bounds[1] if bounds[1] is not None else span[1]
    window_s = latency_analysis.heatmap_window_s(max(t1 - t0, 1.0))
    run = (run_id,)
    heatmap = request_stats.ttft_heatmap(
        store, run, edges, t0=t0, window_s=window_s, since=bounds[0], until=bounds[1]
    )
    sample, stride = request_rows.request_sample(store, run, SAMPLE_LIMIT, *bounds)
    total = (
        requests_in_run
        if bounds == (None, None)
        else int(request_rows.request_span(store, run, *bounds)["requests"].iloc[0])
    )
    return OverTime(t0, window_s, heatmap, sample, stride, total)


def engine_for_run(store: Store, run_id: str) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The run's engine series (binned) and its live sources (``run_sources``)."""
    sources = sample_timelines.run_sources(store, run_id)
    since, until = sources.get("since"), sources.get("until")
    if not sources.get("targets") or since is None or until is None:
        return pd.DataFrame(columns=list(_ENGINE_COLUMNS)), sources
    engine = sample_timelines.engine_timeline(
        store, tuple(sources["targets"]), since=float(since), until=float(until) + 1.0
    )
    return engine, sources


def slowest_requests(
    store: Store,
    run_id: str,
    top: int,
    bounds: Bounds,
    engine: pd.DataFrame,
    sources: Mapping[str, Any],
) -> SlowestRequests:
    """The ``top`` slowest successful requests by TTFT with the run's exact in-flight count
    and the engine's state (``engine``) when each was sent."""
    slow = request_rows.slowest_requests(store, (run_id,), top, "ttft_ms", *bounds)
    if slow.empty:
        return SlowestRequests(pd.DataFrame(), not engine.empty, False)
    sent = tuple(float(t) for t in slow["sent_at"].dropna())
    flight = request_rows.in_flight_at(store, run_id, sent)
    slow = slow.merge(flight.rename(columns={"t": "sent_at"}), on="sent_at", how="left")
    state = latency_analysis.engine_state_at(slow, engine)
    every_target = bool(sources) and not sources.get("recorded")
    return SlowestRequests(slowest_table(state), not engine.empty, every_target)


def slowest_table(state: pd.DataFrame) -> pd.DataFrame:
    """``engine_state_at``'s rows for display: rank, seq, send time (UTC, ms), lengths, TTFT,
    E2E, in flight, waiting, running, KV usage (%), preemptions within ±10 s."""
    return pd.DataFrame(
        {
            "rank": state["rank"],
            "seq": state["seq"],
            "sent (UTC)": pd.to_datetime(state["sent_at"], unit="s")
            .dt.strftime("%H:%M:%S.%f")
            .str[:-3],
            "input tokens": state["input_tokens"],
            "output tokens": state["output_tokens"],
            "TTFT ms": state["ttft_ms"].round(1),
            "E2E ms": state["e2e_ms"].round(1),
            "in flight (run)": state["in_flight"],
            "waiting": state["waiting"].round(1),
            "running": state["running"].round(1),
            "KV usage": state["kv_usage"].map(lambda v: "—" if pd.isna(v) else f"{v:.0%}"),
            "preemptions ±10 s": state["preemptions"],
        }
    )


def _prefill(
    store: Store, run_id: str, over_time: OverTime, levels: pd.DataFrame, edges: tuple[int, ...]
) -> PrefillSplit:
    """The prefill fit (:func:`fit_for_run`) and the selection's TTFT split by bucket."""
    fit, fit_run_id = fit_for_run(store, run_id, over_time.sample, over_time.stride, levels)
    split = (
        None if fit is None else latency_analysis.ttft_split_by_bucket(over_time.sample, fit, edges)
    )
    return PrefillSplit(fit, fit_run_id, split)


def fit_for_run(
    store: Store, run_id: str, sample: pd.DataFrame, stride: int, levels: pd.DataFrame
) -> tuple[latency_analysis.PrefillFit | None, str]:
    """The prefill fit from the run's own lightly loaded requests (``sample``, 1 in ``stride``),
    else from the lightest other run of its series (``levels``; a closed loop at high
    concurrency is never lightly loaded); returns the fit and the run it came from."""
    fit = latency_analysis.fit_prefill(latency_analysis.with_in_flight(sample, stride=stride))
    if fit is not None:
        return fit, run_id
    for other in levels.sort_values("load")["run_id"]:
        if other == run_id:
            continue
        other_sample, other_stride = request_rows.request_sample(store, (str(other),), SAMPLE_LIMIT)
        fit = latency_analysis.fit_prefill(
            latency_analysis.with_in_flight(other_sample, stride=other_stride)
        )
        if fit is not None:
            return fit, str(other)
    return None, run_id


def _load_points(store: Store, levels: pd.DataFrame) -> pd.DataFrame:
    """The series' load levels with each run's GPU and engine state (rule 3)."""
    if levels.empty:
        return diagnose.load_points(levels, pd.DataFrame())
    states = sample_timelines.run_states(store, tuple(str(r) for r in levels["run_id"]))
    return diagnose.load_points(levels, states)
