"""The incident page's form and panels: the window to investigate (synced with the URL, so the
page is shareable), the patterns found with the numbers that fired them, before vs during, and
the charts of ``ui.incident_charts``."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Final

import streamlit as st

from analysis.incident import BEFORE_RULE
from analysis.latency import duration_text
from errors import InputError
from services.views.incident import (
    ACCEPTED_TIME,
    FROM_PARAM,
    TARGET_PARAM,
    TO_PARAM,
    IncidentChoices,
    IncidentRequest,
    IncidentView,
    iso_utc,
    parse_time,
)
from ui import display, state
from ui import incident_charts as charts

#: Widget keys of the form, by URL parameter.
KEYS: Final = {
    TARGET_PARAM: "incident_target",
    FROM_PARAM: "incident_from",
    TO_PARAM: "incident_to",
}
ALL_TARGETS: Final = "(every target, summed)"
CHART_TITLES: Final = {
    "state": "Engine state and GPUs",
    "lengths": "Prompt length before vs during",
    "latency": "Latency per window",
}


def request_from_url() -> IncidentRequest | None:
    """The window the URL names (None: none); InputError for a bad parameter."""
    return IncidentRequest.from_params(st.query_params.to_dict())


def _utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _set(key: str, value: object) -> None:
    if st.session_state.get(key) != value:
        st.session_state[key] = value


def _as_epoch(param: str, text: str) -> str:
    """A typed time as whole epoch seconds for the URL; kept as typed when unreadable (the next
    run names the problem)."""
    try:
        value = parse_time(param, text)
    except InputError:
        return text
    return str(int(value // 1)) if param == FROM_PARAM else str(math.ceil(value))


def _submit() -> None:
    """The form's values become the URL's parameters (the next run investigates them)."""
    target = st.session_state.get(KEYS[TARGET_PARAM])
    state.set_url_value(TARGET_PARAM, None if target in (None, ALL_TARGETS) else str(target))
    for param in (FROM_PARAM, TO_PARAM):
        text = str(st.session_state.get(KEYS[param]) or "").strip()
        state.set_url_value(param, _as_epoch(param, text) if text else None)


def window_form(choices: IncidentChoices) -> None:
    """Target and range (UTC); defaults: the URL's window, else the last 15 minutes of the
    newest target."""
    if choices.empty:
        st.info("No watched engine in the store yet. Start a watcher to fill it:")
        st.code("servescope watch --metrics http://127.0.0.1:8000/metrics --gpu", language="bash")
        return
    last_seen = dict(choices.targets)
    options = [ALL_TARGETS, *last_seen]
    _set(KEYS[TARGET_PARAM], choices.target if choices.target in last_seen else ALL_TARGETS)
    _set(KEYS[FROM_PARAM], iso_utc(choices.start))
    _set(KEYS[TO_PARAM], iso_utc(choices.end))
    with st.form("incident_window"):
        a, b, c = st.columns([2, 1, 1])
        a.selectbox(
            "Target",
            options,
            key=KEYS[TARGET_PARAM],
            format_func=lambda t: (
                t if t == ALL_TARGETS else f"{t} (last sample {_utc(last_seen[t])})"
            ),
        )
        b.text_input("From (UTC)", key=KEYS[FROM_PARAM], help=ACCEPTED_TIME)
        c.text_input("To (UTC)", key=KEYS[TO_PARAM], help=ACCEPTED_TIME)
        st.form_submit_button("Investigate", on_click=_submit, type="primary")


def show_window(view: IncidentView) -> None:
    """Which window, which target, what "before" is, and the link to share."""
    req = view.request
    b0, b1 = req.before
    who = (
        display.md_escape(req.target)
        if req.target
        else f"every target, summed ({len(view.targets)})"
    )
    engine = f" ({display.md_escape(view.engine)})" if view.engine else ""
    st.markdown(
        f"**During**: {_utc(req.start)} → {_utc(req.end)} ({duration_text(req.span_s)}) of "
        f"{who}{engine}  \n**Before**: {_utc(b0)} → {_utc(b1)}: {BEFORE_RULE}."
    )
    st.caption("Link to this view (share it):")
    st.code(req.path, language=None)


def show_empty(view: IncidentView) -> None:
    st.warning(
        "No engine or GPU sample in this window or the span before it: pick a range when "
        "the target was watched (the form lists each target's last sample).",
        icon=":material/search_off:",
    )


def show_findings(view: IncidentView) -> None:
    """The patterns found, each with the numbers that fired it and what to try; or "no pattern
    found" with what could not be judged."""
    st.subheader("Troubleshooting patterns")
    if not view.findings:
        st.success("No pattern found in this window.", icon=":material/check_circle:")
    for finding in view.findings:
        with st.container(border=True, key=f"incident_finding_{finding.rule}"):
            st.markdown(f"**{finding.rule}. {display.md_escape(finding.title)}**")
            st.markdown(display.md_escape(finding.summary))
            st.dataframe(
                {"evidence": list(finding.evidence), "value": list(finding.evidence.values())},
                hide_index=True,
                key=f"incident_finding_{finding.rule}_evidence",
            )
            st.markdown("**What to try**")
            st.markdown("\n".join(f"- {display.md_escape(a)}" for a in finding.actions))
            chart = CHART_TITLES.get(finding.chart)
            if chart:
                st.caption(f"See the chart “{chart}” below.")
    if view.missing:
        st.caption(
            "Could not judge: " + "; ".join(display.md_escape(m) for m in view.missing) + "."
        )


def show_comparison(view: IncidentView) -> None:
    st.subheader("Before vs during")
    st.caption(
        "Each span's percentiles come from its histograms' bucket increases over the whole "
        "span, summed over the targets (a percentile is only known to lie inside its bucket: "
        "the note says which). Change: × during / before, or ± percentage points for shares."
    )
    st.dataframe(view.comparison, hide_index=True, key="incident_comparison")


def show_charts(view: IncidentView) -> None:
    st.subheader("Over time")
    st.plotly_chart(charts.latency_chart(view), key="incident_latency_chart")
    left, right = st.columns(2)
    left.plotly_chart(charts.ttft_split_chart(view), key="incident_split_chart")
    right.plotly_chart(charts.prompt_length_chart(view), key="incident_lengths_chart")
    st.plotly_chart(charts.state_chart(view), key="incident_state_chart")


def render(view: IncidentView) -> None:
    """Everything the page shows for a window."""
    show_window(view)
    if view.empty:
        show_empty(view)
        return
    show_findings(view)
    show_comparison(view)
    show_charts(view)
