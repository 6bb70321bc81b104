"""The Live page's data and panels: the current state of watched engines and GPUs.

``load`` reads the last minutes of samples (``store.live_queries``) and derives what the panels
show (``analysis.engine_series``: counter rates, staleness); ``render`` draws it. The page calls
both from an ``st.fragment(run_every=…)``, so only the panels refresh. Live data is read fresh on
every refresh (a cached copy would be stale by design); every read is bounded by the window, and
each opens a short-lived store handle (DuckDB lets one process hold the file: the watcher).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import pandas as pd
import streamlit as st

import settings
from analysis import engine_series as es
from store import live_queries
from store.db import Store
from ui import display, live_charts

#: How much history the small charts show.
WINDOW_S = 15 * 60
#: Default refresh period of the live panels (seconds); ``?refresh=N`` overrides it.
REFRESH_S = 2.0
REFRESH_PARAM = "refresh"

EMPTY_COMMANDS = (
    "servescope watch --metrics http://127.0.0.1:8000/metrics --gpu",
    "servescope watch --dcgm http://gpu-node:9400/metrics --interval 1s",
    "servescope sim --port 8000 &  servescope watch --metrics 127.0.0.1:8000",
    "servescope demo",
)


@dataclass
class LiveData:
    now: float
    window_start: float
    window_end: float
    current: bool  # the window ends now (False: showing the last recorded window)
    targets: pd.DataFrame  # analysis.engine_series.target_summary
    engine: pd.DataFrame  # target, engine, ts, metric, value
    gpus_latest: pd.DataFrame
    gpus: pd.DataFrame  # gpu_series
    gpu_stale_hosts: set[str]

    @property
    def empty(self) -> bool:
        return self.targets.empty and self.gpus_latest.empty


def refresh_every() -> float:
    """The panels' refresh period: ``?refresh=`` seconds (1..60), else ``REFRESH_S``."""
    raw = st.query_params.get(REFRESH_PARAM)
    try:
        value = float(raw) if raw else REFRESH_S
    except ValueError:
        value = REFRESH_S
    return min(60.0, max(1.0, value))


def load(
    *, window_s: float = WINDOW_S, now: float | None = None, url: str | None = None
) -> LiveData:
    """Read the last ``window_s`` of samples (or, when nothing is current, the last recorded
    window) and summarise each target and GPU."""
    now = time.time() if now is None else now
    store = Store.open(url or settings.db_url())
    try:
        latest = live_queries.latest_sample_ts(store, since=now - window_s)
        current = latest is not None
        if latest is None:  # nothing recent: the last recorded window, if any
            latest = live_queries.latest_sample_ts(store)
        end = now if current or latest is None else latest
        start = end - window_s
        if latest is None:
            engine = pd.DataFrame(columns=["target", "engine", "ts", "metric", "value"])
            gpus = live_queries.gpu_series(store, since=start, until=end)
            gpus_latest = gpus
        else:
            engine = live_queries.engine_series(store, since=start, until=end)
            gpus = live_queries.gpu_series(store, since=start, until=end)
            gpus_latest = live_queries.latest_gpu_state(store, since=start)
    finally:
        store.dispose()
    targets = es.target_summary(engine, now=now)
    stale_hosts: set[str] = set()
    if not gpus_latest.empty:
        for host, part in gpus.groupby("host") if not gpus.empty else []:
            interval = es.estimate_interval(part["ts"].to_numpy())
            if es.is_stale(float(part["ts"].max()), now, interval):
                stale_hosts.add(str(host))
        seen = set(gpus["host"].astype(str)) if not gpus.empty else set()
        stale_hosts |= {str(h) for h in gpus_latest["host"] if str(h) not in seen}
    return LiveData(now, start, end, current, targets, engine, gpus_latest, gpus, stale_hosts)


def _ago(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h ago"
    return f"{seconds / 86400:.0f} days ago"


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


def render_targets(data: LiveData) -> None:
    st.subheader("Engines")
    if data.targets.empty:
        st.caption("No engine target reported in this window.")
        return
    for rec in data.targets.to_dict("records"):
        target = str(rec["target"])
        label = _target_label(target, rec["engine"])
        if rec["stale"]:
            st.warning(
                f"**{display.md_escape(label)}** is stale: last sample "
                f"{_ago(data.now - float(rec['last_ts']))} ({_utc(float(rec['last_ts']))}).",
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


def render_engine_charts(data: LiveData) -> None:
    if data.engine.empty:
        return
    stale = set(data.targets.loc[data.targets["stale"].astype(bool), "target"].astype(str))
    labels = {
        str(r["target"]): _target_label(str(r["target"]), r["engine"])
        for r in data.targets.to_dict("records")
    }
    left, right = st.columns(2)
    with left:
        st.plotly_chart(
            live_charts.engine_metric_chart(
                data.engine,
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
                data.engine,
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
                data.engine,
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
                es.rate_series(data.engine, "generation_tokens_total"),
                title="Generation throughput",
                y_title="tokens/s",
                stale=stale,
                labels=labels,
            ),
            key="live_gen_tps",
        )


def gpu_table(data: LiveData) -> pd.DataFrame:
    """The newest sample of each GPU, formatted for display."""
    g = data.gpus_latest
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
            "status": ["stale" if str(h) in data.gpu_stale_hosts else "live" for h in g["host"]],
            "last sample": [_utc(float(t)) for t in g["ts"]],
        }
    )


def render_gpus(data: LiveData) -> None:
    st.subheader("GPUs")
    if data.gpus_latest.empty:
        st.caption(
            "No GPU samples. `servescope watch --gpu` samples this host through NVML; "
            "`--dcgm URL` reads a DCGM exporter."
        )
        return
    st.dataframe(gpu_table(data), hide_index=True, key="live_gpu_table")
    left, right = st.columns(2)
    with left:
        st.plotly_chart(
            live_charts.gpu_memory_chart(data.gpus, stale=data.gpu_stale_hosts), key="live_gpu_mem"
        )
    with right:
        st.plotly_chart(
            live_charts.gpu_util_chart(data.gpus, stale=data.gpu_stale_hosts), key="live_gpu_util"
        )


def render(data: LiveData) -> None:
    """All live panels (the page calls this inside its refreshing fragment)."""
    if data.empty:
        render_empty()
        return
    if data.current:
        st.caption(f"Last {WINDOW_S // 60} minutes · refreshed {_utc(data.now)}")
    else:
        st.info(
            f"Nothing collected in the last {WINDOW_S // 60} minutes: showing the last recorded "
            f"window, ending {_utc(data.window_end)} ({_ago(data.now - data.window_end)}).",
            icon=":material/history:",
        )
    render_targets(data)
    render_engine_charts(data)
    render_gpus(data)
