"""The Live page's panels: the rendering of ``services.views.live.LiveView`` (production traffic
of the watched engines, for on call), built fresh on every refresh by ``ui.cache.live``. The page
draws them from an ``st.fragment(run_every=…)``, so only the panels refresh (``?refresh=``).

The selectors (SLO profile, target, window, span) live in the URL (``?slo=&target=&window=
&span=``); a box (or a click) on the timeline offers the incident view of that range.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

import pandas as pd
import streamlit as st

from analysis import length_mix
from analysis.slo_windows import SLO_HISTS
from services.views import live
from services.views.live import LiveSelection, LiveView
from services.views.traffic import MODEL_PREFIX
from ui import display, live_charts, state

EMPTY_COMMANDS = (
    "servescope watch --metrics http://127.0.0.1:8000/metrics --gpu",
    "servescope watch --dcgm http://gpu-node:9400/metrics --interval 1s",
    "servescope sim --port 8000 &  servescope watch --metrics 127.0.0.1:8000",
    "servescope demo",
)
ALL_TARGETS: Final = "All targets"
TIMELINE_KEY: Final = "live_timeline"
#: Session key: the (from, to) range chosen on the timeline, epoch seconds.
INVESTIGATE_KEY: Final = "live_investigate"
#: Newest breaches listed (the chart marks every one).
BREACHES_LISTED: Final = 20
LATENCY_TITLES: Final = {
    "ttft_seconds": "TTFT",
    "e2e_seconds": "E2E",
    "queue_time_seconds": "Queue time",
}
LENGTH_TITLES: Final = {
    "prompt_length_tokens": "Prompt length",
    "output_length_tokens": "Output length",
}


def selection() -> LiveSelection:
    """The page's selection: what its selectors hold, else the URL
    (``?slo=&target=&window=&span=&refresh=``). The selectors live in the refreshing fragment,
    whose reruns are not handed the URL their callbacks wrote: their own state is read first."""
    params = st.query_params.to_dict()
    for param, key, to_text in _selectors():
        if key in st.session_state:
            text = to_text(st.session_state[key])
            if text:
                params[param] = text
            else:
                params.pop(param, None)
    return LiveSelection.from_params(params)


def _selectors() -> tuple[tuple[str, str, Callable[[Any], str]], ...]:
    """(URL parameter, widget key, how the widget's value is written to the URL)."""
    return (
        (live.SLO_PARAM, "live_slo", _plain_text),
        (live.TARGET_PARAM, "live_target", _target_text),
        (live.WINDOW_PARAM, "live_window", _default_text(live.WINDOW_S)),
        (live.SPAN_PARAM, "live_span", _default_text(live.SPAN_MIN)),
    )


def show_problem(sel: LiveSelection) -> None:
    """A URL the page cannot show: what was wrong and what is accepted."""
    st.error(
        f"**The link's parameters are not accepted**: {display.md_escape(sel.problem)}",
        icon=":material/error:",
    )
    st.caption("Open the Live page without parameters for its defaults.")


def _ago(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h ago"
    return f"{seconds / 86400:.0f} days ago"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:g}"


def _utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _clock(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%H:%M:%S")


def _num(value: object, digits: int = 1, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return display.fmt_number(value, digits, unit)


def _ms(ms: float | None) -> str:
    if ms is None:
        return "—"
    return f"{ms / 1000:g} s" if ms >= 1000 else f"{ms:g} ms"


def render_empty() -> None:
    st.info("No live samples in the store yet. Start a watcher (or the demo) to fill it:")
    st.code("\n".join(EMPTY_COMMANDS), language="bash")
    st.caption(
        "`servescope watch` scrapes engines' /metrics (vLLM, SGLang, TGI, llama.cpp, "
        "TensorRT-LLM, the sim), DCGM exporters, this host's GPUs (--gpu) or a Prometheus "
        "server; `servescope bench` collects the endpoint's /metrics during its runs."
    )


# --- selectors ---------------------------------------------------------------------------------


def _choices(values: tuple[int, ...], current: int) -> list[int]:
    return sorted({*values, current})


def controls(view: LiveView) -> None:
    """SLO profile, target, window and span, each synced with its URL parameter."""
    cols = st.columns([3, 4, 2, 2])
    if view.profiles:
        name = view.profile.name if view.profile is not None else None
        state.show_resolved("live_slo", live.SLO_PARAM, name)
        cols[0].selectbox(
            "SLO profile",
            list(view.profiles),
            key="live_slo",
            on_change=state.sync_to_url("live_slo", live.SLO_PARAM),
            help="The windows are judged against this profile's percentile and limits.",
        )
    targets = [ALL_TARGETS, *view.target_choices]
    state.show_resolved("live_target", live.TARGET_PARAM, view.target or ALL_TARGETS, _target_text)
    cols[1].selectbox(
        "Target",
        targets,
        key="live_target",
        on_change=state.sync_to_url("live_target", live.TARGET_PARAM, _target_text),
        help="One watched /metrics URL; model:<name>, every target serving that model "
        "(its series' model_name label), summed; or every target summed.",
    )
    window = int(view.window_s)
    state.show_resolved("live_window", live.WINDOW_PARAM, window, _default_text(live.WINDOW_S))
    cols[2].selectbox(
        "Window",
        _choices(live.WINDOW_CHOICES, window),
        key="live_window",
        format_func=lambda s: f"{s} s",
        on_change=state.sync_to_url("live_window", live.WINDOW_PARAM, _default_text(live.WINDOW_S)),
        help="Percentiles, request and error rate are computed per window of this length.",
    )
    span = int(view.span_s // 60)
    state.show_resolved("live_span", live.SPAN_PARAM, span, _default_text(live.SPAN_MIN))
    cols[3].selectbox(
        "History",
        _choices(live.SPAN_CHOICES, span),
        key="live_span",
        format_func=lambda m: f"{m} min",
        on_change=state.sync_to_url("live_span", live.SPAN_PARAM, _default_text(live.SPAN_MIN)),
    )


def _plain_text(value: Any) -> str:
    return "" if value is None else str(value)


def _target_text(value: Any) -> str:
    return "" if value in (None, ALL_TARGETS) else str(value)


def _default_text(default: int) -> Callable[[Any], str]:
    return lambda v: "" if v is None or int(v) == default else str(int(v))


# --- status and engines ------------------------------------------------------------------------


def _target_label(target: str, engine: object) -> str:
    return f"{engine or '?'} · {target}"


def render_status(view: LiveView) -> None:
    scope = (
        f"target {display.md_escape(view.target)}"
        if view.target
        else f"{len(view.targets)} engine target(s), summed"
    )
    if view.current:
        st.caption(
            f"Last {_minutes(view.span_s)} minutes in {view.window_s:g} s windows · {scope} · "
            f"refreshed {_utc(view.now)}"
        )
    else:
        st.info(
            f"Nothing collected in the last {_minutes(view.span_s)} minutes: showing the last "
            f"recorded span, ending {_utc(view.end)} ({_ago(view.now - view.end)}).",
            icon=":material/history:",
        )
    models = [c[len(MODEL_PREFIX) :] for c in view.target_choices if c.startswith(MODEL_PREFIX)]
    if view.target is None and len(models) > 1:
        st.warning(
            f"These targets serve {len(models)} models ({display.md_escape(', '.join(models))}): "
            "summed, their latencies mix models. Pick one model (model:<name>) or one target.",
            icon=":material/call_merge:",
        )


def render_targets(view: LiveView) -> None:
    st.subheader("Engines")
    if view.targets.empty:
        st.caption("No engine target reported in this span.")
        return
    for rec in view.targets.to_dict("records"):
        target = str(rec["target"])
        label = _target_label(target, rec["engine"])
        if rec["stale"]:
            st.warning(
                f"**{display.md_escape(label)}** is stale: last sample "
                f"{_ago(view.now - float(rec['last_ts']))} ({_utc(float(rec['last_ts']))}).",
                icon=":material/schedule:",
            )
        else:
            st.markdown(f"**{display.md_escape(label)}** · live")
        cols = st.columns(6)
        kv = rec["kv_cache_usage"]
        cols[0].metric("Running", _num(rec["requests_running"], 0))
        cols[1].metric("Waiting", _num(rec["requests_waiting"], 0))
        cols[2].metric("KV cache", _num(kv * 100 if isinstance(kv, float) else None, 1, "%"))
        cols[3].metric("Preemptions/s", _num(rec["preemptions_per_s"], 2))
        cols[4].metric("Gen tokens/s", _num(rec["generation_tps"], 0))
        cols[5].metric("Prompt tokens/s", _num(rec["prompt_tps"], 0))


# --- latency against the profile ---------------------------------------------------------------


def profile_line(view: LiveView) -> str:
    """``P99 TTFT ≤ 500 ms · E2E ≤ 20 s · error rate ≤ 1 %`` for the chosen profile."""
    p = view.profile
    if p is None:
        return ""
    parts = []
    if p.length_conditioned:
        parts.append(
            f"TTFT ≤ {_ms(p.ttft_base_ms)} + {p.ttft_ms_per_1k_input:g} ms per 1k prompt tokens"
        )
    elif p.ttft_ms is not None:
        parts.append(f"TTFT ≤ {_ms(p.ttft_ms)}")
    if p.e2e_ms is not None:
        parts.append(f"E2E ≤ {_ms(p.e2e_ms)}")
    head = f"P{p.percentile:g} " + " · ".join(parts) if parts else "no latency limit"
    return f"{head} · error rate ≤ {p.max_error_rate:.1%} per window"


def latency_rows(view: LiveView) -> list[live_charts.LatencyRow]:
    rows = []
    pct = f"P{view.profile.percentile:g}" if view.profile is not None else ""
    for hist, title in LATENCY_TITLES.items():
        windows = view.latency.get(hist)
        if windows is None:
            continue
        limit = view.limit_s(hist)
        rows.append(
            live_charts.LatencyRow(
                title=title,
                windows=windows,
                limit_s=limit,
                limit_label=f"SLO {pct} {title} ≤ {limit:g} s" if limit is not None else "",
            )
        )
    return rows


def _breach_flags(view: LiveView) -> list[pd.Series | None]:
    flags: list[pd.Series | None] = []
    for hist in LATENCY_TITLES:
        field = next((f for f, h in SLO_HISTS.items() if h == hist), None)
        column = f"{field}_breach" if field else None
        if view.judged.empty or column is None or column not in view.judged.columns:
            flags.append(None)
            continue
        flags.append(view.judged.set_index("window_start")[column].astype(bool))
    return flags


def timeline(view: LiveView) -> Any:
    labels = {
        str(r["target"]): _target_label(str(r["target"]), r["engine"])
        for r in view.targets.to_dict("records")
    }
    breaches = view.breaches
    return live_charts.timeline_figure(
        latency_rows(view),
        columns=view.quantile_columns,
        slo_column=view.slo_column,
        breach_flags=_breach_flags(view),
        breaches=breaches if not breaches.empty else None,
        requests=view.requests,
        state=view.engine,
        preemptions=view.preemption_rates,
        gpus=view.gpus,
        labels=labels,
        stale=view.stale_targets,
        stale_hosts=view.stale_hosts,
    )


def _remember_selection() -> None:
    event = st.session_state.get(TIMELINE_KEY)
    chosen = live_charts.selected_range(event["selection"] if event else None)
    st.session_state[INVESTIGATE_KEY] = chosen


def investigate_link(view: LiveView, chosen: tuple[float, float]) -> str:
    """The Markdown link to the incident view of the range chosen on the timeline."""
    lo, hi = view.investigate_range(*chosen)
    path = live.investigate_path(view.target, lo, hi)
    return f"[Investigate {_clock(lo)}–{_clock(hi)} UTC]({path})"


def breach_table(view: LiveView) -> str:
    """The newest breaches as a Markdown table: window, why, and the link to its incident
    view (every cell escaped; the link is built from the window's bounds only)."""
    rows = view.breaches.tail(BREACHES_LISTED).iloc[::-1]
    lines = ["| window (UTC) | why | |", "|---|---|---|"]
    for rec in rows.to_dict("records"):
        lo, hi = float(rec["window_start"]), float(rec["window_end"])
        why = display.md_escape(rec["reason"]).replace("|", "\\|")
        lines.append(f"| {_clock(lo)}–{_clock(hi)} | {why} | [Investigate]({rec['link']}) |")
    return "\n".join(lines)


def precision_line(view: LiveView) -> str:
    """What the buckets allow of the judged percentile in the newest window with requests."""
    col = view.slo_column or "p99"
    parts = []
    for hist, title in LATENCY_TITLES.items():
        w = view.latency.get(hist)
        if w is None or w.empty or f"{col}_precision" not in w.columns:
            continue
        served = w[w["count"] > 0]
        if served.empty:
            continue
        phrase = str(served[f"{col}_precision"].iloc[-1])
        if phrase:
            parts.append(f"{title}: {phrase}")
    return "; ".join(parts)


def render_latency(view: LiveView) -> None:
    st.subheader("Latency against the SLO")
    if view.profile_problem:
        st.warning(display.md_escape(view.profile_problem), icon=":material/warning:")
    elif view.profile is not None:
        st.caption(
            f"**{display.md_escape(view.profile.name)}**: {display.md_escape(profile_line(view))}."
            " Percentiles per window from the engines' histograms (summed bucket increases); "
            "a window breaches when its percentile exceeds a limit or its error rate the "
            "profile's; a window without requests never does."
        )
    served = any((w["count"] > 0).any() for w in view.latency.values() if not w.empty)
    if not served:
        st.caption(
            "No latency histogram moved in this span: the targets finished no request, or "
            "their engine exports no TTFT/E2E/queue histograms (docs/oncall.md)."
        )
    n_breach = len(view.breaches)
    if view.profile is not None and served:
        total = len(view.judged)
        if n_breach:
            st.warning(  # about the data: the page's errors are what went wrong
                f"**{n_breach} of {total} windows breach {display.md_escape(view.profile.name)}**"
                " — shaded red on the chart, listed below.",
                icon=":material/notifications_active:",
            )
        else:
            st.success(f"No window breaches the profile ({total} windows).")
    st.plotly_chart(
        timeline(view),
        key=TIMELINE_KEY,
        on_select=_remember_selection,
        selection_mode=("box", "points"),
    )
    chosen = st.session_state.get(INVESTIGATE_KEY)
    if chosen:
        st.markdown(investigate_link(view, chosen))
    else:
        st.caption(
            "Drag across the chart (or click a window) to investigate that range in the "
            "incident view."
        )
    phrase = precision_line(view)
    if phrase:
        st.caption(f"Precision, newest window: {display.md_escape(phrase)}.")
    if n_breach:
        st.markdown(breach_table(view))
        if n_breach > BREACHES_LISTED:
            st.caption(f"The newest {BREACHES_LISTED} of {n_breach} breaches.")


# --- length mix and GPUs -----------------------------------------------------------------------


def render_lengths(view: LiveView) -> None:
    st.subheader("Production length mix")
    if not view.lengths:
        st.caption(
            "No prompt/output length histogram moved in this span (vLLM, SGLang with "
            "--enable-metrics, TGI and the sim export them)."
        )
        return
    dists = [(title, view.lengths.get(hist)) for hist, title in LENGTH_TITLES.items()]
    st.markdown(
        "  \n".join(
            f"**{title}**: {display.md_escape(length_mix.describe(d))}"
            for title, d in dists
            if d is not None
        )
    )
    st.plotly_chart(live_charts.length_mix_figure(dists), key="live_lengths")


def gpu_table(view: LiveView) -> pd.DataFrame:
    """The newest sample of each GPU, formatted for display."""
    g = view.gpus_latest
    return pd.DataFrame(
        {
            "host": g["host"].astype(str),
            "GPU": g["gpu_index"],
            "name": g["gpu_name"],
            "memory used (GiB)": (g["mem_used_bytes"].astype("float64") / live_charts.GIB).round(2),
            "memory total (GiB)": (g["mem_total_bytes"].astype("float64") / live_charts.GIB).round(
                2
            ),
            "util %": (g["util_gpu"].astype("float64") * 100).round(0),
            "power W": g["power_w"].astype("float64").round(0),
            "temp °C": g["temp_c"].astype("float64"),
            "source": g["source"],
            "status": ["stale" if str(h) in view.stale_hosts else "live" for h in g["host"]],
            "last sample": [_utc(float(t)) for t in g["ts"]],
        }
    )


def render_gpus(view: LiveView) -> None:
    st.subheader("GPUs")
    if view.gpus_latest.empty:
        st.caption(
            "No GPU samples. `servescope watch --gpu` samples this host through NVML; "
            "`--dcgm URL` reads a DCGM exporter."
        )
        return
    st.dataframe(gpu_table(view), hide_index=True, key="live_gpu_table")
    if not view.targets.empty:
        st.caption("Memory and utilisation over time are on the timeline above.")
        return
    left, right = st.columns(2)  # no engine target: the GPUs' own charts
    left.plotly_chart(
        live_charts.gpu_memory_chart(view.gpus, stale=view.stale_hosts), key="live_gpu_mem"
    )
    right.plotly_chart(
        live_charts.gpu_util_chart(view.gpus, stale=view.stale_hosts), key="live_gpu_util"
    )


def render(view: LiveView) -> None:
    """All live panels (the page calls this inside its refreshing fragment)."""
    if view.empty:
        render_empty()
        return
    controls(view)
    render_status(view)
    if not view.targets.empty:
        render_latency(view)
    render_targets(view)
    render_lengths(view)
    render_gpus(view)
