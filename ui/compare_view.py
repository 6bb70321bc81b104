"""The Compare page's helpers: shaping (pure functions, unit-tested) and the widgets.

Selections live in ``st.query_params`` so a URL can be shared: ``runs`` (comma-separated run
ids), ``slo`` (profile name), ``by`` (grouping), ``base`` and ``cand`` (baseline and candidate).

Aggregate-only imports (``tool_summary.aggregates_only``, no request rows) have no per-request
data: their percentiles and throughput are the tool's own (its definitions), and goodput,
attainment, CDFs and bootstrap intervals cannot be computed for them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

import pandas as pd
import streamlit as st

from analysis import compare, crosscheck, slo
from analysis.metrics import low_confidence
from errors import ConfigError
from ui import cache, display
from ui.cache import compare as cache_compare

RUNS_PARAM, SLO_PARAM, BY_PARAM, BASE_PARAM, CAND_PARAM = "runs", "slo", "by", "base", "cand"
RUNS_KEY, SLO_KEY, BY_KEY, BASE_KEY, CAND_KEY = (
    "compare_runs",
    "compare_slo",
    "compare_by",
    "compare_base",
    "compare_cand",
)
_PENDING_SLO = "compare_slo_saved"
DIST_KEY = "compare_distributions"
#: Above this many requests in the selection, the sampled views start switched off.
BIG_SELECTION: Final = 1_000_000
#: Runs selected by default (the newest) when the URL names none.
DEFAULT_RUNS: Final = 12
DEFAULT_PROFILE: Final = "interactive-chat"
STATS: Final = ("p50", "p90", "p95", "p99")
CDF_METRICS: Final = (
    ("ttft_ms", "TTFT"),
    ("tpot_ms", "TPOT"),
    ("itl_ms", "ITL"),
    ("e2e_ms", "E2E"),
)
#: Tool aggregate → our column, for aggregate-only runs.
_TOOL_SCALARS: Final[Mapping[str, str]] = {
    "request_throughput": "request_throughput",
    "output_throughput": "output_throughput",
    "total_token_throughput": "total_token_throughput",
    "completed": "ok",
    "failed": "errors",
    "duration_s": "duration_s",
}


# --- pure shaping ----------------------------------------------------------------------------


def _tool_row(row: dict[str, Any]) -> dict[str, Any]:
    figures = crosscheck.tool_figures(row.get("tool_summary"))
    for key, value in figures.items():
        metric, _, stat = key.partition(".")
        if stat:
            col = f"{metric.removesuffix('_ms')}_{stat}_ms"
            if col in row:
                row[col] = value
        elif key in _TOOL_SCALARS and _TOOL_SCALARS[key] in row:
            row[_TOOL_SCALARS[key]] = value
    ok, failed = figures.get("completed"), figures.get("failed")
    if ok is not None:
        total = ok + (failed or 0.0)
        row["requests"] = int(total)
        row["errors"] = int(failed or 0)
        row["error_rate"] = (failed or 0.0) / total if total else math.nan
        for prefix in ("ttft", "tpot", "e2e"):
            if not display.is_missing(row.get(f"{prefix}_p50_ms")):
                row[f"{prefix}_n"] = int(ok)
    gpus, tps = row.get("gpu_count"), row.get("output_throughput")
    if (
        tps is not None
        and gpus is not None
        and not display.is_missing(tps)
        and not display.is_missing(gpus)
        and gpus
    ):
        row["output_throughput_per_gpu"] = float(tps) / int(gpus)
    return row


def fill_from_tool(aggs: pd.DataFrame) -> pd.DataFrame:
    """For aggregate-only runs, take the tool's own figures where ours are missing.

    Percentiles (``ttft_p99_ms`` …) come from ``tool_summary.metrics``; throughput, completed
    and failed counts too. The requests count becomes completed + failed. Other runs are left
    as they are.
    """
    if aggs.empty or "aggregates_only" not in aggs:
        return aggs.copy()
    rows = [_tool_row(r) if r.get("aggregates_only") else r for r in display.records(aggs)]
    out = pd.DataFrame(rows, columns=aggs.columns, index=aggs.index)
    for col in aggs.columns:
        if pd.api.types.is_float_dtype(aggs[col].dtype):
            out[col] = pd.to_numeric(out[col]).astype("float64")
    return out


def per_run(
    aggs: pd.DataFrame,
    attainment: pd.DataFrame,
    profile: slo.SloProfile,
    by: str,
    states: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per run: aggregates, SLO attainment, goodput, verdicts, series and load.

    Adds ``goodput``, ``attainment``, ``ttft_met`` (SQL counts), ``verdicts`` (list of
    ``slo.TargetResult``), ``passed`` (bool or None) and ``worst_ratio``, plus the columns of
    ``analysis.compare.curves``; with ``states`` (``memory_queries.run_states``: the memory
    cap's evidence) also ``mem_peak_fraction`` and ``gpu_samples``.
    """
    if aggs.empty:
        return aggs
    merged = fill_from_tool(aggs)
    att = attainment[["run_id", "ttft_met", "met", "goodput", "attainment"]]
    merged = merged.merge(att, on="run_id", how="left")
    if states is not None and not states.empty:
        mem = states[["run_id", "mem_peak_fraction", "gpu_samples"]]
        merged = merged.merge(mem, on="run_id", how="left")
    records = display.records(merged)
    verdicts = [slo.evaluate(r, profile) for r in records]
    merged["verdicts"] = pd.Series(verdicts, index=merged.index, dtype=object)
    merged["passed"] = pd.Series(
        [slo.overall(v) for v in verdicts], index=merged.index, dtype=object
    )
    merged["worst_ratio"] = pd.Series(
        [slo.worst_ratio(v) for v in verdicts], index=merged.index, dtype="float64"
    )
    return compare.curves(merged, by)


def _round(value: Any, digits: int) -> float | None:
    return None if display.is_missing(value) else round(float(value), digits)


def runs_table(rows: pd.DataFrame, profile: slo.SloProfile) -> pd.DataFrame:
    """The per-run table as displayed (row i ↔ run i of ``rows``)."""
    out: list[dict[str, Any]] = []
    for r in display.records(rows):
        row: dict[str, Any] = {
            "run": display.run_label(r),
            "series": r["series"],
            "load": display.load_label(
                r.get("arrival"), r.get("concurrency"), r.get("target_rate")
            ),
            "data": "tool's aggregates only" if r.get("aggregates_only") else "per request",
            "client-bound": display.client_bound_label(
                r.get("client_bound"), r.get("client_bound_reason")
            ),
            "SLO": {True: "pass", False: "FAIL", None: "no data"}[r.get("passed")],
            "requests": _round(r.get("requests"), 0),
            "req/s": _round(r.get("request_throughput"), 3),
            "output tok/s": _round(r.get("output_throughput"), 1),
            "tok/s per GPU": _round(r.get("output_throughput_per_gpu"), 1),
            "goodput req/s": _round(r.get("goodput"), 3),
            "attainment %": None
            if display.is_missing(r.get("attainment"))
            else round(100.0 * float(r["attainment"]), 1),
            "error %": None
            if display.is_missing(r.get("error_rate"))
            else round(100.0 * float(r["error_rate"]), 2),
            "timeout %": None
            if display.is_missing(r.get("timeout_rate"))
            else round(100.0 * float(r["timeout_rate"]), 2),
            "lag P99 ms": _round(r.get("lag_p99_ms"), 2),
        }
        for target in r["verdicts"]:
            measured = target.measured
            digits = 4 if target.target == "error_rate" else 3 if "fraction" in target.target else 1
            row[f"{target.label}"] = None if measured is None else round(measured, digits)
            limit = (
                f"≥ {target.limit:g}%"
                if target.target == "ttft_ms" and profile.length_conditioned
                else f"≤ {target.limit:g}"
            )
            row[f"{target.label} {limit}"] = target.verdict + (
                " (low n)" if target.low_confidence else ""
            )
        out.append(row)
    return pd.DataFrame(out)


def percentile_table(rows: pd.DataFrame) -> pd.DataFrame:
    """P50/P90/P95/P99 of TTFT, TPOT, ITL, E2E per run, each with its sample count (ms)."""
    out: list[dict[str, Any]] = []
    for r in display.records(rows):
        for label, prefix in (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"), ("E2E", "e2e")):
            raw = r.get(f"{prefix}_n")
            n = 0 if raw is None or display.is_missing(raw) else int(raw)
            row: dict[str, Any] = {"run": display.run_label(r), "metric": label, "samples": n}
            for stat in STATS:
                row[stat.upper()] = _round(r.get(f"{prefix}_{stat}_ms"), 2)
            row["P99 confidence"] = (
                "—" if n == 0 else ("low (<100)" if low_confidence(99, n) else "ok")
            )
            out.append(row)
    return pd.DataFrame(out)


def capacity_table(rows: pd.DataFrame) -> pd.DataFrame:
    """SLO capacity per series: measured, interpolated (marked) and the first failing load."""
    out = []
    for name, group in rows.groupby("series", sort=True):
        points = pd.DataFrame(
            {
                "load": group["load"],
                "passed": group["passed"],
                "ratio": group["worst_ratio"],
            }
        )
        cap = slo.capacity(str(name), points)
        kinds = [k for k in group["load_kind"] if k]
        unit = "" if not kinds else (" req/s" if kinds[0] == "rate" else " concurrent")
        out.append(
            {
                "series": cap.series,
                "capacity (measured)": "—" if cap.measured is None else f"{cap.measured:g}{unit}",
                "capacity (interpolated)": "—"
                if cap.interpolated is None
                else f"≈ {cap.interpolated:.3g}{unit} (interpolated)",
                "first failing load": "—"
                if cap.first_failing is None
                else f"{cap.first_failing:g}{unit}",
                "note": cap.note,
            }
        )
    return pd.DataFrame(out)


def diff_table(diffs: pd.DataFrame) -> pd.DataFrame:
    """``analysis.compare.compare_samples`` as displayed."""
    names = dict(CDF_METRICS)
    return pd.DataFrame(
        {
            "metric": [
                f"{names.get(m, m)} P{p:g}"
                for m, p in zip(diffs["metric"], diffs["percentile"], strict=True)
            ],
            "baseline ms": diffs["baseline"].round(2),
            "candidate ms": diffs["candidate"].round(2),
            "difference ms": diffs["diff"].round(2),
            "difference %": diffs["diff_pct"].round(1),
            "95% CI": [
                "—" if pd.isna(lo) else f"[{lo:+.2f}, {hi:+.2f}]"
                for lo, hi in zip(diffs["low"], diffs["high"], strict=True)
            ],
            "samples": [
                f"{b:,} / {c:,}"
                for b, c in zip(diffs["n_baseline"], diffs["n_candidate"], strict=True)
            ],
            "verdict": diffs["verdict"],
        }
    )


def with_requests(rows: pd.DataFrame, choices: Mapping[str, str]) -> dict[str, str]:
    """Run id → label of the runs that have per-request rows (CDFs, bootstrap)."""
    out: dict[str, str] = {}
    for r in display.records(rows):
        if r.get("aggregates_only") or display.is_missing(r.get("requests")):
            continue
        if int(r["requests"]) > 0:
            rid = str(r["run_id"])
            out[rid] = choices.get(rid, rid)
    return out


def slo_limits(profile: slo.SloProfile) -> dict[str, float]:
    """metric → the profile's fixed target (ms) for chart lines; a length-conditioned TTFT
    has no single line."""
    limits = {
        "ttft_ms": None if profile.length_conditioned else profile.ttft_ms,
        "tpot_ms": profile.tpot_ms,
        "e2e_ms": profile.e2e_ms,
    }
    return {k: v for k, v in limits.items() if v is not None}


def split_ids(text: str | None) -> list[str]:
    """``"a,b,,c"`` → ``["a", "b", "c"]`` (the ``runs`` query parameter)."""
    return [p.strip() for p in (text or "").split(",") if p.strip()]


def profile_entry(values: Mapping[str, Any]) -> dict[str, Any]:
    """The editor's values as a validated catalog entry (ConfigError names the bad field)."""
    entry = {k: v for k, v in values.items() if v is not None and v != ""}
    return slo.SloProfile.from_entry(entry).to_entry()


# --- widgets ---------------------------------------------------------------------------------


def _qp(name: str) -> str | None:
    value = st.query_params.get(name)
    return value or None


def _sync(param: str, key: str) -> None:
    value = st.session_state.get(key)
    if isinstance(value, list):
        value = ",".join(value)
    if value:
        st.query_params[param] = str(value)
    elif param in st.query_params:
        del st.query_params[param]


def _select(
    label: str, options: Sequence[str], param: str, key: str, default: str | None, **kw: Any
) -> str | None:
    if not options:
        return None
    current = st.session_state.get(key)
    if current not in options:
        wanted = _qp(param)
        current = wanted if wanted in options else (default if default in options else options[0])
        st.session_state[key] = current
    if current is not None and _qp(param) != current:
        st.query_params[param] = str(current)
    chosen: str | None = st.selectbox(
        label, list(options), key=key, on_change=_sync, args=(param, key), **kw
    )
    return chosen


def pick_runs(choices: Mapping[str, str]) -> list[str]:
    """A multiselect over ``choices`` (run id → label), synced with ``?runs=``."""
    options = list(choices)
    current = st.session_state.get(RUNS_KEY)
    if current is None or any(c not in choices for c in current):
        wanted = [r for r in split_ids(_qp(RUNS_PARAM)) if r in choices]
        current = wanted or options[:DEFAULT_RUNS]
        st.session_state[RUNS_KEY] = current
    joined = ",".join(current)
    if (_qp(RUNS_PARAM) or "") != joined:
        if joined:
            st.query_params[RUNS_PARAM] = joined
        elif RUNS_PARAM in st.query_params:
            del st.query_params[RUNS_PARAM]
    chosen: list[str] = st.multiselect(
        "Runs",
        options,
        format_func=lambda r: choices.get(r, r),
        key=RUNS_KEY,
        on_change=_sync,
        args=(RUNS_PARAM, RUNS_KEY),
    )
    return chosen


def pick_profile(profiles: Sequence[Mapping[str, Any]]) -> slo.SloProfile | None:
    """A select box over the SLO profiles, synced with ``?slo=``; the chosen profile."""
    by_name = {str(p["name"]): p for p in profiles}
    pending = st.session_state.pop(_PENDING_SLO, None)
    if pending in by_name:
        st.session_state[SLO_KEY] = pending
    name = _select("SLO profile", list(by_name), SLO_PARAM, SLO_KEY, DEFAULT_PROFILE)
    if name is None:
        return None
    try:
        return slo.SloProfile.from_entry(by_name[name])
    except ConfigError as exc:
        st.error(
            f"SLO profile {display.md_escape(name)} is invalid: {display.md_escape(exc.message)}"
        )
        return None


def pick_grouping() -> str:
    chosen = _select(
        "Series by",
        list(compare.GROUPINGS),
        BY_PARAM,
        BY_KEY,
        "configuration",
        format_func=lambda g: compare.GROUPINGS.get(g, g),
    )
    return chosen or "configuration"


def pick_pair(choices: Mapping[str, str]) -> tuple[str | None, str | None]:
    """Baseline and candidate among the selected runs (``?base=``, ``?cand=``)."""
    options = list(choices)
    if len(options) < 2:
        return None, None
    left, right = st.columns(2)
    with left:
        base = _select(
            "Baseline",
            options,
            BASE_PARAM,
            BASE_KEY,
            options[0],
            format_func=lambda r: choices.get(r, r),
        )
    with right:
        cand = _select(
            "Candidate",
            options,
            CAND_PARAM,
            CAND_KEY,
            options[1],
            format_func=lambda r: choices.get(r, r),
        )
    return base, cand


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
                entry = profile_entry(values)
            except ConfigError as exc:
                st.error(display.md_escape(exc.message), icon=":material/error:")
                return
            cache.save_slo_profile(entry)
            # the profile picker already exists in this run: select the new one on the next
            st.session_state[_PENDING_SLO] = entry["name"]
            st.query_params[SLO_PARAM] = entry["name"]
            st.rerun()


def want_distributions(rows: pd.DataFrame) -> bool:
    """A toggle for the sampled views (CDFs, bootstrap): on by default up to
    ``BIG_SELECTION`` requests in the selected runs, or when every run's samples are already
    stored (``run_views.prepare``); off above otherwise (each sample scans the runs)."""
    total = int(pd.to_numeric(rows["requests"]).fillna(0).sum()) if "requests" in rows else 0
    per_request: list[str] = []
    if "requests" in rows and len(rows):
        has_rows = pd.to_numeric(rows["requests"]).fillna(0) > 0
        per_request = [str(r) for r in rows.loc[has_rows, "run_id"]]
    small = total <= BIG_SELECTION
    on = bool(
        st.toggle(
            "Latency CDFs and baseline vs candidate",
            value=small or cache_compare.samples_ready(per_request),
            key=DIST_KEY,
            help="Drawn from an even sample of each run (at most 5,000 values per metric).",
        )
    )
    if not on:
        st.caption(
            f"Off by default for selections above {BIG_SELECTION:,} requests (these hold "
            f"{total:,}): sampling them scans every request, about a second per 10 million."
        )
    return on


def show_aggregates_only(rows: pd.DataFrame) -> None:
    """Say which runs hold only the tool's aggregates and what cannot be shown for them."""
    names = [
        display.run_label(r) for r in display.records(rows[rows["aggregates_only"].astype(bool)])
    ]
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
