"""The Compare page's cached view model (``services.views.compare``; see ``ui.cache``), and the
SLO profile editor's save."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.commands import slo_profiles
from services.store_session import short_lived_store
from services.views import compare
from ui.cache import cached_view, clear, store_url


def compare_view(selection: compare.CompareSelection) -> compare.CompareView:
    """The Compare page for ``selection`` (``services.views.compare.compare_view``)."""
    return cached_view(compare.compare_view, selection)


def save_slo_profile(values: Mapping[str, Any]) -> str:
    """Validate the editor's ``values`` and store them as the user's own SLO profile (a
    ConfigError names a bad field); returns its name. Every cached view is forgotten: the
    profile list is part of more than one page's view (Compare's choices, Memory's cap)."""
    with short_lived_store(store_url()) as store:
        name = slo_profiles.save_slo_profile(store, values)
    clear()
    return name
