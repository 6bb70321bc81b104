"""The Home page's view model, cached (``services.views.home``; see ``ui.cache``)."""

from __future__ import annotations

import streamlit as st

from services.store_session import short_lived_store
from services.views import home
from ui.cache import TTL_S, store_url


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _home_view(url: str, selection: home.HomeSelection) -> home.HomeView:
    with short_lived_store(url) as store:
        return home.home_view(store, selection)


def home_view(selection: home.HomeSelection) -> home.HomeView:
    """Home for ``selection``: the store's overview, the latest runs, the selected run."""
    return _home_view(store_url(), selection)
