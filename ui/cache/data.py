"""The Data page's view model, cached (``services.views.data``; see ``ui.cache``). The page's
writes clear every cache (``ui.data_view``), so the next view reads them."""

from __future__ import annotations

import streamlit as st

from services.store_session import short_lived_store
from services.views import data
from ui.cache import TTL_S, store_url


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _data_view(url: str, selection: data.DataSelection) -> data.DataView:
    with short_lived_store(url) as store:
        return data.data_view(store, selection)


def data_view(selection: data.DataSelection) -> data.DataView:
    """The Data page for ``selection``: the filters' choices and the runs they select."""
    return _data_view(store_url(), selection)
