"""The Plan page's widgets and tables: the inputs form (synced with the URL: the URL is the
plan), the headline, the options table, the memory table, the price editor, "Save plan" and
the states without data.

Everything shown comes from the view model (``services.views.plan.PlanView``); every text that
comes from the store or the URL is escaped before it reaches Markdown (``ui.display.md_escape``).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from analysis import plan as planner
from errors import ServeScopeError
from services.views import plan as plan_views
from services.views.plan import PARAMS, PlanSelection, PlanSpec, PlanView
from ui import display, state
from ui.cache import plan as cache_plan
from ui.errors import show_error

MEASURE_COMMAND = "servescope sweep examples/sim-sweep.toml"
PRICE_COMMAND = "servescope plan price H100-SXM-80GB 2.49"
#: Widget keys of the inputs form, by URL parameter.
KEYS = {param: f"plan_{param}" for param in PARAMS}


def current_selection() -> PlanSelection:
    """The plan the URL names (a bad value: the defaults and the problem)."""
    return PlanSelection.from_params({p: state.url_value(p) for p in PARAMS})


# --- the inputs form -----------------------------------------------------------------------------


def _set(key: str, value: Any) -> None:
    if st.session_state.get(key) != value:
        st.session_state[key] = value


def _form_values(view: PlanView) -> None:
    """Make the form's widgets hold the view's spec (the URL's, or the defaults)."""
    spec = view.spec
    _set(KEYS["model"], spec.model if spec.model in view.models else None)
    _set(KEYS["peak"], float(spec.peak_qps))
    _set(KEYS["avg"], float(spec.avg_qps))
    _set(KEYS["in"], float(spec.input_tokens))
    _set(KEYS["out"], float(spec.output_tokens))
    _set(KEYS["lengths"], spec.lengths)
    _set(KEYS["slo"], spec.slo if spec.slo in view.profiles else None)
    _set(KEYS["gpus"], [g for g in spec.gpus if g in view.gpu_names])
    _set(KEYS["tp"], [t for t in spec.tps if t in planner.TP_CHOICES])
    _set(KEYS["precision"], list(spec.precisions))
    _set(KEYS["headroom"], float(spec.headroom))
    _set(KEYS["kvfrac"], float(spec.kv_memory_fraction))
    _set(KEYS["batch"], int(spec.max_batch_size))
    _set(KEYS["kvdtype"], spec.kv_dtype)


def _submit() -> None:
    """The form's values become the URL's parameters (the next run plans them)."""
    for param, key in KEYS.items():
        value = st.session_state.get(key)
        if isinstance(value, list):
            text = ",".join(str(v) for v in value)
        elif isinstance(value, float):
            text = f"{value:g}"
        else:
            text = "" if value is None else str(value)
        state.set_url_value(param, text)


def inputs_form(view: PlanView) -> None:
    """Model, load, lengths, SLO, the options to compare and the engine's memory settings."""
    _form_values(view)
    with st.form("plan_inputs"):
        a, b, c, d = st.columns(4)
        a.selectbox("Model", list(view.models), key=KEYS["model"])
        b.number_input("Peak QPS", min_value=0.0, step=1.0, key=KEYS["peak"])
        c.number_input("Average QPS", min_value=0.0, step=1.0, key=KEYS["avg"])
        d.number_input(
            "Headroom above peak",
            min_value=0.0,
            step=0.05,
            key=KEYS["headroom"],
            help="0.2 keeps 20 % above the peak",
        )
        a, b, c, d = st.columns(4)
        a.number_input("Mean input tokens", min_value=1.0, step=100.0, key=KEYS["in"])
        b.number_input("Mean output tokens", min_value=1.0, step=50.0, key=KEYS["out"])
        c.text_input(
            "Lengths from",
            key=KEYS["lengths"],
            help="typed (the two means), run:<run id> (a stored run's means) or "
            "metrics:<target> (a watch target's token counters)",
        )
        d.selectbox("SLO profile", list(view.profiles), key=KEYS["slo"])
        a, b, c = st.columns([2, 1, 1])
        a.multiselect(
            "GPUs (none: all)",
            list(view.gpu_names),
            key=KEYS["gpus"],
        )
        b.multiselect("Tensor parallel", list(planner.TP_CHOICES), key=KEYS["tp"])
        c.multiselect(
            "Precision",
            list(planner.PLAN_PRECISIONS),
            key=KEYS["precision"],
            format_func=lambda p: planner.PRECISION_LABELS.get(p, p),
        )
        a, b, c = st.columns(3)
        a.number_input(
            "kv_memory_fraction", min_value=0.05, max_value=1.0, step=0.05, key=KEYS["kvfrac"]
        )
        b.number_input("max_batch_size", min_value=1, step=16, key=KEYS["batch"])
        c.selectbox("KV-cache dtype", list(planner.KV_DTYPES), key=KEYS["kvdtype"])
        st.form_submit_button("Plan", icon=":material/calculate:", on_click=_submit)


# --- results -------------------------------------------------------------------------------------


def show_problem(view: PlanView) -> None:
    """A bad input: what was wrong and what is accepted."""
    st.error(f"**Cannot plan**: {display.md_escape(view.problem)}", icon=":material/error:")


def show_data_state(view: PlanView) -> None:
    """Say where the capacities come from, and which command fills the store when none is
    measured or no price is set."""
    if not view.measurements:
        st.info(
            f"The store holds no measured SLO capacity of {view.spec.model} on these GPUs: "
            "every capacity below is the performance model's (labelled *model*). A sweep of "
            "the simulated engine stores measured ones (Llama-3.1-8B on an H100):"
        )
        st.code(MEASURE_COMMAND, language="bash")
    if not view.prices:
        st.caption(f"No GPU prices stored: set them below or with `{PRICE_COMMAND}` to see costs.")
    for text in view.skipped:
        st.caption(display.md_escape(f"Measured but not usable: {text}"))


def show_headline(view: PlanView) -> None:
    if view.best is None:
        st.warning(display.md_escape(plan_views.headline(view)))
    else:
        st.success(f"**{display.md_escape(plan_views.headline(view))}**")
    lengths, demand = view.lengths, view.demand
    if lengths is not None and demand is not None:
        st.caption(
            display.md_escape(
                f"Sized for {demand.sized_qps:.3g} req/s (peak {demand.peak_qps:g} × "
                f"(1 + {demand.headroom:g})); costs per 1M tokens at the average "
                f"{demand.avg_qps:g} req/s; lengths {lengths.input_mean:.0f} in / "
                f"{lengths.output_mean:.0f} out tokens ({lengths.source})."
            )
        )


def options_frame(view: PlanView) -> pd.DataFrame:
    """The options table as the page shows it (error in %)."""
    df = plan_views.options_table(view)
    if not df.empty:
        df["Error"] = pd.to_numeric(df["Error"]) * 100.0
    return df


OPTION_COLUMNS = {
    "Capacity / replica (req/s)": st.column_config.NumberColumn(format="%.3g"),
    "$/GPU-hour": st.column_config.NumberColumn(format="$%.2f"),
    "$/hour": st.column_config.NumberColumn(format="$%.2f"),
    "$/1M output tokens": st.column_config.NumberColumn(format="$%.3f"),
    "$/1M tokens (in+out)": st.column_config.NumberColumn(format="$%.3f"),
    "Predicted (req/s)": st.column_config.NumberColumn(format="%.3g"),
    "Measured (req/s)": st.column_config.NumberColumn(format="%.3g"),
    "Error": st.column_config.NumberColumn("Error (pred vs meas)", format="%+.0f%%"),
}


def show_options(view: PlanView) -> None:
    st.dataframe(
        options_frame(view), hide_index=True, key="plan_options", column_config=OPTION_COLUMNS
    )
    st.caption(
        "Capacity: requests/s one replica (TP GPUs) serves within the SLO — *measured* (the "
        "source names the runs or sweep) or the *model*'s. Replicas = ceil(peak × (1 + "
        "headroom) / capacity); GPUs = replicas × TP; $/hour = GPUs × price; $/1M tokens = "
        "$/hour ÷ (average req/s × 3,600 × tokens per request) × 10⁶, output tokens or input + "
        "output. Error: 0 when the prediction lies between the measured capacity and the first "
        "failing load, else (predicted − nearer end) / nearer end. docs/plan.md has the details."
    )


def show_side_by_side(view: PlanView) -> None:
    st.dataframe(plan_views.side_by_side(view), hide_index=True, key="plan_side_by_side")


def show_memory(view: PlanView) -> None:
    st.dataframe(plan_views.memory_table(view), hide_index=True, key="plan_memory")
    if view.lengths is not None and view.engine is not None:
        st.caption(
            display.md_escape(
                f"Per GPU of a TP group: KV budget = {view.engine.kv_memory_fraction:g} × memory "
                "− weights / TP − activations; max sequences of "
                f"{view.lengths.tokens_per_sequence} tokens (input + output) in "
                f"{view.engine.block_size}-token blocks (not capped by max_batch_size)."
            )
        )


# --- writes --------------------------------------------------------------------------------------


def price_editor(view: PlanView) -> None:
    """Set a GPU's price per GPU-hour (stored; every plan's costs follow)."""
    if view.prices:
        st.caption(
            display.md_escape(
                "Prices: "
                + ", ".join(f"{g} ${p:,.2f}/GPU-hour" for g, p in sorted(view.prices.items()))
            )
        )
    with st.form("plan_price"):
        a, b, c = st.columns([2, 1, 2])
        gpu = a.selectbox("GPU", list(view.gpu_names), key="plan_price_gpu")
        usd = b.number_input("USD per GPU-hour", min_value=0.0, step=0.1, key="plan_price_usd")
        note = c.text_input("Note (optional)", key="plan_price_note")
        submitted = st.form_submit_button("Save price", icon=":material/sell:")
    if not submitted or gpu is None:
        return
    try:
        value = cache_plan.save_price(str(gpu), float(usd), str(note or ""))
    except ServeScopeError as exc:
        show_error(exc)
        return
    st.toast(f"Saved {gpu}: ${value:,.2f} per GPU-hour.")
    st.rerun()


def save_plan_form(spec: PlanSpec) -> None:
    """Keep this plan's inputs under a name (``servescope plan show NAME`` recomputes it)."""
    with st.form("plan_save"):
        name = st.text_input("Plan name", key="plan_save_name")
        submitted = st.form_submit_button("Save plan", icon=":material/bookmark_add:")
    if not submitted:
        return
    try:
        saved = cache_plan.save_plan(str(name or ""), spec)
    except ServeScopeError as exc:
        show_error(exc)
        return
    st.toast(f"Saved plan {saved}.")
    st.rerun()


def show_saved(view: PlanView) -> None:
    if view.saved:
        st.caption(display.md_escape("Saved plans: " + ", ".join(view.saved)))
