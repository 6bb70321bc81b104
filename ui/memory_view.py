"""Streamlit helpers of the Memory page: selections synced with the URL, loading, rendering.

URL: ``?run=<id>&window=60-300&overlay=<id>,<id>&slo=<profile>&cap=0.9`` (window: seconds from
the run's start). Engine series (KV usage, running/waiting, preemptions) come from the targets
the bench recorded with the run (else every target that reported during its span); GPU memory
from ``gpu_samples`` of its hosts (NVML ``--gpu`` or DCGM ``--dcgm``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
import streamlit as st

from analysis import latency as an
from ui import cache, display, latency_view, memory_charts
from ui.cache import latency as cache_latency

GIB = 2**30
DEFAULT_CAP = 0.90


@dataclass(frozen=True)
class MemoryData:
    run_id: str
    since: float
    until: float
    engine: pd.DataFrame
    gpu: pd.DataFrame
    sources: dict[str, Any]


def show_empty() -> None:
    latency_view.show_empty()


def pick_run() -> tuple[str, dict[str, str]]:
    """The run picker (``?run=``): (chosen run, choices); stops the page when there is none."""
    return latency_view.pick_run(show_empty)


def run_window(run_id: str) -> tuple[dict[str, Any], tuple[float, float] | None]:
    """The run's live sources and its time span (None when it recorded no time at all)."""
    src = cache_latency.run_sources(run_id)
    since, until = src.get("since"), src.get("until")
    if since is None or until is None:
        return src, None
    return src, (float(since), max(float(until), float(since) + 1.0))


def window(span: tuple[float, float]) -> tuple[float, float]:
    """The window slider (key memory_window, ``?window=a-b``) → absolute [since, until]."""
    (lo, hi), _ = latency_view.window_slider(
        "memory_window", span[0], span[1], label="Window (seconds from the run's start)"
    )
    return (lo if lo is not None else span[0], hi if hi is not None else span[1])


def load(run_id: str, src: dict[str, Any], since: float, until: float) -> MemoryData:
    targets = tuple(src.get("targets") or ())
    hosts = tuple(src.get("hosts") or ())
    engine = cache_latency.engine_timeline(targets, since, until) if targets else pd.DataFrame()
    gpu = cache_latency.gpu_timeline(hosts, since, until) if hosts else pd.DataFrame()
    if engine.empty:
        engine = pd.DataFrame(columns=["target", "metric", "ts", "value", "max_value", "samples"])
    return MemoryData(run_id, since, until, engine, gpu, src)


def cap_control() -> float:
    """The memory cap (fraction of GPU memory): the SLO profile's ``max_memory_fraction`` when
    it has one (select box memory_slo, ``?slo=``), else the number box memory_cap (``?cap=``)."""
    profiles = cache.slo_profiles()
    names = ["(none)", *profiles]
    wanted = latency_view.url_value("slo")
    if "memory_slo" not in st.session_state:
        st.session_state["memory_slo"] = wanted if wanted in profiles else "(none)"
    left, right = st.columns(2)
    name = left.selectbox(
        "SLO profile (memory cap)",
        names,
        key="memory_slo",
        on_change=latency_view.sync("memory_slo", "slo", lambda v: "" if v == "(none)" else v),
    )
    profile = profiles.get(str(name)) or {}
    cap = profile.get("max_memory_fraction")
    if isinstance(cap, int | float) and 0 < float(cap) <= 1:
        right.metric("Memory cap", f"{float(cap):.0%}", help=f"from SLO profile {name}")
        return float(cap)
    if "memory_cap" not in st.session_state:
        try:
            st.session_state["memory_cap"] = float(latency_view.url_value("cap") or DEFAULT_CAP)
        except ValueError:
            st.session_state["memory_cap"] = DEFAULT_CAP
    value = right.number_input(
        "Memory cap (fraction of GPU memory)",
        min_value=0.05,
        max_value=1.0,
        step=0.05,
        key="memory_cap",
        on_change=latency_view.sync("memory_cap", "cap", lambda v: f"{float(v):g}"),
    )
    return float(value)


def summary_figures(data: MemoryData, cap: float) -> list[tuple[str, str, str]]:
    """(label, value, help) of the headline figures: GPU memory peak/mean and headroom, KV
    peak/mean, preemptions."""
    out: list[tuple[str, str, str]] = []
    if not data.gpu.empty:
        per_ts = data.gpu.groupby("ts")[["mem_used_bytes", "mem_used_max_bytes", "mem_total_bytes"]]
        sums = per_ts.sum()
        peak, mean = float(sums["mem_used_max_bytes"].max()), float(sums["mem_used_bytes"].mean())
        total = float(sums["mem_total_bytes"].max())
        head = cap * total - peak
        out += [
            ("GPU memory peak", f"{peak / GIB:,.1f} GiB", f"of {total / GIB:,.1f} GiB, all GPUs"),
            ("GPU memory mean", f"{mean / GIB:,.1f} GiB", "mean over the window"),
            (
                "Headroom to cap",
                f"{head / GIB:+,.1f} GiB",
                f"cap {cap:.0%} × total − peak used; negative: the cap is exceeded",
            ),
        ]
    kv = data.engine[data.engine["metric"] == "kv_cache_usage"]
    if not kv.empty:
        out += [
            ("KV usage peak", f"{float(kv['max_value'].max()):.0%}", "fullest target"),
            ("KV usage mean", f"{float(kv['value'].mean()):.0%}", "mean over the window"),
        ]
    pre = memory_charts.preemption_steps(data.engine) if not data.engine.empty else pd.DataFrame()
    if not pre.empty or (data.engine["metric"] == "preemptions_total").any():
        out.append(
            ("Preemptions", display.fmt_count(pre["value"].sum() if not pre.empty else 0), "")
        )
    return out


def render_timeline(data: MemoryData, cap: float) -> None:
    figures = summary_figures(data, cap)
    if figures:
        for col, (label, value, help_text) in zip(st.columns(len(figures)), figures, strict=True):
            col.metric(label, value, help=help_text or None)
    if data.engine.empty and data.gpu.empty:
        st.info(
            "No engine or GPU samples for this run's span. `servescope bench` records the "
            "endpoint's /metrics during each run (add `--dcgm URL` for GPU memory); "
            "`servescope watch --metrics URL --gpu` collects them for any time window."
        )
        return
    if data.gpu.empty:
        st.caption(
            "No GPU samples: memory is shown through the engine's KV-cache usage. Collect GPU "
            "memory with `servescope bench --dcgm URL` or `servescope watch --gpu`."
        )
    st.plotly_chart(
        memory_charts.memory_timeline(data.engine, data.gpu, cap_fraction=cap),
        key="memory_timeline_chart",
    )


def render_trends(data: MemoryData) -> None:
    """Slopes of GPU memory (else KV usage) and of TTFT P50 with 95 % CIs, or "too short to
    judge" over a window shorter than the trend rule's (analysis.diagnose); leak warnings."""
    st.subheader("Trends")
    cols = st.columns(2)
    if not data.gpu.empty:
        per_ts = data.gpu.groupby("ts", as_index=False)["mem_used_bytes"].sum()
        mt = an.trend(per_ts["ts"].to_numpy(), per_ts["mem_used_bytes"].to_numpy() / 2**20)
        _trend_metric(cols[0], "GPU memory slope", mt, "MiB/h")
    else:
        kv = data.engine[data.engine["metric"] == "kv_cache_usage"]
        kv_max = kv.groupby("ts")["value"].max()
        mt = an.trend(kv_max.index.to_numpy(dtype="float64"), kv_max.to_numpy() * 100)
        _trend_metric(cols[0], "KV usage slope", mt, "pp/h")
    duration = data.until - data.since
    tl = cache_latency.latency_timeline(
        (data.run_id,),
        data.since,
        an.heatmap_window_s(duration),
        (data.since, data.until),
    )
    tl = tl[tl["n"] > 0]
    lt = an.trend(tl["window_start"].to_numpy(), tl["ttft_p50_ms"].to_numpy())
    _trend_metric(cols[1], "TTFT P50 slope", lt, "ms/h")
    for w in an.memory_warnings(_gpu_raw(data.gpu), data.engine):
        st.warning(
            f"**{display.md_escape(w.title)}**  \n"
            + "  \n".join(
                f"{display.md_escape(k)}: {display.md_escape(v)}" for k, v in w.evidence.items()
            ),
            icon=":material/warning:",
        )


def _gpu_raw(gpu: pd.DataFrame) -> pd.DataFrame:
    if gpu.empty:
        return pd.DataFrame(columns=["ts", "mem_used_bytes", "mem_total_bytes"])
    return gpu[["ts", "mem_used_bytes", "mem_total_bytes"]]


def _trend_metric(col: Any, label: str, t: an.Trend | None, unit: str) -> None:
    """The slope per hour, or "too short to judge" with the window it needs under it."""
    short = an.trend_too_short(t) if t is not None else None
    if t is None or short is None:
        col.metric(label, _slope(t, unit), help=_ci(t, unit))
        return
    col.metric(label, an.TOO_SHORT, help=f"{short}: a slope per hour is not extrapolated from it.")
    col.caption(an.trend_window_need(t.span_s))


def _slope(t: an.Trend | None, unit: str) -> str:
    if t is None:
        return "—"
    mark = " ↑" if t.rising else (" ↓" if t.significant else "")
    return f"{t.slope * 3600:+,.1f} {unit}{mark}"


def _ci(t: an.Trend | None, unit: str) -> str:
    if t is None:
        return "fewer than 3 points: no trend"
    lo, hi = t.ci_low * 3600, t.ci_high * 3600
    verdict = "significant" if t.significant else "not significant (the interval spans 0)"
    return f"95 % CI {lo:+,.2f} … {hi:+,.2f} {unit}, n={t.n}; {verdict}"


def overlay_picker(run_id: str, choices: dict[str, str]) -> tuple[str, ...]:
    """Runs to overlay (key memory_overlay, ``?overlay=a,b``), the current one first."""
    options = [r for r in choices if r != run_id]
    if "memory_overlay" not in st.session_state:
        wanted = (latency_view.url_value("overlay") or "").split(",")
        st.session_state["memory_overlay"] = [r for r in wanted if r in options]
    chosen = st.multiselect(
        "Overlay other runs (aligned at their start)",
        options,
        format_func=lambda r: choices.get(r, r),
        key="memory_overlay",
        on_change=latency_view.sync("memory_overlay", "overlay", lambda v: ",".join(v)),
    )
    return (run_id, *[str(r) for r in chosen])


def render_overlay(run_ids: tuple[str, ...], choices: dict[str, str]) -> None:
    if len(run_ids) < 2:
        return
    aligned = cache_latency.aligned_runs(run_ids)
    if aligned.empty:
        st.info("None of these runs has engine or GPU samples.")
        return
    st.plotly_chart(memory_charts.aligned_runs_chart(aligned, choices), key="memory_overlay_chart")
    missing = [choices.get(r, r) for r in run_ids if r not in set(aligned["run_id"])]
    if missing:
        st.caption("No samples for: " + display.md_escape(", ".join(missing)))


def note_aggregates_only(run_id: str) -> None:
    """For an aggregate-only import: say that the latency trend cannot be shown, and why."""
    source, summary = latency_view.crosscheck_view.tool_summary(run_id)
    span = cache_latency.request_span((run_id,))
    requests = int(span["requests"].iloc[0]) if not span.empty else 0
    if latency_view.crosscheck_view.is_aggregates_only({"requests": requests}, summary):
        st.warning(
            f"Aggregates only: this {display.md_escape(source or 'imported')} run has no "
            "per-request rows, so the latency trend cannot be computed. Engine and GPU samples "
            "are shown when they were collected during its span (`servescope watch`).",
            icon=":material/table_chart:",
        )
