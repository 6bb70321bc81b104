"""Shared selections: read with defaults, kept in ``st.query_params`` so they can be shared.

Pages never depend on widgets created in app.py (DESIGN §8): every selection is read here,
with a default, from the URL or the page's own widget.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import streamlit as st

from ui import display

RUN_PARAM = "run"  # ?run=<run_id>
RUN_WIDGET_KEY = "run_select"


# --- any URL-synced widget (the one place that writes st.query_params for a widget) ----------


def url_value(param: str) -> str | None:
    """``?param=`` from the URL; None when absent or empty."""
    value = st.query_params.get(param)
    return value or None


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def sync_to_url(
    key: str, param: str, to_text: Callable[[Any], str] = _as_text
) -> Callable[[], None]:
    """An ``on_change`` callback: the widget ``key``'s value, as ``to_text`` writes it, becomes
    ``?param=``; an empty text removes the parameter."""

    def _changed() -> None:
        value = st.session_state.get(key)
        set_url_value(param, to_text(value) if value is not None else "")

    return _changed


def init_widget(key: str, value: Any) -> None:
    """Give the widget ``key`` its first value (from the URL or a default) once per session:
    Streamlit then keeps what the user chose."""
    if key not in st.session_state:
        st.session_state[key] = value


def set_url_value(param: str, text: str | None) -> None:
    """``?param=text``; None or an empty text removes the parameter."""
    if text:
        if st.query_params.get(param) != text:
            st.query_params[param] = text
    elif param in st.query_params:
        del st.query_params[param]


def show_resolved(
    key: str, param: str, value: Any, to_text: Callable[[Any], str] = _as_text
) -> None:
    """Before the widget ``key`` is drawn: make it, and ``?param=``, hold ``value`` — the
    selection as the page's view model resolved it (e.g. a default, or an unknown name
    replaced)."""
    if st.session_state.get(key) != value:
        st.session_state[key] = value
    set_url_value(param, to_text(value) if value is not None else "")


def widget_or_url(key: str, param: str, to_text: Callable[[Any], str] = _as_text) -> str | None:
    """What the widget ``key`` holds, as ``to_text`` writes it to the URL, else ``?param=``:
    a page's selection read before its widgets are drawn (their ``on_change`` callbacks ran
    before the rerun). None when neither says anything."""
    if key in st.session_state and st.session_state[key] is not None:
        return to_text(st.session_state[key]) or None
    return url_value(param)


def window_value(param: str = "window") -> str | None:
    """The window a :func:`window_slider` holds, for a selection read before it is drawn: its
    ``?param=`` text, which the slider's ``on_change`` writes knowing the run's span (the whole
    span as nothing), so a window over the whole run and none are one selection."""
    return url_value(param)


def window_slider(
    key: str, span_s: float, value: tuple[float, float], *, label: str, param: str = "window"
) -> tuple[float, float]:
    """A slider over [0, ``span_s``] seconds from a run's start, first set to ``value``, synced
    with ``?window=a-b`` (absent: the whole span); the chosen (start, end)."""
    init_widget(key, value)
    chosen: Any = st.slider(
        label,
        min_value=0.0,
        max_value=float(span_s),
        step=max(1.0, float(round(span_s / 200))),
        key=key,
        on_change=sync_to_url(
            key, param, lambda v: "" if tuple(v) == (0.0, span_s) else f"{v[0]:g}-{v[1]:g}"
        ),
    )
    start, end = (float(v) for v in chosen)
    return start, end


# --- the selected run (?run=) ------------------------------------------------------------------


def requested_run() -> str | None:
    """The run id in the URL (``?run=``), if any."""
    return url_value(RUN_PARAM)


def selected_run() -> str | None:
    """The run the picker holds (it is shared by the one-run pages), else the URL's."""
    chosen = st.session_state.get(RUN_WIDGET_KEY)
    return str(chosen) if chosen else requested_run()


def set_run(run_id: str | None) -> None:
    """Select ``run_id`` (None clears it): the URL and the run picker follow."""
    set_url_value(RUN_PARAM, run_id)
    st.session_state[RUN_WIDGET_KEY] = run_id


def default_run(options: Sequence[str]) -> str | None:
    """The URL's run when it is one of ``options``, else the first option (the newest run)."""
    wanted = requested_run()
    if wanted in options:
        return wanted
    return options[0] if options else None


def _picker_changed() -> None:
    set_run(st.session_state.get(RUN_WIDGET_KEY))


def run_picker(choices: Mapping[str, str], *, label: str = "Run") -> str | None:
    """A select box over ``choices`` (run id → label), synced with ``?run=``; the chosen id."""
    options = list(choices)
    if not options:
        return None
    current = st.session_state.get(RUN_WIDGET_KEY)
    if current not in options:
        current = default_run(options)
        st.session_state[RUN_WIDGET_KEY] = current
    if current:
        set_url_value(RUN_PARAM, current)
    chosen: str | None = st.selectbox(
        label,
        options,
        format_func=lambda run_id: choices.get(run_id, run_id),
        key=RUN_WIDGET_KEY,
        on_change=_picker_changed,
    )
    return chosen


def resolved_run_picker(run_id: str, choices: Mapping[str, str], *, label: str = "Run") -> None:
    """The run picker showing ``run_id``, the run a page's view model was built for (the one
    asked for when it exists, else the newest): the picker and ``?run=`` follow it."""
    if st.session_state.get(RUN_WIDGET_KEY) != run_id:
        set_run(run_id)
    run_picker(choices, label=label)


def show_no_runs() -> None:
    """A one-run page on an empty store: nothing to pick, and the commands that fill it."""
    st.info("The store holds no runs yet. Fill it with one of these commands:")
    st.code("\n".join(display.EMPTY_STORE_COMMANDS), language="bash")
    st.caption(
        "`servescope demo` measures three simulated engines at concurrency 1, 8 and 32 and "
        "records their /metrics, so every part of this page has data."
    )


def table_select_callback(table_key: str, run_ids: Sequence[str]) -> Callable[[], None]:
    """``on_select`` callback for a runs table: the selected row becomes the selected run."""
    ids = list(run_ids)

    def _selected() -> None:
        event = st.session_state.get(table_key)
        rows = list(event.selection.rows) if event is not None else []
        if rows and 0 <= rows[0] < len(ids):
            set_run(ids[rows[0]])

    return _selected
