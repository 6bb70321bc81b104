"""The Memory page's view model, cached (``services.views.memory``; see ``ui.cache``)."""

from __future__ import annotations

from services.views import memory
from ui.cache import cached_view


def memory_view(selection: memory.MemorySelection) -> memory.MemoryView:
    """``services.views.memory.memory_view`` of the dashboard's store."""
    return cached_view(memory.memory_view, selection)


def memory_load_view(selection: memory.MemorySelection) -> memory.MemoryLoadView:
    """``services.views.memory.memory_load_view`` of the dashboard's store."""
    return cached_view(memory.memory_load_view, selection)
