"""One way to show an error from the lower layers: its title and what to do about it."""

from __future__ import annotations

import streamlit as st

from errors import ServeScopeError, StoreError, StoreLockedError
from ui.display import md_escape

_TITLES: tuple[tuple[type[ServeScopeError], str], ...] = (
    (StoreLockedError, "The store is busy"),
    (StoreError, "The store cannot be read"),
    (ServeScopeError, "Something went wrong"),
)


def error_title(exc: ServeScopeError) -> str:
    """A short title for the kind of error (the most specific class that has one)."""
    return next(title for cls, title in _TITLES if isinstance(exc, cls))


def show_error(exc: ServeScopeError) -> None:
    """Render ``exc`` as a title, its message and its hint (all escaped: they may quote data)."""
    body = f"**{error_title(exc)}**: {md_escape(exc.message)}"
    if exc.hint:
        body += f"  \n{md_escape(exc.hint)}"
    st.error(body, icon=":material/error:")
