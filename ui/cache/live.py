"""The Live page's view model: the live part (engine state, GPUs, staleness) is built fresh on
every refresh of its panels — never cached, a copy would be stale by design — on a short-lived
store, so the watcher keeps the DuckDB file between refreshes. The windowed part (percentiles,
rates, breaches, length mix) covers complete, settled windows only
(``services.views.live.WindowsRequest``), so it is cached by its request
(``ui.cache.cached_view``): it is computed again only when a window completes."""

from __future__ import annotations

from services.store_session import short_lived_store
from services.views import live
from ui.cache import cached_view, store_url


def live_view(selection: live.LiveSelection) -> live.LiveView:
    """``services.views.live.live_view`` of the dashboard's store, now."""
    with short_lived_store(store_url()) as store:
        view = live.live_view(store, selection, with_windows=False)
    if view.windows_request is None:
        return view
    return view.with_windows(cached_view(live.judged_windows, view.windows_request))
