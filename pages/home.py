"""Home: what is in the store, the latest runs, and one run in detail."""

from __future__ import annotations

import streamlit as st

from errors import ServeScopeError
from services.views.home import DISTRIBUTION_METRICS, HomeSelection, HomeView
from ui import charts, crosscheck_view, display, state
from ui.cache import home as home_cache
from ui.errors import show_error

st.title("ServeScope")


def _view(run_id: str | None) -> HomeView:
    try:
        return home_cache.home_view(HomeSelection(run_id=run_id))
    except ServeScopeError as exc:
        show_error(exc)
        st.stop()


view = _view(state.selected_run())
if view.latest_runs.empty:
    st.info("The store holds no runs yet. Fill it with one of these commands:")
    st.code("\n".join(display.EMPTY_STORE_COMMANDS), language="bash")
    st.caption(
        "`servescope demo` starts simulated engines and measures them; `servescope bench` "
        "measures any OpenAI-compatible endpoint; `servescope sim` serves a simulated engine "
        "to bench against."
    )
    st.stop()

st.subheader("In the store")
st.dataframe(display.overview_table(view.overview), hide_index=True, key="overview_table")

st.subheader("Latest runs")
if view.client_bound_runs:
    st.warning(
        f"Client-bound runs: {view.client_bound_runs} of {len(view.latest_runs)}. Their load "
        "generator fell behind, so their latencies include its own queueing (flagged in the "
        "table).",
        icon=":material/warning:",
    )
st.dataframe(
    display.runs_table(view.latest_runs),
    hide_index=True,
    key="latest_runs_table",
    on_select=state.table_select_callback("latest_runs_table", view.run_ids),
    selection_mode="single-row",
)

st.subheader("Run detail")
run_id = state.run_picker(display.run_choices(view.latest_runs, first=view.extra_run))
if run_id and (view.run is None or view.run.run_id != run_id):
    view = _view(run_id)  # the picker kept a run the selection did not name
run = view.run
if run is None:
    st.info("Select a run above to see its detail.")
    st.stop()

row = run.figures
if run.client_bound:
    st.warning(
        "Client-bound: "
        + display.md_escape(row.get("client_bound_reason") or "no reason recorded"),
        icon=":material/warning:",
    )
if run.aggregates_only:
    crosscheck_view.show_aggregates_only(run.tool.source, run.tool.summary)
    st.stop()
for col, (label, value, help_text) in zip(
    st.columns(4) + st.columns(4), display.summary_figures(row), strict=False
):
    col.metric(label, value, help=help_text)

st.dataframe(display.latency_table(row, run.itl), hide_index=True, key="latency_table")
crosscheck_view.show_crosscheck(run.crosscheck, run.tool.summary)

for tab, metric in zip(
    st.tabs([display.METRIC_LABELS[m] for m in DISTRIBUTION_METRICS]),
    DISTRIBUTION_METRICS,
    strict=True,
):
    label = display.METRIC_LABELS[metric]
    marks = display.percentile_marks(run.itl if metric == "itl_ms" else row, metric)
    left, right = tab.columns(2)
    sample = run.samples[metric]
    left.plotly_chart(
        charts.latency_histogram(sample, label, percentiles=marks), key=f"hist_{metric}"
    )
    right.plotly_chart(charts.latency_ecdf(sample, label, percentiles=marks), key=f"ecdf_{metric}")

if not run.failures.empty:
    st.subheader("Failures")
    st.dataframe(run.failures, hide_index=True, key="failures_table")
