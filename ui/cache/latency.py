"""The Latency page's view model, cached (``services.views.latency``; see ``ui.cache``)."""

from __future__ import annotations

from services.views import latency
from ui.cache import cached_view


def latency_view(selection: latency.LatencySelection) -> latency.LatencyView:
    """``services.views.latency.latency_view`` of the dashboard's store."""
    return cached_view(latency.latency_view, selection)
