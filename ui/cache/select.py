"""The Select page's cached view model (``services.views.select``; see ``ui.cache``), and its
two writes: a score edit and a weight preset (validated in ``services.commands.checklist``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.commands import checklist
from services.store_session import short_lived_store
from services.views import select
from ui.cache import cached_view, clear, store_url

#: Who the dashboard's edits are recorded as.
EDITED_BY = "dashboard"


def select_view(selection: select.SelectSelection) -> select.SelectView:
    """The Select page for ``selection``: the store's part (``select_basis``: catalogue,
    evidence) cached by the evidence selection, ranked here (``rank_view``, pure, a few ms), so
    that moving a weight or a must-have reads nothing."""
    basis = cached_view(select.select_basis, selection.evidence())
    return select.rank_view(basis, selection)


def save_score(values: Mapping[str, Any]) -> int:
    """Validate one score edit and store it with its history row; every cached view is
    forgotten (the ranking reads the scores)."""
    with short_lived_store(store_url()) as store:
        written = checklist.save_scores(store, [values], edited_by=EDITED_BY)
    clear()
    return written


def save_preset(values: Mapping[str, Any]) -> str:
    """Validate a weight preset and keep it as the user's own; returns its name."""
    with short_lived_store(store_url()) as store:
        name = checklist.save_preset(store, values)
    clear()
    return name
