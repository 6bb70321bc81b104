"""Run detail, imported runs: our figures beside the tool's own, and aggregates-only runs.

``crosscheck_table`` / ``aggregates_table`` are pure (DataFrame in, display DataFrame out);
``show_*`` render. What the view models compute — the tool's summary, the aggregates-only
flag (``services.views.imported_runs``), the comparison (``analysis.crosscheck``) — is not
here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

import pandas as pd
import streamlit as st

from analysis import crosscheck
from ui import display

STAT_LABELS: Final[Mapping[str, str]] = {
    "mean": "mean",
    "p50": "P50",
    "p90": "P90",
    "p95": "P95",
    "p99": "P99",
}


def figure_label(metric: str, stat: str) -> str:
    """``ttft_ms``, ``p99`` → ``TTFT P99 (ms)``; a scalar → its label."""
    name = display.METRIC_LABELS.get(metric, metric)
    if not stat:
        return name
    return f"{name} {STAT_LABELS.get(stat, stat)} (ms)"


def _diff_text(diff_pct: float) -> str:
    if math.isnan(diff_pct):
        return "—"
    if math.isinf(diff_pct):
        return "tool's is 0"
    return f"{diff_pct:+.1f}%"


def crosscheck_table(compared: pd.DataFrame) -> pd.DataFrame:
    """``crosscheck.compare``'s frame for display: labels, rounded figures, a flag column."""
    against = [
        "" if ours == metric else f"our {display.METRIC_LABELS.get(ours, ours)}"
        for metric, ours in zip(compared["metric"], compared["ours_metric"], strict=True)
    ]
    return pd.DataFrame(
        {
            "figure": [
                figure_label(m, s)
                for m, s in zip(compared["metric"], compared["stat"], strict=True)
            ],
            "compared with": against,
            "ours": compared["ours"].round(3),
            "tool's": compared["tool"].round(3),
            "difference": [_diff_text(d) for d in compared["diff_pct"]],
            "over 1%": ["yes" if d else "" for d in compared["differs"]],
            "known reason": compared["reason"],
        }
    )


def aggregates_table(summary: Mapping[str, Any] | None) -> pd.DataFrame:
    """The tool's own aggregates for display (runs with nothing else)."""
    agg = crosscheck.tool_aggregates(summary)
    return pd.DataFrame(
        {
            "figure": [figure_label(m, s) for m, s in zip(agg["metric"], agg["stat"], strict=True)],
            "tool's": agg["value"].round(3),
            "tool's definition": agg["definition"],
        }
    )


def show_aggregates_only(source: str, summary: Mapping[str, Any] | None) -> None:
    """Say clearly that there is no per-request data, and show the tool's aggregates instead."""
    st.warning(
        f"Aggregates only: this {display.md_escape(source or 'imported')} file has no per-request "
        "data, so there are no distributions, percentiles of ours or failure details. "
        "Below are the tool's own figures, with its definitions.",
        icon=":material/table_chart:",
    )
    table = aggregates_table(summary)
    if table.empty:
        st.info("The file held no aggregates either.")
    else:
        st.dataframe(table, hide_index=True, key="tool_aggregates_table")


def show_crosscheck(compared: pd.DataFrame, summary: Mapping[str, Any] | None) -> None:
    """Ours beside the tool's own figures (``compared``: ``crosscheck.compare``'s frame, empty
    when there is nothing to compare), differences over 1% marked with the known reason."""
    if not summary or compared.empty:
        return
    st.subheader("Ours vs the tool's")
    differing = int(compared["differs"].sum())
    sampled = (
        " Our figures come from the sampled requests the file keeps."
        if summary.get("per_request") == "sampled"
        else ""
    )
    st.caption(
        f"Our figures are recomputed from the file's per-request data with ServeScope's "
        f"definitions; the tool's are as it reported them. {differing} of {len(compared)} "
        f"differ by more than 1%.{sampled}"
    )
    st.dataframe(crosscheck_table(compared), hide_index=True, key="crosscheck_table")
