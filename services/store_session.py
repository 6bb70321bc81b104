"""The store as the surfaces use it: one short-lived ``Store`` per read, never a held connection
(DuckDB lets one process hold the file; a cached connection would lock out every collector)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import settings
from store.db import Store, mask_url
from store.lifecycle import open_store


def store_url() -> str:
    """The store URL the dashboard and the commands use (SERVESCOPE_DB)."""
    return settings.db_url()


def masked_store_url() -> str:
    """The store URL with any password masked, safe to display."""
    return mask_url(settings.db_url())


@contextmanager
def short_lived_store(url: str | None = None) -> Iterator[Store]:
    """Open the store at ``url`` (default: SERVESCOPE_DB) for one piece of work — a view's
    build, a page's action — held open for its many short reads (``Store.held_open``); its
    engine is disposed when the block ends, however it ends."""
    store = open_store(url or settings.db_url())
    try:
        with store.held_open():
            yield store
    finally:
        store.dispose()
