"""Streamlit helpers of the Latency page: selections synced with the URL, loading, rendering.

Selections live in ``st.query_params`` so a URL can be pasted into an incident channel:
``?run=<id>&edges=256,1k,4k&by=input&window=60-300&top=20&metric=ttft_ms`` (window: seconds
from the run's first request). Reads go through ``ui.cache.latency``; figures come from
``ui.latency_charts``; the analysis from ``analysis.latency`` and ``analysis.diagnose``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from analysis import diagnose as dx
from analysis import latency as an
from analysis.buckets import (
    DEFAULT_EDGES,
    assign_buckets,
    bucket_labels,
    format_tokens,
    parse_edges,
)
from errors import ConfigError, ServeScopeError
from store import latency_queries
from ui import crosscheck_view, display, latency_charts, state
from ui.cache import latency as cache_latency
from ui.errors import show_error

#: Most requests read for the scatter, the prefill fit and the in-flight estimate.
SAMPLE_LIMIT = latency_queries.SAMPLE_LIMIT
METRICS = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "itl_ms": "ITL", "e2e_ms": "E2E"}
BY = {"input": "input length", "output": "output length"}


# --- selections (URL-synced widgets) -----------------------------------------------------------


def sync(key: str, param: str, to_text: Callable[[Any], str]) -> Callable[[], None]:
    def _changed() -> None:
        value = st.session_state.get(key)
        text = to_text(value) if value is not None else ""
        if text:
            st.query_params[param] = text
        elif param in st.query_params:
            del st.query_params[param]

    return _changed


def url_value(param: str) -> str | None:
    value = st.query_params.get(param)
    return value or None


def _init(key: str, value: Any) -> None:
    if key not in st.session_state:
        st.session_state[key] = value


@dataclass(frozen=True)
class Selection:
    run_id: str
    edges: tuple[int, ...]
    by: str
    window: tuple[float | None, float | None]  # absolute sent_at bounds (None: whole run)
    window_text: str  # as shown / in the URL, "" for the whole run
    top: int
    metric: str


def edges_input(key: str = "latency_edges") -> tuple[int, ...]:
    """The bucket edges text box (``?edges=``); invalid text → default edges and an error."""
    default = ",".join(format_tokens(e) for e in DEFAULT_EDGES)
    _init(key, url_value("edges") or default)
    text = st.text_input(
        "Input-length bucket edges (tokens, k = 1,024)",
        key=key,
        on_change=sync(key, "edges", str),
    )
    try:
        return parse_edges(text)
    except ConfigError as exc:
        st.error(display.md_escape(exc.message) + "  \n" + display.md_escape(exc.hint or ""))
        return DEFAULT_EDGES


def window_slider(
    key: str,
    first: float,
    last: float,
    *,
    label: str = "Window (seconds from the run's first request)",
) -> tuple[tuple[float | None, float | None], str]:
    """A slider over the run's span in seconds from its start (``?window=a-b``)."""
    span = max(1.0, math.ceil(last - first))
    wanted = url_value("window")
    lo, hi = 0.0, span
    if wanted:
        try:
            a, b = (float(x) for x in wanted.split("-", 1))
            lo, hi = max(0.0, min(a, span)), max(0.0, min(b, span))
        except ValueError:
            pass
    _init(key, (lo, hi))
    chosen: Any = st.slider(
        label,
        min_value=0.0,
        max_value=float(span),
        step=max(1.0, float(round(span / 200))),
        key=key,
        on_change=sync(
            key, "window", lambda v: "" if tuple(v) == (0.0, span) else f"{v[0]:g}-{v[1]:g}"
        ),
    )
    a, b = (float(v) for v in chosen)
    if (a, b) == (0.0, span):
        return (None, None), ""
    return (first + a, first + b + 1e-6), f"{a:g}–{b:g} s"


def controls(run_id: str, span: tuple[float, float] | None) -> Selection:
    """The page's selection widgets (keys latency_edges, latency_by, latency_window,
    latency_top, latency_metric), each mirrored in the URL."""
    left, mid, right = st.columns([3, 2, 2])
    with left:
        edges = edges_input()
    _init("latency_by", url_value("by") if url_value("by") in BY else "input")
    by = mid.radio(
        "Buckets by",
        list(BY),
        format_func=BY.__getitem__,
        horizontal=True,
        key="latency_by",
        on_change=sync("latency_by", "by", str),
    )
    _init("latency_metric", url_value("metric") if url_value("metric") in METRICS else "ttft_ms")
    metric = right.selectbox(
        "Metric",
        list(METRICS),
        format_func=METRICS.__getitem__,
        key="latency_metric",
        on_change=sync("latency_metric", "metric", str),
    )
    window: tuple[float | None, float | None] = (None, None)
    window_text = ""
    if span is not None:
        window, window_text = window_slider("latency_window", *span)
    top_default = latency_queries.DEFAULT_TOP
    with contextlib.suppress(ValueError):
        top_default = max(1, min(200, int(url_value("top") or top_default)))
    _init("latency_top", top_default)
    top = st.number_input(
        "Slowest requests to explain (top N by TTFT)",
        min_value=1,
        max_value=200,
        step=5,
        key="latency_top",
        on_change=sync("latency_top", "top", lambda v: str(int(v))),
    )
    return Selection(run_id, edges, str(by), window, window_text, int(top), str(metric))


# --- what the page shows ---------------------------------------------------------------------


def show_empty() -> None:
    st.info("The store holds no runs yet. Fill it with one of these commands:")
    st.code("\n".join(display.EMPTY_STORE_COMMANDS), language="bash")
    st.caption(
        "`servescope demo` measures three simulated engines at concurrency 1, 8 and 32 and "
        "records their /metrics, so every part of this page has data."
    )


def pick_run(show_empty: Callable[[], None]) -> tuple[str, dict[str, str]]:
    """The run picker of the one-run pages (Latency, Memory), synced with ``?run=``: returns
    (the chosen run, every choice's label). Stops the page — after saying why — on a store
    error, on an empty store (``show_empty``) and when nothing is chosen."""
    try:
        runs = cache_latency.runs(state.requested_run())
    except ServeScopeError as exc:
        show_error(exc)
        st.stop()
    if runs.empty:
        show_empty()
        st.stop()
    choices = display.run_choices(runs)
    run_id = state.run_picker(choices)
    if run_id is None:
        st.stop()
    return run_id, choices


def aggregates_only(run_id: str) -> bool:
    """True (and says what cannot be shown, and why) for an aggregate-only import."""
    source, summary = crosscheck_view.tool_summary(run_id)
    span = cache_latency.request_span((run_id,))
    requests = int(span["requests"].iloc[0]) if not span.empty else 0
    if not crosscheck_view.is_aggregates_only({"requests": requests}, summary):
        return False
    st.warning(
        f"Aggregates only: this {display.md_escape(source or 'imported')} run has no per-request "
        "rows, so percentiles by length bucket, the heatmap over time, the scatter, the "
        "slowest requests, the TTFT split and the diagnosis cannot be computed: they all need "
        "each request's length and timings. The tool's own figures:",
        icon=":material/table_chart:",
    )
    table = crosscheck_view.aggregates_table(summary)
    if not table.empty:
        st.dataframe(table, hide_index=True, key="latency_tool_aggregates")
    return True


def bucket_table(df: pd.DataFrame, labels: list[str]) -> pd.DataFrame:
    """``bucket_latency`` for display: one row per metric × bucket with n and P50 … P99.9,
    a P99 confidence flag."""
    if df.empty:
        return pd.DataFrame()
    return pd.DataFrame(
        {
            "metric": df["metric"].map(METRICS),
            "bucket": ["all" if int(b) < 0 else labels[int(b)] for b in df["bucket"]],
            "samples": df["n"].astype("int64"),
            **{
                name: df[col].astype("float64").round(1)
                for col, name, _ in latency_charts.BUCKET_PCTS
            },
            "P99 confidence": [
                "low (< 100 samples)" if an_low else "ok"
                for an_low in (int(n) < 100 for n in df["n"])
            ],
        }
    )


def render_buckets(sel: Selection) -> pd.DataFrame:
    """Per-bucket percentiles of the chosen metric (chart and table; the metric select box
    switches both: each metric is a sort of the whole selection, so only the shown one is
    computed); returns TTFT by input bucket (for the diagnosis)."""
    labels = bucket_labels(sel.edges)
    shown = cache_latency.bucket_latency(
        (sel.run_id,), sel.edges, sel.by, sel.window, (sel.metric,)
    )
    st.subheader(f"{METRICS[sel.metric]} percentiles by {BY[sel.by]}")
    st.plotly_chart(
        latency_charts.bucket_percentiles(shown, labels, METRICS[sel.metric]),
        key="latency_bucket_chart",
    )
    st.dataframe(bucket_table(shown, labels), hide_index=True, key="latency_bucket_table")
    if sel.by == "input" and sel.metric == "ttft_ms":
        return shown
    return cache_latency.bucket_latency((sel.run_id,), sel.edges, "input", sel.window, ("ttft_ms",))


def render_over_time(
    sel: Selection, t0: float, duration_s: float
) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """Heatmap of P99 TTFT by bucket × window and the TTFT vs input scatter; returns the
    heatmap's rows (with the per-window totals, bucket −1), the request sample and its
    stride."""
    st.subheader("Over time")
    w = an.heatmap_window_s(duration_s)
    heat = cache_latency.ttft_heatmap((sel.run_id,), sel.edges, t0, w, sel.window)
    st.plotly_chart(
        latency_charts.ttft_heatmap(heat, bucket_labels(sel.edges), t0=t0, window_s=w),
        key="latency_heatmap",
    )
    sample, stride = cache_latency.request_sample((sel.run_id,), SAMPLE_LIMIT, sel.window)
    total = int(cache_latency.request_span((sel.run_id,), sel.window)["requests"].iloc[0])
    st.plotly_chart(
        latency_charts.ttft_scatter(sample, stride=stride, total=total), key="latency_scatter"
    )
    if stride > 1:
        st.caption(
            f"Sampled: every {stride:,}th request ({len(sample):,} of {total:,}, at most "
            f"{SAMPLE_LIMIT:,}); in-flight counts for the prefill fit are estimated from this "
            f"sample × {stride:,}."
        )
    return heat, sample, stride


@dataclass(frozen=True)
class Why:
    fit: an.PrefillFit | None
    engine: pd.DataFrame
    sources: dict[str, Any]


def engine_for_run(run_id: str) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The run's engine series (binned) and its live sources."""
    src = cache_latency.run_sources(run_id)
    since, until = src.get("since"), src.get("until")
    if not src.get("targets") or since is None or until is None:
        return pd.DataFrame(columns=["target", "metric", "ts", "value", "max_value"]), src
    eng = cache_latency.engine_timeline(tuple(src["targets"]), float(since), float(until) + 1.0)
    return eng, src


def render_why(sel: Selection, sample: pd.DataFrame, stride: int) -> Why:
    """The slowest requests with the engine state at arrival, and the TTFT split."""
    engine, src = engine_for_run(sel.run_id)
    render_slowest(sel, engine, src)
    st.subheader("Why: queueing vs prefill")
    fit, source = fit_for_run(sel.run_id, sample, stride)
    if fit is None:
        st.info(
            "Too few lightly loaded requests to fit prefill per input token (need "
            f"{an.MIN_FIT_POINTS} sent with at most {an.LIGHT_MAX_IN_FLIGHT:g} in flight, with "
            "two input lengths) in this run or a lighter run of its series. A concurrency-1 "
            "run of the same engine gives the fit."
        )
    else:
        r2 = "—" if fit.r2 is None else f"{fit.r2:.2f}"
        where = (
            "" if source == sel.run_id else f" of run {display.md_escape(source)} (lighter load)"
        )
        st.caption(
            f"Prefill ≈ {fit.intercept_ms:,.1f} ms + {fit.ms_per_token * 1000:,.2f} ms per 1k "
            f"input tokens, fitted on {fit.n:,} requests{where} sent with ≤ {fit.light_max:g} "
            f"in flight (R² {r2}); queueing = TTFT − prefill."
        )
        split = an.ttft_split_by_bucket(sample, fit, sel.edges)
        st.plotly_chart(latency_charts.ttft_split(split), key="latency_split_chart")
    return Why(fit, engine, src)


def fit_for_run(run_id: str, sample: pd.DataFrame, stride: int) -> tuple[an.PrefillFit | None, str]:
    """The prefill fit from the run's own lightly loaded requests, else from the lightest other
    run of its series (a closed loop at high concurrency is never lightly loaded); returns the
    fit and the run it came from."""
    fit = an.fit_prefill(an.with_in_flight(sample, stride=stride))
    if fit is not None:
        return fit, run_id
    levels = cache_latency.load_levels(run_id)
    for other in levels.sort_values("load")["run_id"]:
        if other == run_id:
            continue
        other_sample, other_stride = cache_latency.request_sample((str(other),), SAMPLE_LIMIT)
        fit = an.fit_prefill(an.with_in_flight(other_sample, stride=other_stride))
        if fit is not None:
            return fit, str(other)
    return None, run_id


def render_slowest(
    sel: Selection, engine: pd.DataFrame | None = None, src: dict[str, Any] | None = None
) -> None:
    """The top-N slowest requests (by TTFT) with the run's in-flight count and the engine's
    state when each arrived."""
    st.subheader("Why: the slowest requests")
    engine = engine if engine is not None else pd.DataFrame()
    slow = cache_latency.slowest((sel.run_id,), sel.top, "ttft_ms", sel.window)
    if slow.empty:
        st.info("No successful request with a TTFT in this selection.")
        return
    sent = tuple(float(t) for t in slow["sent_at"].dropna())
    flight = cache_latency.in_flight_at(sel.run_id, sent)
    slow = slow.merge(flight.rename(columns={"t": "sent_at"}), on="sent_at", how="left")
    state = an.engine_state_at(slow, engine)
    st.dataframe(slowest_table(state), hide_index=True, key="latency_slowest_table")
    if engine.empty:
        st.caption(
            "No engine samples for this run: run `servescope bench` against an endpoint that "
            "serves /metrics (collected automatically), or `servescope watch --metrics URL` "
            "during the run."
        )
    elif src is not None and not src.get("recorded"):
        st.caption("Engine state from every target that reported during the run's span.")


def slowest_table(state: pd.DataFrame) -> pd.DataFrame:
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


# --- diagnosis ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    """What the diagnosis looked at, kept for its charts."""

    inp: dx.DiagnosisInput
    by_input: pd.DataFrame
    labels: list[str]
    timeline: pd.DataFrame
    run_id: str


def diagnosis_input(
    sel: Selection,
    by_input: pd.DataFrame,
    heat: pd.DataFrame | None,
    engine: pd.DataFrame | None,
    sample: pd.DataFrame | None = None,
    *,
    t0: float = 0.0,
    window_s: float = 1.0,
) -> Evidence:
    """What the four rules look at, mostly from what the page already read: TTFT P50/mean/P99
    of the selection, its input buckets (median input length per bucket from the request
    sample), the heatmap's per-window totals (TTFT P50 over time), the engine series and the
    series' load levels."""
    labels = bucket_labels(sel.edges)
    if heat is not None:  # the heatmap's whole-selection row, else a read of its own
        whole = heat[(heat["bucket"] < 0) & (heat["window"] < 0)]
        total = {f"ttft_{k}": v for k, v in display.first_row(whole).items()}
    else:
        total = display.first_row(cache_latency.ttft_summary((sel.run_id,), sel.window))
    ttft = by_input[by_input["metric"] == "ttft_ms"]
    buckets = pd.DataFrame(
        {
            "bucket": [labels[int(b)] for b in ttft["bucket"]],
            "n": ttft["n"].to_numpy(),
            "p50_ms": ttft["p50_ms"].to_numpy(),
            "p99_ms": ttft["p99_ms"].to_numpy(),
        }
    )
    if sample is not None and not sample.empty and not buckets.empty:
        ok = sample[(sample["status"] == "ok") & sample["input_tokens"].notna()]
        medians = ok.groupby(assign_buckets(ok["input_tokens"], sel.edges), observed=True)[
            "input_tokens"
        ].median()
        buckets["median_input"] = [float(medians.get(b, float("nan"))) for b in buckets["bucket"]]
    tl = pd.DataFrame({"window_start": pd.Series(dtype="float64"), "ttft_p50_ms": []})
    if heat is not None and not heat.empty:
        per_window = heat[(heat["bucket"] < 0) & (heat["window"] >= 0)]
        tl = pd.DataFrame(
            {
                "window_start": t0 + per_window["window"].astype("float64") * window_s,
                "ttft_p50_ms": per_window["p50_ms"].astype("float64"),
            }
        )
    lat_trend = an.trend(tl["window_start"].to_numpy(), tl["ttft_p50_ms"].to_numpy())

    def num(key: str) -> float | None:
        v: Any = total.get(key)
        return None if display.is_missing(v) else float(v)

    inp = dx.DiagnosisInput(
        engine=engine if engine is not None and not engine.empty else None,
        ttft_p50_ms=num("ttft_p50_ms"),
        ttft_mean_ms=num("ttft_mean_ms"),
        ttft_p99_ms=num("ttft_p99_ms"),
        buckets=buckets if not buckets.empty else None,
        load=load_points(sel.run_id),
        latency_trend=lat_trend,
    )
    return Evidence(inp, by_input, labels, tl, sel.run_id)


def load_points(run_id: str) -> pd.DataFrame:
    """The series' load levels with throughput, client-bound flag, GPU util and peak KV."""
    levels = cache_latency.load_levels(run_id)
    if levels.empty:
        return pd.DataFrame(
            columns=["load", "throughput", "client_bound", "gpu_util", "kv_max", "running_max"]
        )
    states = cache_latency.run_states(tuple(str(r) for r in levels["run_id"]))
    return pd.DataFrame(
        {
            "run_id": levels["run_id"],
            "load": levels["load"],
            "concurrency": pd.to_numeric(levels["concurrency"]).astype("float64"),
            "throughput": levels["output_throughput"],
            "output_throughput": levels["output_throughput"],
            "client_bound": levels["client_bound"].fillna(False).astype(bool),
            "gpu_util": states["gpu_util"].to_numpy(),
            "kv_max": states["kv_max"].to_numpy(),
            "running_max": states["running_max"].to_numpy(),
        }
    )


def render_diagnosis(ev: Evidence) -> list[dx.Finding]:
    """The findings, each with its evidence table, chart and actions; or "no issue found"."""
    st.subheader("Diagnosis")
    findings = dx.diagnose(ev.inp)
    if not findings:
        st.success("No issue found by the four rules.", icon=":material/check_circle:")
        missing = dx.missing_inputs(ev.inp)
        if missing:
            st.caption(
                "Not checked for lack of data: " + display.md_escape("; ".join(missing)) + "."
            )
        return findings
    for f in findings:
        with st.container(border=True, key=f"finding_{f.rule}"):
            st.markdown(f"**{f.rule}. {display.md_escape(f.title)}**")
            st.markdown(display.md_escape(f.summary))
            st.dataframe(
                pd.DataFrame({"evidence": list(f.evidence), "value": list(f.evidence.values())}),
                hide_index=True,
                key=f"finding_{f.rule}_evidence",
            )
            chart = finding_chart(f, ev)
            if chart is not None:
                st.plotly_chart(chart, key=f"finding_{f.rule}_chart")
            st.markdown("\n".join(f"- {display.md_escape(a)}" for a in f.actions))
    return findings


def finding_chart(f: dx.Finding, ev: Evidence) -> go.Figure | None:
    """The chart that shows a finding's evidence."""
    inp = ev.inp
    if f.chart == "kv_queue" and inp.engine is not None:
        return latency_charts.kv_and_queue(inp.engine)
    if f.chart == "buckets":
        ttft = ev.by_input[ev.by_input["metric"] == "ttft_ms"]
        return latency_charts.bucket_percentiles(ttft, ev.labels, "TTFT")
    if f.chart == "load" and inp.load is not None:
        return latency_charts.throughput_vs_load(inp.load, current=ev.run_id)
    if f.chart == "trend":
        return latency_charts.trend_chart(
            ev.timeline["window_start"].to_numpy(),
            ev.timeline["ttft_p50_ms"].to_numpy(),
            inp.latency_trend,
            label=inp.latency_label,
            unit="ms",
        )
    return None


def run_span(run_id: str) -> tuple[int, tuple[float, float] | None]:
    """(requests, (first sent, last done)); the span is None when no request has a send time."""
    span = display.first_row(cache_latency.request_span((run_id,)))
    requests = int(span.get("requests") or 0)
    first: Any = span.get("first_sent")
    last: Any = span.get("last_done")
    if display.is_missing(first):
        return requests, None
    end: Any = span.get("last_sent") if display.is_missing(last) else last
    return requests, (float(first), float(end if not display.is_missing(end) else first))
