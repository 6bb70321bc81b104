"""The Compare page's widgets and panels: its selection read from the widgets and the URL, the
pickers showing the selection as the view model resolved it, the SLO profile editor and the
notes about aggregate-only runs and the sampled views.

Selections live in ``st.query_params`` so a URL can be shared: ``runs`` (comma-separated run
ids), ``slo`` (profile name), ``by`` (grouping), ``base`` and ``cand`` (baseline and candidate).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import streamlit as st

import services.views.compare
from analysis import compare, slo
from errors import ConfigError
from services.views.compare import (
    BASE_PARAM,
    BY_PARAM,
    CAND_PARAM,
    CDF_METRICS,
    DEFAULT_GROUPING,
    RUNS_PARAM,
    SAMPLE_LIMIT,
    SLO_PARAM,
    CompareSelection,
    CompareView,
    split_ids,
)
from ui import compare_charts, compare_tables, display, state
from ui.cache import compare as cache_compare

RUNS_KEY: Final = "compare_runs"
SLO_KEY: Final = "compare_slo"
BY_KEY: Final = "compare_by"
BASE_KEY: Final = "compare_base"
CAND_KEY: Final = "compare_cand"
DIST_KEY: Final = "compare_distributions"
#: A profile just saved: the picker (already drawn in that run) selects it on the next.
_PENDING_SLO: Final = "compare_slo_saved"


def current_selection() -> CompareSelection:
    """The selection at the top of the script: what the widgets hold (their callbacks ran
    before this rerun), else the URL's; the view model resolves what is left open."""
    chosen_runs = st.session_state.get(RUNS_KEY)
    runs = (
        tuple(str(r) for r in chosen_runs)
        if chosen_runs is not None
        else split_ids(state.url_value(RUNS_PARAM)) or None
    )
    pending = st.session_state.pop(_PENDING_SLO, None)
    wanted: Any = st.session_state.get(DIST_KEY)
    return CompareSelection(
        runs=runs,
        slo=pending or state.widget_or_url(SLO_KEY, SLO_PARAM),
        by=state.widget_or_url(BY_KEY, BY_PARAM) or DEFAULT_GROUPING,
        baseline=state.widget_or_url(BASE_KEY, BASE_PARAM),
        candidate=state.widget_or_url(CAND_KEY, CAND_PARAM),
        distributions=None if wanted is None else bool(wanted),
    )


def pick_runs(view: CompareView, choices: Mapping[str, str]) -> None:
    """A multiselect over ``choices`` (run id → label), synced with ``?runs=``."""
    state.show_resolved(RUNS_KEY, RUNS_PARAM, list(view.selection.runs or ()))
    st.multiselect(
        "Runs",
        list(choices),
        format_func=lambda r: choices.get(r, r),
        key=RUNS_KEY,
        on_change=state.sync_to_url(RUNS_KEY, RUNS_PARAM),
    )


def pick_profile(view: CompareView) -> None:
    """A select box over the SLO profiles, synced with ``?slo=``; says so when the chosen
    profile is invalid."""
    name = view.selection.slo
    if not view.profile_names or name is None:
        return
    state.show_resolved(SLO_KEY, SLO_PARAM, name)
    st.selectbox(
        "SLO profile",
        list(view.profile_names),
        key=SLO_KEY,
        on_change=state.sync_to_url(SLO_KEY, SLO_PARAM),
    )
    if view.profile_error is not None:
        st.error(
            f"SLO profile {display.md_escape(name)} is invalid: "
            f"{display.md_escape(view.profile_error)}"
        )


def pick_grouping(view: CompareView) -> None:
    """How runs are grouped into series (``?by=``)."""
    state.show_resolved(BY_KEY, BY_PARAM, view.selection.by)
    st.selectbox(
        "Series by",
        list(compare.GROUPINGS),
        key=BY_KEY,
        on_change=state.sync_to_url(BY_KEY, BY_PARAM),
        format_func=lambda g: compare.GROUPINGS.get(g, g),
    )


def pick_pair(view: CompareView, labels: Mapping[str, str]) -> None:
    """Baseline and candidate among the runs with per-request data (``?base=``, ``?cand=``)."""
    base, cand = view.selection.baseline, view.selection.candidate
    if base is None or cand is None:
        return
    options = list(labels)
    left, right = st.columns(2)
    for column, label, key, param, value in (
        (left, "Baseline", BASE_KEY, BASE_PARAM, base),
        (right, "Candidate", CAND_KEY, CAND_PARAM, cand),
    ):
        state.show_resolved(key, param, value)
        column.selectbox(
            label,
            options,
            key=key,
            on_change=state.sync_to_url(key, param),
            format_func=lambda r: labels.get(r, r),
        )


_EDITOR_FIELDS: Final = (
    ("description", "Description", "text"),
    ("percentile", "Percentile", "percentile"),
    ("ttft_ms", "TTFT target (ms)", "num"),
    ("tpot_ms", "TPOT target (ms)", "num"),
    ("e2e_ms", "E2E target (ms)", "num"),
    ("max_error_rate", "Max error rate (0–1)", "num"),
    ("max_memory_fraction", "Max GPU memory fraction (0–1)", "num"),
    ("ttft_base_ms", "Length-conditioned TTFT: base (ms)", "num"),
    ("ttft_ms_per_1k_input", "… plus ms per 1,000 input tokens", "num"),
)


def profile_editor(current: slo.SloProfile | None) -> None:
    """A form that saves an SLO profile as the user's own (new name: a new profile)."""
    start = current.to_entry() if current else {}
    with st.expander("Edit or add an SLO profile", icon=":material/tune:"), st.form("slo_editor"):
        values: dict[str, Any] = {
            "name": st.text_input("Name", value=str(start.get("name", "")), key="slo_edit_name")
        }
        for field, label, kind in _EDITOR_FIELDS:
            key = f"slo_edit_{field}"
            if kind == "text":
                values[field] = st.text_input(label, value=str(start.get(field, "")), key=key)
            elif kind == "percentile":
                values[field] = st.selectbox(
                    label,
                    list(slo.PERCENTILES),
                    index=list(slo.PERCENTILES).index(float(start.get(field, 99.0))),
                    format_func=lambda p: f"P{p:g}",
                    key=key,
                )
            else:
                default = start.get(field)
                values[field] = st.number_input(
                    label,
                    value=None if default is None else float(default),
                    min_value=0.0,
                    step=1.0 if field.endswith("_ms") or field.endswith("input") else 0.001,
                    format="%.3f",
                    key=key,
                )
        if st.form_submit_button("Save profile", key="slo_edit_save"):
            try:
                name = cache_compare.save_slo_profile(values)
            except ConfigError as exc:
                st.error(display.md_escape(exc.message), icon=":material/error:")
                return
            # the profile picker already exists in this run: select the new one on the next
            st.session_state[_PENDING_SLO] = name
            state.set_url_value(SLO_PARAM, name)
            st.rerun()


def want_distributions(view: CompareView) -> bool:
    """A toggle for the sampled views (CDFs, bootstrap), first set as the view model resolved
    it: on up to ``BIG_SELECTION`` requests in the selected runs, or when every run's samples
    are already stored (``prepare``); off above otherwise (each sample scans the runs)."""
    state.init_widget(DIST_KEY, bool(view.selection.distributions))
    on = bool(
        st.toggle(
            "Latency CDFs and baseline vs candidate",
            key=DIST_KEY,
            help="Drawn from an even sample of each run (at most 5,000 values per metric).",
        )
    )
    if not on:
        big = services.views.compare.BIG_SELECTION
        st.caption(
            f"Off by default for selections above {big:,} requests (these hold "
            f"{view.requests_total:,}): sampling them scans every request, about a second per "
            "10 million."
        )
    return on


def show_comparison_warnings(view: CompareView) -> None:
    """One warning listing how the selected runs differ in what a fair comparison holds equal
    (model, precision, output-token cap, workload, GPU); nothing when they agree."""
    if not view.warnings:
        return
    lines = "\n".join(f"- {display.md_escape(w.message)}" for w in view.warnings)
    st.warning(
        "Not a like-for-like comparison — the runs differ in more than what you compare:\n\n"
        + lines,
        icon=":material/balance:",
    )


def show_aggregates_only(view: CompareView) -> None:
    """Say which runs hold only the tool's aggregates and what cannot be shown for them."""
    names = [display.run_label(r) for r in display.records(view.aggregates_only)]
    if not names:
        return
    st.warning(
        "Aggregates only: "
        + "; ".join(display.md_escape(n) for n in names)
        + ". These imports have no per-request data, so their percentiles and throughput are "
        "the tool's own (its definitions, see docs/metrics.md), and goodput, SLO attainment, "
        "ITL, latency CDFs and bootstrap intervals cannot be computed for them.",
        icon=":material/table_chart:",
    )


def show_distributions(view: CompareView, choices: Mapping[str, str]) -> None:
    """The sampled views: the latency CDFs of the runs with per-request data, then baseline
    vs candidate with bootstrap intervals (when two different runs are picked)."""
    if view.samples is None:
        return
    labels = {run_id: choices.get(run_id, run_id) for run_id in view.per_request}
    st.plotly_chart(
        compare_charts.latency_cdf_grid(
            view.samples, labels, CDF_METRICS, slo_limits=view.slo_limits
        ),
        key="chart_cdfs",
    )
    pick_pair(view, labels)
    if view.diffs is None:
        st.info("Pick two different runs with per-request data as baseline and candidate.")
        return
    st.caption(
        "Candidate − baseline, with 95% bootstrap intervals (seeded) from up to "
        f"{SAMPLE_LIMIT:,} values per run; “regressed” only when the interval is "
        "entirely above zero."
    )
    st.dataframe(compare_tables.diff_table(view.diffs), hide_index=True, key="compare_diff_table")
