"""Compare: runs side by side against an SLO profile — throughput, goodput, percentiles, curves
across load, SLO capacity, and baseline vs candidate with bootstrap intervals."""

from __future__ import annotations

import streamlit as st

from errors import ServeScopeError
from ui import cache, display
from ui import compare_charts as charts
from ui import compare_view as view
from ui.cache import compare as cache_compare
from ui.cache import latency as cache_latency
from ui.errors import show_error

st.title("Compare")
try:
    latest = cache_compare.candidates()
    profiles = list(cache.slo_profiles().values())
except ServeScopeError as exc:
    show_error(exc)
    st.stop()

if latest.empty:
    st.info("The store holds no runs to compare yet. Fill it with one of these commands:")
    st.code("\n".join(display.EMPTY_STORE_COMMANDS), language="bash")
    st.stop()

choices = display.run_choices(latest)
left, middle, right = st.columns([4, 2, 2])
with left:
    run_ids = view.pick_runs(choices)
with middle:
    profile = view.pick_profile(profiles)
with right:
    by = view.pick_grouping()
view.profile_editor(profile)
if not run_ids or profile is None:
    st.info("Choose one or more runs and an SLO profile to compare.")
    st.stop()

try:
    aggs = cache_compare.run_aggregates(run_ids)
    attainment = cache_compare.slo_attainment(run_ids, profile.sql_thresholds())
    # the memory cap is judged on each run's GPU samples (peak used / total)
    states = (
        None if profile.max_memory_fraction is None else cache_latency.run_states(tuple(run_ids))
    )
except ServeScopeError as exc:
    show_error(exc)
    st.stop()
rows = view.per_run(aggs, attainment, profile, by, states)
st.caption(display.md_escape(profile.description or profile.name))
view.show_aggregates_only(rows)
if rows["client_bound"].fillna(False).astype(bool).any():
    st.warning(
        "Some runs are client-bound: their latencies include the load generator's own queueing.",
        icon=":material/warning:",
    )

st.subheader("Runs against the SLO")
st.dataframe(view.runs_table(rows, profile), hide_index=True, key="compare_runs_table")
st.subheader("Percentiles")
st.dataframe(view.percentile_table(rows), hide_index=True, key="compare_pct_table")
st.subheader("SLO capacity per series")
st.dataframe(view.capacity_table(rows), hide_index=True, key="compare_capacity_table")

st.subheader("Across load")
pct = profile.percentile
limits = view.slo_limits(profile)
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
per_request = view.with_requests(rows, choices)
if not view.want_distributions(rows):
    st.stop()
samples = cache_compare.samples(list(per_request))
st.plotly_chart(
    charts.latency_cdf_grid(samples, per_request, view.CDF_METRICS, slo_limits=limits),
    key="chart_cdfs",
)
base, cand = view.pick_pair(per_request)
if base is None or cand is None or base == cand:
    st.info("Pick two different runs with per-request data as baseline and candidate.")
    st.stop()
diffs = cache_compare.baseline_vs_candidate(list(per_request), base, cand)
st.caption(
    "Candidate − baseline, with 95% bootstrap intervals (seeded) from up to "
    f"{cache_compare.SAMPLE_LIMIT:,} values per run; “regressed” only when the interval is "
    "entirely above zero."
)
st.dataframe(view.diff_table(diffs), hide_index=True, key="compare_diff_table")
