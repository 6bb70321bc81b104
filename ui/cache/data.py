"""The Data page's view model, cached (``services.views.data``; see ``ui.cache``). The page's
writes clear every cache (``ui.data_view``), so the next view reads them."""

from __future__ import annotations

from services.views import data
from ui.cache import cached_view


def data_view(selection: data.DataSelection) -> data.DataView:
    """The Data page for ``selection``: the filters' choices and the runs they select."""
    return cached_view(data.data_view, selection)
