"""Cached view models for the pages: the only place with ``st.cache_data`` (DESIGN §8).

:func:`cached_view` is the one mechanism: a page's view-model builder (``services.views``) run
on a short-lived store (``services.store_session``), cached by the store URL, the builder and
the frozen selection. No connection is ever cached (DuckDB lets one process hold the file; a
cached connection would lock out every collector). Each page's module (``ui.cache.home``,
``data``, ``compare``, ``latency``, ``memory``) names its builder; ``ui.cache.live`` builds
fresh on every refresh.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import streamlit as st

import settings
from services import store_session

TTL_S = settings.cache_ttl_s()


def store_url() -> str:
    """The store URL the dashboard reads (SERVESCOPE_DB)."""
    return store_session.store_url()


def masked_store_url() -> str:
    """The store URL with any password masked, safe to display."""
    return store_session.masked_store_url()


def clear() -> None:
    """Forget every cached result (the sidebar's refresh button, and after every write)."""
    st.cache_data.clear()


S = TypeVar("S", bound=Hashable)
V = TypeVar("V")

#: Session key: {(store URL, builder, selection as resolved): the selection asked for then}.
_ASKED_FOR = "ui_cache_asked_for"


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _built(url: str, name: str, selection: Any, _builder: Callable[[Any, Any], Any]) -> Any:
    # ``_builder`` is not hashed (Streamlit skips parameters named with "_"): ``name`` keys it
    with store_session.short_lived_store(url) as store:
        return _builder(store, selection)


def cached_view(builder: Callable[[Any, S], V], selection: S) -> V:
    """``builder(store, selection)`` on the dashboard's store, cached.

    A view that resolves its selection (``view.selection``: the run it chose, a window over
    the whole run as none, …) is remembered under that too: the rerun that follows a first view
    — its widgets now holding the resolved values — is served from the same entry instead of
    building the same view again."""
    url = store_url()
    name = f"{builder.__module__}.{builder.__qualname__}"
    asked_for: dict[tuple[str, str, Any], Any] = st.session_state.setdefault(_ASKED_FOR, {})
    asked = asked_for.get((url, name, selection), selection)
    view: V = _built(url, name, asked, builder)
    resolved = getattr(view, "selection", asked)
    if asked != selection and resolved != selection:  # that resolution no longer holds
        asked, view = selection, _built(url, name, selection, builder)
        resolved = getattr(view, "selection", selection)
    asked_for[(url, name, resolved)] = asked
    return view
