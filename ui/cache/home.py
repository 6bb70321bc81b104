"""The Home page's view model, cached (``services.views.home``; see ``ui.cache``)."""

from __future__ import annotations

from services.views import home
from ui.cache import cached_view


def home_view(selection: home.HomeSelection) -> home.HomeView:
    """Home for ``selection``: the store's overview, the latest runs, the selected run."""
    return cached_view(home.home_view, selection)
