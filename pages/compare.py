"""Compare: runs side by side against an SLO profile — throughput, goodput, percentiles, curves
across load, SLO capacity, and baseline vs candidate with bootstrap intervals."""

from __future__ import annotations

import streamlit as st

from errors import ServeScopeError
from ui import compare_charts as charts
from ui import compare_panels as panels
from ui import compare_tables as tables
from ui import display, production_mix
from ui.cache import compare as cache_compare
from ui.errors import show_error

st.title("Compare")
try:
    view = cache_compare.compare_view(panels.current_selection())
except ServeScopeError as exc:
    show_error(exc)
    st.stop()

if view.candidates.empty:
    st.info("The store holds no runs to compare yet. Fill it with one of these commands:")
    st.code("\n".join(display.EMPTY_STORE_COMMANDS), language="bash")
    st.stop()

choices = display.run_choices(view.candidates)
left, middle, right = st.columns([4, 2, 2])
with left:
    panels.pick_runs(view, choices)
with middle:
    panels.pick_profile(view)
with right:
    panels.pick_grouping(view)
panels.profile_editor(view.profile)
if view.problem is not None:
    show_error(view.problem)
    st.stop()
rows, profile = view.rows, view.profile
if rows is None or profile is None:
    st.info("Choose one or more runs and an SLO profile to compare.")
    st.stop()

st.caption(display.md_escape(profile.description or profile.name))
panels.show_comparison_warnings(view)
panels.show_aggregates_only(view)
if view.any_client_bound:
    st.warning(
        "Some runs are client-bound: their latencies include the load generator's own queueing.",
        icon=":material/warning:",
    )

st.subheader("Runs against the SLO")
st.dataframe(tables.runs_table(rows, profile), hide_index=True, key="compare_runs_table")
st.subheader("Percentiles")
st.dataframe(tables.percentile_table(rows), hide_index=True, key="compare_pct_table")
st.subheader("SLO capacity per series")
st.dataframe(tables.capacity_table(view.capacity), hide_index=True, key="compare_capacity_table")
production_mix.show_for_runs(view.per_request, choices)

st.subheader("Across load")
pct = profile.percentile
limits = view.slo_limits
tabs = st.tabs(["Throughput", "Goodput", "TTFT", "TPOT", "Pareto"])
tabs[0].plotly_chart(charts.throughput_vs_load(rows), key="chart_throughput")
tabs[1].plotly_chart(charts.throughput_vs_load(rows, "goodput"), key="chart_goodput")
tabs[2].plotly_chart(
    charts.latency_vs_load(rows, "ttft", pct, limits.get("ttft_ms")), key="chart_ttft"
)
tabs[3].plotly_chart(
    charts.latency_vs_load(rows, "tpot", pct, limits.get("tpot_ms")), key="chart_tpot"
)
tabs[4].plotly_chart(charts.pareto_chart(rows), key="chart_pareto")

st.subheader("Distributions and baseline vs candidate")
if panels.want_distributions(view):
    panels.show_distributions(view, choices)
