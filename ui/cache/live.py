"""The Live page's view model, built fresh on every refresh of its panels: live samples are
never cached (a copy would be stale by design); each build opens a short-lived store, so the
watcher keeps the DuckDB file between refreshes."""

from __future__ import annotations

from services.store_session import short_lived_store
from services.views import live
from ui.cache import store_url


def live_view(selection: live.LiveSelection) -> live.LiveView:
    """``services.views.live.live_view`` of the dashboard's store, now."""
    with short_lived_store(store_url()) as store:
        return live.live_view(store, selection)
