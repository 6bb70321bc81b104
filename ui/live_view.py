"""The Live page's panels: the rendering of ``services.views.live.LiveView`` (the current state
of watched engines and GPUs), built fresh on every refresh by ``ui.cache.live``. The page draws
them from an ``st.fragment(run_every=…)``, so only the panels refresh (``?refresh=`` seconds).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pandas as pd
import streamlit as st

from services.views.live import LiveSelection, LiveView
from ui import display, live_charts

EMPTY_COMMANDS = (
    "servescope watch --metrics http://127.0.0.1:8000/metrics --gpu",
    "servescope watch --dcgm http://gpu-node:9400/metrics --interval 1s",
    "servescope sim --port 8000 &  servescope watch --metrics 127.0.0.1:8000",
    "servescope demo",
)


def selection() -> LiveSelection:
    """The page's selection, from the URL (``?refresh=``)."""
    return LiveSelection.from_params(st.query_params.to_dict())


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


def _num(value: object, digits: int = 1, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return display.fmt_number(value, digits, unit)


def render_empty() -> None:
    st.info("No live samples in the store yet. Start a watcher (or the demo) to fill it:")
    st.code("\n".join(EMPTY_COMMANDS), language="bash")
    st.caption(
        "`servescope watch` scrapes engines' /metrics (vLLM, SGLang, TGI, llama.cpp, "
        "TensorRT-LLM, the sim), DCGM exporters, this host's GPUs (--gpu) or a Prometheus "
        "server; `servescope bench` collects the endpoint's /metrics during its runs."
    )


def _target_label(target: str, engine: object) -> str:
    return f"{engine or '?'} · {target}"


def render_targets(view: LiveView) -> None:
    st.subheader("Engines")
    if view.targets.empty:
        st.caption("No engine target reported in this window.")
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


def render_engine_charts(view: LiveView) -> None:
    if view.engine.empty:
        return
    stale = view.stale_targets
    labels = {
        str(r["target"]): _target_label(str(r["target"]), r["engine"])
        for r in view.targets.to_dict("records")
    }
    left, right = st.columns(2)
    with left:
        st.plotly_chart(
            live_charts.engine_metric_chart(
                view.engine,
                "requests_running",
                title="Running requests",
                y_title="requests",
                stale=stale,
                labels=labels,
            ),
            key="live_running",
        )
        st.plotly_chart(
            live_charts.engine_metric_chart(
                view.engine,
                "kv_cache_usage",
                title="KV-cache usage",
                y_title="%",
                stale=stale,
                scale=100.0,
                y_range=[0, 100],
                labels=labels,
            ),
            key="live_kv",
        )
    with right:
        st.plotly_chart(
            live_charts.engine_metric_chart(
                view.engine,
                "requests_waiting",
                title="Waiting requests",
                y_title="requests",
                stale=stale,
                labels=labels,
            ),
            key="live_waiting",
        )
        st.plotly_chart(
            live_charts.rate_chart(
                view.generation_rates,
                title="Generation throughput",
                y_title="tokens/s",
                stale=stale,
                labels=labels,
            ),
            key="live_gen_tps",
        )


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
    left, right = st.columns(2)
    with left:
        st.plotly_chart(
            live_charts.gpu_memory_chart(view.gpus, stale=view.stale_hosts), key="live_gpu_mem"
        )
    with right:
        st.plotly_chart(
            live_charts.gpu_util_chart(view.gpus, stale=view.stale_hosts), key="live_gpu_util"
        )


def render(view: LiveView) -> None:
    """All live panels (the page calls this inside its refreshing fragment)."""
    if view.empty:
        render_empty()
        return
    if view.current:
        st.caption(f"Last {_minutes(view.window_s)} minutes · refreshed {_utc(view.now)}")
    else:
        st.info(
            f"Nothing collected in the last {_minutes(view.window_s)} minutes: showing the last "
            f"recorded window, ending {_utc(view.window_end)} "
            f"({_ago(view.now - view.window_end)}).",
            icon=":material/history:",
        )
    render_targets(view)
    render_engine_charts(view)
    render_gpus(view)
