"""The Tune page's cached view model (``services.views.tune``; see ``ui.cache``)."""

from __future__ import annotations

from services.views import tune
from ui.cache import cached_view


def tune_view(selection: tune.TuneSelection) -> tune.TuneView:
    """The Tune page for ``selection`` (``services.views.tune.tune_view``)."""
    return cached_view(tune.tune_view, selection)
