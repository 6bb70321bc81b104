"""The Memory page's "Memory vs load" panels: the rendering of
``services.views.memory.MemoryLoadView`` (built and cached by ``ui.cache.memory``).

Widgets (keys, URL parameters): the runs of the series (``memory_series``, ``?series=a,b,c``),
a sweep's point (``memory_point``, ``?point=``, with ``?sweep=``), and the button that shows
the runs like the current one as a series.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from services.views import memory
from services.views.memory import MemoryLoadView
from ui import display, memory_load_charts, state
from ui.memory_charts import GIB

SERIES_KEY = "memory_series"
POINT_KEY = "memory_point"
#: What fills Memory vs load, said wherever it is empty.
HOW_TO_FILL = (
    "Memory vs load plots runs of one configuration measured at several load levels. Measure "
    "them with `servescope bench --concurrency 1,8,32,64 …` (or `--rate 2,4,8 …`), or with "
    "`servescope sweep` (each point's capacity search), then open "
    "`/memory?series=<run>,<run>,…` or `/memory?sweep=<id>`."
)


def _ids_text(run_ids: Any) -> str:
    return ",".join(str(r) for r in run_ids)


def series_text() -> str | None:
    """The series' ``?series=`` text, from the picker (its last value) or the URL."""
    return state.widget_or_url(SERIES_KEY, memory.SERIES_PARAM, _ids_text)


def offer_like(view: MemoryLoadView, choices: dict[str, str]) -> None:
    """Without a series asked for: the runs like the current one, and a button that shows
    them as a series; or what fills Memory vs load when there are fewer than two."""
    if len(view.like) < 2:
        st.info(
            HOW_TO_FILL + " No other run shares this run's model, GPU, engine parameters, "
            "workload and kind of load."
        )
        return
    labels = ", ".join(display.md_escape(choices.get(r, r)) for r in view.like)
    st.caption(f"{len(view.like)} runs share this run's configuration and differ in load: {labels}")

    def show() -> None:
        state.set_url_value(memory.SERIES_PARAM, _ids_text(view.like))
        st.session_state[SERIES_KEY] = list(view.like)

    st.button("Show memory vs load of these runs", key="memory_show_series", on_click=show)


def render(view: MemoryLoadView, choices: dict[str, str]) -> None:
    """The series picker, the headline, the chart, the table and what was left out."""
    _pickers(view, choices)
    for run_id, why in view.excluded:
        st.caption(f"Left out {display.md_escape(choices.get(run_id, run_id))}: {why}")
    if not view.enough:
        st.info(HOW_TO_FILL + f" This selection has {view.levels} load level(s).")
        return
    if view.differing:
        st.warning(
            "These runs differ in "
            + ", ".join(display.md_escape(k) for k in view.differing)
            + ", not only in load: the curve mixes configurations, and the prediction is the "
            "first run's.",
            icon=":material/warning:",
        )
    _headline(view)
    st.plotly_chart(memory_load_charts.memory_vs_load(view), key="memory_load_chart")
    st.dataframe(points_table(view), hide_index=True, key="memory_load_table")


def _pickers(view: MemoryLoadView, choices: dict[str, str]) -> None:
    if view.groups:
        points = {g.point: g.label for g in view.groups}
        state.init_widget(POINT_KEY, view.group)
        st.selectbox(
            "Sweep point",
            list(points),
            format_func=lambda p: points.get(p, p),
            key=POINT_KEY,
            on_change=state.sync_to_url(POINT_KEY, memory.POINT_PARAM),
        )
        return
    chosen = list(view.selection.series)
    state.init_widget(SERIES_KEY, chosen)
    options = list(dict.fromkeys([*chosen, *choices]))
    st.multiselect(
        "Runs of the series (same configuration, different load)",
        options,
        format_func=lambda r: choices.get(r, r),
        key=SERIES_KEY,
        on_change=state.sync_to_url(SERIES_KEY, memory.SERIES_PARAM, _ids_text),
    )


def knee_texts(view: MemoryLoadView) -> list[tuple[str, str, str]]:
    """(label, value, help) of the knees and the predicted capacity."""
    unit = "" if view.kind == "concurrency" else " req/s"
    out: list[tuple[str, str, str]] = []
    knee = view.measured_knee
    if knee is None:
        out.append(("Measured knee", "—", "the engine reports no preemption counter"))
    elif knee.load is not None:
        out.append(
            (
                "Measured knee",
                f"{knee.load:,.3g}{unit}",
                f"preemption starts between {knee.last_clean:,.3g} (none) and "
                f"{knee.first_preempting:,.3g}{unit} (the first level with preemptions), where "
                "the clean levels' peak KV usage, extrapolated linearly, reaches 100 %",
            )
        )
    elif knee.below:
        out.append(
            (
                "Measured knee",
                f"≤ {knee.first_preempting:,.3g}{unit}",
                "the lowest measured level already preempts",
            )
        )
    else:
        top = view.points["load"].max()
        out.append(("Measured knee", f"> {top:,.3g}{unit}", "no level preempts"))
    if view.prediction.capacity_tokens is None:
        return out
    predicted = view.predicted_knee
    out.append(
        (
            "Predicted knee",
            "—" if predicted is None else f"{predicted:,.3g}{unit}",
            "where predicted KV usage reaches 100 %"
            + (" (not within the batch cap or the measured levels)" if predicted is None else ""),
        )
    )
    out.append(
        (
            "Predicted KV capacity",
            f"{view.prediction.capacity_tokens:,.0f} tokens",
            view.prediction.source,
        )
    )
    return out


def _headline(view: MemoryLoadView) -> None:
    figures = knee_texts(view)
    for col, (label, value, help_text) in zip(st.columns(len(figures)), figures, strict=True):
        col.metric(label, value, help=help_text or None)
    if view.prediction.capacity_tokens is None:
        st.caption(display.md_escape(view.prediction.note or memory.NOT_IN_CATALOGUE))
    else:
        st.caption(
            "Predicted KV usage = sequences in flight × tokens a sequence holds ÷ KV capacity "
            "(docs/memory.md); capacity from " + display.md_escape(view.prediction.source) + "."
        )


def points_table(view: MemoryLoadView) -> pd.DataFrame:
    """One row per run: load, requests, peak GPU memory, KV peak/P95/predicted, preemptions."""
    p = view.points
    return pd.DataFrame(
        {
            "run": p["name"],
            "load": p["load"],
            "requests": p["requests"],
            "peak GPU memory (GiB)": (p["gpu_peak_bytes"] / GIB).round(2),
            "KV peak (%)": (p["kv_peak"] * 100).round(1),
            "KV P95 (%)": (p["kv_p95"] * 100).round(1),
            "KV predicted (%)": (p["predicted_kv"] * 100).round(1),
            "preemptions": p["preemptions"],
            "per 1,000 requests": p["preemptions_per_1k"].round(2),
        }
    )
