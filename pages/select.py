"""Select: which framework to run — a weighted evaluation checklist, must-have filters, the
ranking's sensitivity to its weights, and evidence measured on your own endpoints."""

from __future__ import annotations

import streamlit as st

from errors import ServeScopeError
from services.views.select import PERTURBATION_SPREAD
from ui import display, production_mix
from ui import select_charts as charts
from ui import select_panels as panels
from ui.cache import select as cache_select
from ui.errors import show_error

st.title("Select a framework")
st.caption(
    "Each framework is scored 0–5 per criterion with a one-line evidence, its source and the "
    "date it was checked; the weights make the ranking yours. Measured criteria come from "
    "this store: SLO capacity from your runs, `servescope verify` badges, `servescope quality` "
    "retention."
)
try:
    view = cache_select.select_view(panels.current_selection())
except ServeScopeError as exc:
    show_error(exc)
    st.stop()

top_left, top_right = st.columns([1, 2])
with top_left:
    panels.pick_preset(view)
with top_right:
    panels.pick_must_have(view)
with st.expander("Weights", expanded=False, icon=":material/tune:"):
    panels.weight_sliders(view)
    panels.save_preset_form(view)

st.subheader("Ranking")
if view.problem:
    st.warning(view.problem)
elif view.ranking.leader is None:
    st.warning("No framework has every must-have capability: remove one to see a ranking.")
else:
    panels.show_leader(view)
    st.dataframe(panels.ranking_table(view), hide_index=True, key="select_ranking")
panels.show_exclusions(view)

ranked = [r.framework for r in view.ranking.rows]
checklist_criteria = [(c.name, c.display_name or c.name) for c in view.catalog.criteria]
labels = {f.name: f.display_name or f.name for f in view.catalog.frameworks}
left, right = st.columns(2)
left.plotly_chart(
    charts.contributions_bar(
        {r.framework: r.contributions for r in view.ranking.rows},
        ranked,
        checklist_criteria,
        labels,
    ),
    key="select_contributions",
)
right.plotly_chart(
    charts.criteria_radar(view.scores_used, ranked[:4], checklist_criteria, labels),
    key="select_radar",
)

st.subheader("How sure is the first place?")
if view.sensitivity:
    st.dataframe(panels.sensitivity_table(view), hide_index=True, key="select_sensitivity")
st.plotly_chart(
    charts.first_place_shares(view.shares, labels, PERTURBATION_SPREAD), key="select_shares"
)

st.subheader("Measured on your endpoints")
panels.pick_evidence(view)
if view.profile_error:
    st.warning(display.md_escape(view.profile_error))
st.dataframe(panels.evidence_table(view), hide_index=True, key="select_evidence")
if view.other_frameworks:
    others = ", ".join(
        f"{display.md_escape(k)} ({v} runs)" for k, v in view.other_frameworks.items()
    )
    st.caption(f"Runs of frameworks not in the catalogue (not ranked): {others}.")
production_mix.show_for_frameworks(view)

st.subheader("Scores and their evidence")
panels.show_scores(view)
with st.expander("Edit a score", icon=":material/edit:"):
    panels.edit_score_form(view)
if not view.history.empty:
    st.subheader("Your edits")
    st.dataframe(panels.history_table(view), hide_index=True, key="select_history")
