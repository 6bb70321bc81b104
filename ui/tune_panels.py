"""The Tune page's widgets and tables: the sweep and parameter pickers (synced with the URL),
the recommendation with its explanation in numbers, the points table, the failed points with
their log tails, and the empty state.

Everything shown comes from the view model (``services.views.tune.TuneView``); every text that
comes from the store is escaped before it reaches Markdown (``ui.display.md_escape``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pandas as pd
import streamlit as st

from analysis.metrics import finite_number
from analysis.recommend import STATUS_TEXT, UNITS, Recommendation, value_text
from services.views.tune import SWEEP_PARAM, X_PARAM, TuneSelection, TuneView
from ui import display, state

SWEEP_KEY = "tune_sweep"
X_KEY = "tune_x"
SWEEP_COMMAND = "servescope sweep examples/sim-sweep.toml"


def current_selection() -> TuneSelection:
    """The selection at the top of the script: what the pickers hold, else the URL's."""
    return TuneSelection(
        sweep=state.widget_or_url(SWEEP_KEY, SWEEP_PARAM),
        x=state.widget_or_url(X_KEY, X_PARAM),
    )


def show_no_sweeps() -> None:
    """The empty state: no sweep stored yet, and the command that stores one."""
    st.info(
        "The store holds no parameter sweep yet. A sweep launches the engine once per "
        "configuration, searches each one's SLO capacity and stores every point here:"
    )
    st.code(SWEEP_COMMAND, language="bash")
    st.caption(
        "`examples/sim-sweep.toml` sweeps the simulated engine and finishes in a few minutes; "
        "`--dry-run` prints the points first, `--resume` continues an interrupted sweep."
    )


def _when(row: dict[str, Any]) -> str:
    value = finite_number(row.get("started_at"))
    if value is None:
        value = finite_number(row.get("created_at"))
    if value is None:
        return "not started"
    return dt.datetime.fromtimestamp(value, tz=dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def pick_sweep(view: TuneView) -> None:
    """The sweep (newest first), synced with ``?sweep=``."""
    rows = display.records(view.sweeps)
    labels = {
        str(r["sweep_id"]): f"{r.get('name') or r['sweep_id']} · {r.get('engine') or '?'} · "
        f"{_when(r)} · {int(r.get('points') or 0)} points"
        for r in rows
    }
    state.show_resolved(SWEEP_KEY, SWEEP_PARAM, view.selection.sweep)
    st.selectbox(
        "Sweep",
        list(labels),
        key=SWEEP_KEY,
        format_func=lambda s: labels.get(s, s),
        on_change=state.sync_to_url(SWEEP_KEY, SWEEP_PARAM),
    )
    if view.notice:
        st.warning(display.md_escape(view.notice))
    record = view.sweep or {}
    facts = [
        f"engine **{display.md_escape(record.get('engine') or '?')}**",
        f"workload **{display.md_escape(record.get('workload') or '?')}**",
        f"SLO **{display.md_escape(record.get('slo') or '?')}**",
        f"mode {display.md_escape(record.get('mode') or '?')}",
        f"status {display.md_escape(record.get('status') or '?')}",
    ]
    st.caption(" · ".join(facts))
    if view.profile_error:
        st.caption(display.md_escape(view.profile_error))


def show_recommendation(rec: Recommendation) -> None:
    """The headline, the explanation sentences and the guard-rails applied."""
    if rec.best is None:
        st.warning(display.md_escape(rec.headline()), icon=":material/help:")
    else:
        st.success(f"**{display.md_escape(rec.headline())}**", icon=":material/recommend:")
    if rec.explanations:
        st.markdown(
            "\n".join(f"- {display.md_escape(e.sentence)}" for e in rec.explanations),
        )
    if rec.fixed:
        fixed = " ".join(f"{k}={value_text(v)}" for k, v in sorted(rec.fixed.items()))
        st.caption(display.md_escape(f"Every point shares: {fixed}."))
    limits = []
    if "max_memory_fraction" in rec.limits:
        limits.append(f"peak GPU memory ≤ {rec.limits['max_memory_fraction']:.0%}")
    if "max_preemptions_per_1k" in rec.limits:
        limits.append(f"≤ {rec.limits['max_preemptions_per_1k']:g} preemptions per 1,000 requests")
    if limits:
        st.caption(display.md_escape("Guard-rails: " + "; ".join(limits) + "."))


def show_warnings(rec: Recommendation) -> None:
    """Robustness: the top two within noise, the best point's repeat spread."""
    for text in rec.warnings:
        st.warning(display.md_escape(text), icon=":material/balance:")


def _verdict(point: Any, best: str | None) -> str:
    if point.point_id == best:
        return "recommended"
    if point.rejected:
        return f"rejected: {point.rejected}"
    if point.status != "completed":
        return STATUS_TEXT.get(point.status, point.status)
    if point.capacity is None:
        return "no load met the SLO"
    return "on the frontier" if point.on_front else ""


def points_table(view: TuneView) -> pd.DataFrame:
    """One row per point and repeat: parameters, status, capacity with its kind, runs used,
    peak memory, preemptions, the verdict and, for failed points, the error."""
    rec = view.recommendation
    best = rec.best.point_id if rec is not None and rec.best is not None else None
    summaries = {p.point_id: p for p in rec.points} if rec is not None else {}
    rows = []
    for r in display.records(view.points):
        cap = finite_number(r.get("capacity"))
        kind = str(r.get("capacity_kind") or "")
        unit = UNITS.get(kind, kind)
        if cap is not None and r.get("capacity_interpolated"):
            unit += " (interpolated)"
        summary = summaries.get(str(r["point_id"]))
        mem = finite_number(r.get("peak_memory_fraction"))
        rows.append(
            {
                "Point": str(r.get("label") or r["point_id"]),
                "Repeat": int(r.get("repeat") or 0),
                "Status": str(r.get("status") or ""),
                "Verdict": _verdict(summary, best) if summary is not None else "",
                "SLO capacity": cap,
                "Unit": unit if cap is not None else "",
                "Runs used": int(r.get("runs_used") or 0),
                "Peak memory": "—" if mem is None else f"{mem:.0%}",
                "Preemptions / 1k": finite_number(r.get("preemptions")),
                "Error": str(r.get("error") or ""),
                "Note": str(r.get("capacity_note") or ""),
            }
        )
    return pd.DataFrame(rows)


def show_failed_points(view: TuneView) -> None:
    """Each point that did not complete, with its error, launch command and log tail."""
    failed = [
        r
        for r in display.records(view.points)
        if r.get("status") not in ("completed", "pending", "running")
        and (r.get("error") or r.get("log_tail"))
    ]
    if not failed:
        return
    st.subheader("Points that failed")
    for r in failed:
        status = STATUS_TEXT.get(str(r.get("status")), str(r.get("status")))
        title = f"{r.get('label') or r['point_id']} (repeat {int(r.get('repeat') or 0)}): {status}"
        with st.expander(display.md_escape(title), icon=":material/error:"):
            if r.get("error"):
                st.markdown(f"**Error**: {display.md_escape(r['error'])}")
            if r.get("launch_command"):
                st.caption("Launched as")
                st.code(str(r["launch_command"]), language="bash")
            st.caption("Log tail")
            st.code(str(r.get("log_tail") or "(no log captured)"), language="text")


def pick_parameter(view: TuneView) -> None:
    """The parameter of the effect chart, synced with ``?x=``."""
    rec = view.recommendation
    names = [e.param for e in rec.effects] if rec is not None else []
    if not names or view.selection.x is None:
        st.caption("No parameter took two values: no effect to chart.")
        return
    state.show_resolved(X_KEY, X_PARAM, view.selection.x)
    st.selectbox("Parameter", names, key=X_KEY, on_change=state.sync_to_url(X_KEY, X_PARAM))
