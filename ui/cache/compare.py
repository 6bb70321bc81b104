"""The Compare page's cached view model (see ``ui.cache``: keyed by the store URL and the
page's hashable selection, a short-lived ``Store`` per build, no connection cached), and the
SLO profile editor's save."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import streamlit as st

import settings
from services.commands import slo_profiles
from services.store_session import short_lived_store, store_url
from services.views.compare import CompareSelection, CompareView
from services.views.compare import compare_view as build_compare_view

TTL_S = settings.cache_ttl_s()


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _compare_view(url: str, selection: CompareSelection) -> CompareView:
    with short_lived_store(url) as store:
        return build_compare_view(store, selection)


#: Session key: (store URL, a resolved selection) → the selection that was asked when it was
#: resolved, so the rerun that follows (the widgets now hold the resolved values) is served
#: from the same cache entry instead of building the same view again.
_ASKED_FOR = "compare_view_asked_for"


def compare_view(selection: CompareSelection) -> CompareView:
    """The Compare page for ``selection`` (``services.views.compare.compare_view``)."""
    url = store_url()
    asked_for: dict[tuple[str, CompareSelection], CompareSelection] = st.session_state.setdefault(
        _ASKED_FOR, {}
    )
    asked = asked_for.get((url, selection), selection)
    view = _compare_view(url, asked)
    if asked != selection and view.selection != selection:  # that resolution no longer holds
        asked, view = selection, _compare_view(url, selection)
    asked_for[(url, view.selection)] = asked
    return view


def save_slo_profile(values: Mapping[str, Any]) -> str:
    """Validate the editor's ``values`` and store them as the user's own SLO profile (a
    ConfigError names a bad field); returns its name. Every cached view is forgotten: the
    profile list is part of more than one page's view (Compare's choices, Memory's cap)."""
    with short_lived_store(store_url()) as store:
        name = slo_profiles.save_slo_profile(store, values)
    st.cache_data.clear()
    return name
