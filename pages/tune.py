"""Tune: a parameter sweep's points, the configuration to run under the SLO, and why."""

from __future__ import annotations

import streamlit as st

from analysis.compare import load_axis_title
from errors import ServeScopeError
from services.views.report import ReportRequest
from ui import report
from ui import tune_charts as charts
from ui import tune_panels as panels
from ui.cache import tune as cache_tune
from ui.errors import show_error

st.title("Tune")
st.caption(
    "A sweep runs the engine once per configuration and searches each one's SLO capacity: "
    "the highest load at which the profile's percentile limits all hold. The recommendation is "
    "the configuration with the highest capacity that stays within the memory guard-rails."
)
try:
    view = cache_tune.tune_view(panels.current_selection())
except ServeScopeError as exc:
    show_error(exc)
    st.stop()
if view.sweeps.empty or view.recommendation is None:
    panels.show_no_sweeps()
    st.stop()
rec = view.recommendation

panels.pick_sweep(view)
panels.show_recommendation(rec)
panels.show_warnings(rec)
# the sweep's report (its runs, the recommendation), built only when the button is clicked
report.download_button(ReportRequest(sweep_id=view.selection.sweep), key="tune_report")

st.subheader("Points")
st.dataframe(panels.points_table(view), hide_index=True, key="tune_points")
panels.show_failed_points(view)

st.subheader("Effect of each parameter")
panels.pick_parameter(view)
st.plotly_chart(charts.effect_chart(view.effect, view.capacity_unit), key="tune_effect")

best = rec.best.point_id if rec.best is not None else None
left, right = st.columns(2)
left.plotly_chart(charts.pareto_chart(rec.points, best, view.per_gpu_known), key="tune_pareto")
kinds = [str(k) for k in view.points.get("capacity_kind", []) if k]
right.plotly_chart(charts.search_curves(view.curves, load_axis_title(kinds)), key="tune_curves")
