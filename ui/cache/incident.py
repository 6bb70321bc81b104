"""The incident page's view model and its form's choices, cached (``services.views.incident``;
see ``ui.cache``). A window in the past does not change, so caching it is safe; the form's
default ("the last 15 minutes") is as fresh as the cache's TTL or the sidebar's refresh."""

from __future__ import annotations

from services.views import incident
from ui.cache import cached_view


def incident_view(request: incident.IncidentRequest) -> incident.IncidentView:
    """``services.views.incident.incident_view`` of the dashboard's store."""
    return cached_view(incident.incident_view, request)


def incident_choices(request: incident.IncidentRequest | None) -> incident.IncidentChoices:
    """The form's targets and default window (``request``'s when given)."""
    return cached_view(incident.incident_choices, request)
