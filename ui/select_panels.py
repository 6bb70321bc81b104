"""The Select page's widgets and tables: the preset, the weights, the must-haves and the
evidence pickers (all synced with the URL), the ranking, the weight ranges, the measured
evidence, the scores with their evidence, and the forms that edit a score or save a preset.

Everything shown comes from the view model (``services.views.select.SelectView``); writes go
through ``ui.cache.select`` (validated in ``services.commands.checklist``).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from typing import Any

import pandas as pd
import streamlit as st

from errors import ServeScopeError
from services.views.select import (
    GPU_PARAM,
    MODEL_PARAM,
    MUST_PARAM,
    PERTURBATION_SPREAD,
    PRESET_PARAM,
    SLO_PARAM,
    WEIGHTS_PARAM,
    Evidence,
    SelectSelection,
    SelectView,
    format_weights,
    parse_weights,
    split_tags,
)
from ui import display, state
from ui.cache import select as cache_select
from ui.errors import show_error

PRESET_KEY = "select_preset"
MUST_KEY = "select_must"
MODEL_KEY = "select_model"
GPU_KEY = "select_gpu"
SLO_KEY = "select_slo"
WEIGHT_PREFIX = "select_w_"
_WEIGHTS_TOUCHED = "select_weights_touched"


def _weight_key(criterion: str) -> str:
    return WEIGHT_PREFIX + criterion


def _slider_weights() -> dict[str, float] | None:
    """The weights the sliders hold, once the user moved one this session; else None."""
    if not st.session_state.get(_WEIGHTS_TOUCHED):
        return None
    return {
        k.removeprefix(WEIGHT_PREFIX): float(v)
        for k, v in st.session_state.items()
        if isinstance(k, str) and k.startswith(WEIGHT_PREFIX)
    }


def current_selection() -> SelectSelection:
    """The selection at the top of the script: what the widgets hold (their callbacks ran
    before this rerun), else the URL's; the view model resolves the rest."""
    sliders = _slider_weights()
    must: Any = st.session_state.get(MUST_KEY)
    return SelectSelection(
        preset=state.widget_or_url(PRESET_KEY, PRESET_PARAM),
        weights=(
            tuple(sorted(sliders.items()))
            if sliders is not None
            else parse_weights(state.url_value(WEIGHTS_PARAM))
        ),
        must_have=(
            tuple(sorted(str(t) for t in must))
            if must is not None
            else split_tags(st.query_params.get(MUST_PARAM))
        ),
        model=state.widget_or_url(MODEL_KEY, MODEL_PARAM),
        gpu=state.widget_or_url(GPU_KEY, GPU_PARAM),
        slo=state.widget_or_url(SLO_KEY, SLO_PARAM),
    )


# --- pickers -----------------------------------------------------------------------------------


def _preset_changed() -> None:
    """A new preset brings its own weights and must-haves: forget the sliders' and the URL's."""
    state.set_url_value(PRESET_PARAM, st.session_state.get(PRESET_KEY))
    for key in [k for k in st.session_state if isinstance(k, str) and k.startswith(WEIGHT_PREFIX)]:
        del st.session_state[key]
    st.session_state.pop(_WEIGHTS_TOUCHED, None)
    st.session_state.pop(MUST_KEY, None)
    state.set_url_value(WEIGHTS_PARAM, None)
    state.set_url_value(MUST_PARAM, None)


def pick_preset(view: SelectView) -> None:
    """The weight preset (seeded and the user's), synced with ``?preset=``."""
    names = [str(p["name"]) for p in view.presets]
    descriptions = {str(p["name"]): str(p.get("description") or "") for p in view.presets}
    origins = {str(p["name"]): str(p.get("origin") or "") for p in view.presets}
    state.show_resolved(PRESET_KEY, PRESET_PARAM, view.selection.preset)
    st.selectbox(
        "Weight preset",
        names,
        key=PRESET_KEY,
        format_func=lambda n: f"{n} (yours)" if origins.get(n) == "user" else n,
        on_change=_preset_changed,
        help="A starting point; move the weights below to make it your own.",
    )
    chosen = view.selection.preset
    if chosen and descriptions.get(chosen):
        st.caption(display.md_escape(descriptions[chosen]))


def pick_must_have(view: SelectView) -> None:
    """Must-have capabilities (hard filters), synced with ``?must=``."""
    state.show_resolved(MUST_KEY, MUST_PARAM, list(view.must_have))
    st.multiselect(
        "Must have",
        sorted(view.tag_labels, key=lambda t: view.tag_labels[t].lower()),
        key=MUST_KEY,
        format_func=lambda t: view.tag_labels.get(t, t),
        on_change=state.sync_to_url(MUST_KEY, MUST_PARAM),
        help="A framework lacking any of these is left out of the ranking.",
    )


def pick_evidence(view: SelectView) -> None:
    """Model, GPU and SLO profile of the measured evidence, synced with the URL."""
    left, middle, right = st.columns(3)
    for column, key, param, label, options, value in (
        (left, MODEL_KEY, MODEL_PARAM, "Model", view.models, view.selection.model),
        (middle, GPU_KEY, GPU_PARAM, "GPU", view.gpus, view.selection.gpu),
        (right, SLO_KEY, SLO_PARAM, "SLO profile", view.profile_names, view.selection.slo),
    ):
        with column:
            if not options or value is None:
                st.selectbox(label, ["none measured"], disabled=True, key=f"{key}_none")
                continue
            state.show_resolved(key, param, value)
            st.selectbox(label, list(options), key=key, on_change=state.sync_to_url(key, param))


def _weights_changed() -> None:
    st.session_state[_WEIGHTS_TOUCHED] = True
    weights = _slider_weights() or {}
    state.set_url_value(WEIGHTS_PARAM, format_weights(weights))


def weight_sliders(view: SelectView) -> None:
    """One slider per criterion (0–5), grouped as the checklist groups them; moving one makes
    the weights the user's (``?w=``)."""
    checklist = [c for c in view.catalog.criteria if c.kind != "measured"]
    measured = [c for c in view.catalog.criteria if c.kind == "measured"]
    for title, group in (
        ("Checklist criteria", checklist),
        ("Measured on your endpoints", measured),
    ):
        st.markdown(f"**{title}**")
        columns = st.columns(3)
        for i, criterion in enumerate(group):
            key = _weight_key(criterion.name)
            value = float(view.weights.get(criterion.name, 0.0))
            if st.session_state.get(key) != value:
                st.session_state[key] = value
            with columns[i % 3]:
                st.slider(
                    criterion.display_name or criterion.name,
                    min_value=0.0,
                    max_value=5.0,
                    step=0.5,
                    key=key,
                    on_change=_weights_changed,
                    help=display.md_escape(criterion.description) or None,
                )


# --- tables ------------------------------------------------------------------------------------


def ranking_table(view: SelectView) -> pd.DataFrame:
    """Rank, framework, weighted total, perturbation share, missing scores."""
    rows = []
    for row in view.ranking.rows:
        labels = [view.catalog.criterion(c).display_name or c for c in row.missing]
        share = view.shares.get(row.framework, 0.0)
        rows.append(
            {
                "Rank": row.rank,
                "Framework": view.framework_label(row.framework),
                "Score (0–5)": round(row.total, 2),
                f"First under ±{PERTURBATION_SPREAD:.0%}": f"{100 * share:.0f} %",
                "Measured": "yes" if view.evidence[row.framework].measured else "no measurements",
                "Counted 0 (no score)": ", ".join(labels) or "",
            }
        )
    return pd.DataFrame(rows)


def show_leader(view: SelectView) -> None:
    """The top choice in words (ties named), and the order of the rest."""
    rows = view.ranking.rows
    if not rows:
        return
    tied = view.ranking.tied_for_first
    first = " and ".join(f"**{display.md_escape(view.framework_label(f))}**" for f in tied)
    verb = "tie for first" if len(tied) > 1 else "ranks first"
    st.markdown(f"{first} {verb} with {rows[0].total:.2f} / 5.")
    order = " · ".join(
        f"{r.rank}. {display.md_escape(view.framework_label(r.framework))} {r.total:.2f}"
        for r in rows
    )
    st.caption(f"Ranking: {order}")


def show_exclusions(view: SelectView) -> None:
    """Which frameworks the must-haves left out, and what each lacks."""
    if not view.ranking.excluded:
        return
    lines = [
        f"- **{display.md_escape(view.framework_label(ex.framework))}** lacks "
        + ", ".join(display.md_escape(view.tag_labels.get(t, t)) for t in ex.lacking)
        for ex in view.ranking.excluded
    ]
    st.markdown("Left out by the must-haves:\n" + "\n".join(lines))


def sensitivity_table(view: SelectView) -> pd.DataFrame:
    """Per weight: its value, the range in which the leader stays first, who takes over."""
    rows = []
    for wr in view.sensitivity:
        criterion = view.catalog.criterion(wr.criterion)
        rows.append(
            {
                "Criterion": criterion.display_name or wr.criterion,
                "Weight": wr.weight,
                "Leader stays first from": f"{wr.lower:.3g}",
                "to": "no limit" if wr.upper is None else f"{wr.upper:.3g}",
                "Below, first is": view.framework_label(wr.below) if wr.below else "",
                "Above, first is": view.framework_label(wr.above) if wr.above else "",
            }
        )
    return pd.DataFrame(rows)


def _fmt(value: Any, digits: int = 2, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return display.fmt_number(value, digits, unit)


def _date(ts: Any) -> str:
    try:
        return dt.datetime.fromtimestamp(float(ts), dt.UTC).strftime("%Y-%m-%d")
    except (TypeError, ValueError, OverflowError):
        return ""


def _verification(v: Mapping[str, Any] | None) -> str:
    if not v:
        return "not verified"
    passed, failed = int(v.get("passed") or 0), int(v.get("failed") or 0)
    badge = "✅" if failed == 0 else "❌"
    version = f" {v['framework_version']}" if v.get("framework_version") else ""
    failing = f" — failed: {v['failed_checks']}" if failed and v.get("failed_checks") else ""
    return f"{badge} {passed}/{passed + failed}{version} ({_date(v.get('started_at'))}){failing}"


def _quality(q: Mapping[str, Any] | None) -> str:
    if not q:
        return "not measured"
    retention: Any = q.get("retention")
    if not _present(retention):
        return "retention unknown (reference scored 0)"
    lo: Any = q.get("retention_lo")
    hi: Any = q.get("retention_hi")
    ci = f" [{_fmt(100 * lo, 0)}–{_fmt(100 * hi, 0)} %]" if _present(lo) and _present(hi) else ""
    precisions = f"{q.get('candidate_precision') or '?'} vs {q.get('reference_precision') or '?'}"
    return f"{_fmt(100 * float(retention), 0)} %{ci}, {precisions}"


def _present(value: Any) -> bool:
    return value is not None and not pd.isna(value)


def _health(h: Mapping[str, Any] | None) -> str:
    if not h:
        return "not fetched"
    parts = [f"{_fmt(h.get('releases_12m'), 0)} releases/12 mo"]
    if _present(h.get("median_days_between_releases")):
        parts.append(f"every {_fmt(h.get('median_days_between_releases'), 0)} d")
    if _present(h.get("median_first_response_h")):
        parts.append(f"first reply {_fmt(h.get('median_first_response_h'), 1)} h")
    parts.append(f"fetched {_date(h.get('fetched_at'))}")
    return ", ".join(parts)


def _capacity(ev: Evidence) -> str:
    if ev.capacity is None:
        return "no run meets the SLO" if ev.runs else "no measurements"
    unit = {"rate": "req/s", "concurrency": "concurrent"}.get(ev.capacity_kind, "")
    return f"{ev.capacity:.3g} {unit} ({ev.capacity_series})".strip()


def evidence_table(view: SelectView) -> pd.DataFrame:
    """Per framework (ranking order, then the excluded): what the store measured."""
    order = [r.framework for r in view.ranking.rows] + [e.framework for e in view.ranking.excluded]
    rows = []
    for name in order:
        ev = view.evidence[name]
        rows.append(
            {
                "Framework": view.framework_label(name),
                "Runs": ev.runs,
                "Best SLO capacity": _capacity(ev),
                "Best goodput (req/s)": _fmt(ev.goodput, 2) if ev.runs else "no measurements",
                "Verification": _verification(ev.verification),
                "Quality retention": _quality(ev.quality),
                "Project health": _health(ev.health),
            }
        )
    return pd.DataFrame(rows)


def scores_table(view: SelectView, framework: str) -> pd.DataFrame:
    """One framework's checklist scores with their evidence, source, date and origin."""
    df = view.scores[view.scores["framework"] == framework]
    return pd.DataFrame(
        {
            "Criterion": [view.catalog.criterion(c).display_name or c for c in df["criterion"]],
            "Score": df["score"].to_numpy(),
            "Evidence": df["evidence"].to_numpy(),
            "Source": df["source_url"].to_numpy(),
            "Checked": df["checked_on"].to_numpy(),
            "Capabilities": [
                ", ".join(view.tag_labels.get(t, t) for t in tags) for tags in df["tags"]
            ],
            "Edited": [
                f"by {by} on {_date(at)}" if origin == "user" else "seed"
                for origin, by, at in zip(
                    df["origin"], df["updated_by"], df["updated_at"], strict=True
                )
            ],
        }
    )


def show_scores(view: SelectView) -> None:
    """The scores and their evidence, one tab per framework."""
    names = [f.name for f in view.catalog.frameworks]
    tabs = st.tabs([view.framework_label(n) for n in names])
    for tab, name in zip(tabs, names, strict=True):
        with tab:
            st.dataframe(
                scores_table(view, name),
                hide_index=True,
                key=f"select_scores_{name}",
                column_config={
                    "Source": st.column_config.LinkColumn("Source", display_text="source"),
                    "Score": st.column_config.NumberColumn("Score", format="%g / 5"),
                },
            )


def history_table(view: SelectView) -> pd.DataFrame:
    """The user's score edits, newest first."""
    h = view.history
    return pd.DataFrame(
        {
            "When (UTC)": [
                dt.datetime.fromtimestamp(float(t), dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
                for t in h["edited_at"]
            ],
            "By": h["edited_by"].to_numpy(),
            "Framework": [view.framework_label(str(f)) for f in h["framework"]],
            "Criterion": h["criterion"].to_numpy(),
            "Score": [
                f"{p:g} → {s:g}" if not pd.isna(p) else f"{s:g} (new)"
                for p, s in zip(h["previous_score"], h["score"], strict=True)
            ],
            "Evidence": h["evidence"].to_numpy(),
        }
    )


# --- forms -------------------------------------------------------------------------------------


def edit_score_form(view: SelectView) -> None:
    """Change one score and its evidence; kept as the user's own with when it was made."""
    checklist = [c for c in view.catalog.criteria if c.kind != "measured"]
    names = [f.name for f in view.catalog.frameworks]
    left, right = st.columns(2)
    framework = left.selectbox(
        "Framework", names, format_func=view.framework_label, key="select_edit_framework"
    )
    criterion_name = right.selectbox(
        "Criterion",
        [c.name for c in checklist],
        format_func=lambda n: view.catalog.criterion(n).display_name or n,
        key="select_edit_criterion",
    )
    if framework is None or criterion_name is None:
        return
    criterion = view.catalog.criterion(criterion_name)
    current = view.scores[
        (view.scores["framework"] == framework) & (view.scores["criterion"] == criterion_name)
    ]
    now = display.records(current)[0] if not current.empty else {}
    suffix = f"{framework}_{criterion_name}"
    with st.form(f"select_edit_form_{suffix}"):
        score = st.slider("Score", 0.0, 5.0, float(now.get("score", 0.0)), 0.5)
        evidence = st.text_input("Evidence (one line)", str(now.get("evidence", "")))
        source = st.text_input(
            "Source URL (the project's own docs)", str(now.get("source_url", ""))
        )
        checked = st.date_input(
            "Checked on",
            _parse_date(now.get("checked_on")) or dt.date.today(),
            max_value=dt.date.today(),
        )
        vocab = sorted(criterion.tags)
        tags = st.multiselect(
            "Capabilities",
            vocab,
            default=[t for t in now.get("tags", []) if t in vocab],
            format_func=lambda t: criterion.tags.get(t, t),
        )
        submitted = st.form_submit_button("Save score", icon=":material/save:")
    if submitted:
        values = {
            "framework": framework,
            "criterion": criterion_name,
            "score": score,
            "evidence": evidence,
            "source_url": source,
            "checked_on": checked.isoformat() if isinstance(checked, dt.date) else "",
            "tags": tags,
        }
        try:
            cache_select.save_score(values)
        except ServeScopeError as exc:
            show_error(exc)
            return
        st.toast(f"Saved {view.framework_label(framework)} · {criterion.display_name}.")
        st.rerun()  # the ranking, the tables and the history read the new score


def _parse_date(value: Any) -> dt.date | None:
    try:
        return dt.date.fromisoformat(str(value))
    except ValueError:
        return None


def save_preset_form(view: SelectView) -> None:
    """Keep the current weights and must-haves as a preset of the user's own."""
    with st.form("select_save_preset"):
        name = st.text_input("Preset name")
        description = st.text_input("Description")
        submitted = st.form_submit_button("Save as preset", icon=":material/bookmark_add:")
    if not submitted:
        return
    values = {
        "name": name.strip(),
        "description": description.strip(),
        "weights": dict(view.weights),
        "must_have": list(view.must_have),
    }
    try:
        saved = cache_select.save_preset(values)
    except ServeScopeError as exc:
        show_error(exc)
        return
    st.toast(f"Saved preset {saved}.")
    st.session_state[PRESET_KEY] = saved
    state.set_url_value(PRESET_PARAM, saved)
    st.rerun()
