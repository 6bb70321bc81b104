"""Where a collector hands its rows: the one interface the load generator's result collector, the
watcher and the Prometheus import write to.

Collectors never import the store's writer; they take any object with ``add(table, rows)``.
``store.ingest.BufferedWriter`` is the one the commands pass (one transaction every ~2 s, lock
retry, spool); tests pass a list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol


class RowSink(Protocol):
    """Takes rows for one table at a time (``requests``, ``token_gaps``, ``engine_samples``,
    ``gpu_samples``…), each row a mapping of column to value."""

    def add(self, table: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Accept ``rows`` for ``table``; the sink decides when they are written."""
        ...
