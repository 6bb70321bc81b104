"""Plan: GPUs needed at peak per option, their cost, and the memory of each precision and TP."""

from __future__ import annotations

import streamlit as st

from errors import ServeScopeError
from services.views.report import ReportRequest
from ui import plan_charts as charts
from ui import plan_panels as panels
from ui import report
from ui.cache import plan as cache_plan
from ui.errors import show_error

st.title("Plan")
st.caption(
    "How many GPUs a load needs at its peak, and what they cost: per GPU, tensor-parallel size, "
    "precision and configuration, the SLO capacity of one replica — measured where the store "
    "has it, else the performance model's — with headroom above the peak."
)
try:
    view = cache_plan.plan_view(panels.current_selection())
except ServeScopeError as exc:
    show_error(exc)
    st.stop()

panels.inputs_form(view)
if view.problem is not None:
    panels.show_problem(view)
    st.stop()

panels.show_data_state(view)
panels.show_headline(view)

st.subheader("Options")
panels.show_options(view)
left, right = st.columns(2)
left.plotly_chart(charts.gpus_chart(view), key="plan_gpus_chart")
right.plotly_chart(charts.cost_chart(view), key="plan_cost_chart")

st.subheader("GPUs needed: tensor parallelism × precision")
panels.show_side_by_side(view)

st.subheader("Memory by precision and tensor parallelism")
panels.show_memory(view)
st.plotly_chart(charts.memory_chart(view.memory), key="plan_memory_chart")

st.subheader("GPU prices")
panels.price_editor(view)

st.subheader("Save this plan")
panels.save_plan_form(view.spec)
panels.show_saved(view)

# the planning-review report of this plan (and the runs it measured), built only when clicked
report.download_button(ReportRequest(plan_spec_json=view.spec.to_json()), key="plan_report")
