"""Edits of a stored run from the dashboard: rename, retag, delete (through ``store.ingest``,
which also marks the run's kept figures stale or forgets them)."""

from __future__ import annotations

from store import ingest
from store.db import Store


def parse_tags(text: str) -> tuple[str, ...]:
    """Comma-separated tags as typed in a form: trimmed, empty ones dropped, first occurrence
    kept (``" a, b,,a "`` → ``("a", "b")``)."""
    return tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))


def rename_run(store: Store, run_id: str, name: str) -> None:
    """Give ``run_id`` the name ``name`` (trimmed)."""
    ingest.update_run(store, run_id, name=name.strip())


def set_tags(store: Store, run_id: str, tags: str) -> None:
    """Replace ``run_id``'s tags with the comma-separated ``tags`` (see :func:`parse_tags`)."""
    ingest.update_run(store, run_id, tags=list(parse_tags(tags)))


def delete_run(store: Store, run_id: str) -> None:
    """Delete ``run_id`` with its requests and token gaps."""
    ingest.delete_run(store, run_id)
