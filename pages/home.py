"""Home: what is in the store, the latest runs, and one run in detail."""

from __future__ import annotations

import streamlit as st

from errors import ServeScopeError
from ui import cache, charts, crosscheck_view, display, state
from ui.errors import show_error

st.title("ServeScope")

try:
    overview = cache.store_overview()
    latest = cache.latest_runs() if not overview.empty else None
except ServeScopeError as exc:
    show_error(exc)
    st.stop()

if latest is None or latest.empty:
    st.info("The store holds no runs yet. Fill it with one of these commands:")
    st.code("\n".join(display.EMPTY_STORE_COMMANDS), language="bash")
    st.caption(
        "`servescope demo` starts simulated engines and measures them; `servescope bench` "
        "measures any OpenAI-compatible endpoint; `servescope sim` serves a simulated engine "
        "to bench against."
    )
    st.stop()

st.subheader("In the store")
st.dataframe(display.overview_table(overview), hide_index=True, key="overview_table")

st.subheader("Latest runs")
bound = int(latest["client_bound"].fillna(False).sum())
if bound:
    st.warning(
        f"Client-bound runs: {bound} of {len(latest)}. Their load generator fell behind, so "
        "their latencies include its own queueing (flagged in the table).",
        icon=":material/warning:",
    )
run_ids = latest["run_id"].tolist()
st.dataframe(
    display.runs_table(latest),
    hide_index=True,
    key="latest_runs_table",
    on_select=state.table_select_callback("latest_runs_table", run_ids),
    selection_mode="single-row",
)

st.subheader("Run detail")
choices = display.run_choices(latest)
wanted = state.requested_run()
if wanted and wanted not in choices:
    extra = cache.run_detail(wanted)
    if not extra.empty:
        choices = {wanted: display.run_label(display.first_row(extra)), **choices}
run_id = state.run_picker(choices)
detail = cache.run_detail(run_id) if run_id else None
if run_id is None or detail is None or detail.empty:
    st.info("Select a run above to see its detail.")
    st.stop()

row = display.first_row(detail)
if display.client_bound_label(row.get("client_bound"), None):
    st.warning(
        "Client-bound: "
        + display.md_escape(row.get("client_bound_reason") or "no reason recorded"),
        icon=":material/warning:",
    )
source, summary = crosscheck_view.tool_summary(run_id)
if crosscheck_view.is_aggregates_only(row, summary):
    crosscheck_view.show_aggregates_only(source, summary)
    st.stop()
for col, (label, value, help_text) in zip(
    st.columns(4) + st.columns(4), display.summary_figures(row), strict=False
):
    col.metric(label, value, help=help_text)

itl = cache.run_itl_summary(run_id)
itl_row = display.first_row(itl)
st.dataframe(display.latency_table(row, itl_row), hide_index=True, key="latency_table")
crosscheck_view.show_crosscheck(source, summary, row, itl_row)

for tab, (metric, label) in zip(
    st.tabs(["TTFT", "TPOT", "ITL", "E2E"]),
    [("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E")],
    strict=True,
):
    sample = cache.run_metric_sample(run_id, metric)
    marks = display.percentile_marks(itl_row if metric == "itl_ms" else row, metric)
    left, right = tab.columns(2)
    left.plotly_chart(
        charts.latency_histogram(sample, label, percentiles=marks), key=f"hist_{metric}"
    )
    right.plotly_chart(charts.latency_ecdf(sample, label, percentiles=marks), key=f"ecdf_{metric}")

failures = cache.run_errors(run_id)
if not failures.empty:
    st.subheader("Failures")
    st.dataframe(failures, hide_index=True, key="failures_table")
