"""The Select page in Debian's chromium, opened by its URL as a fresh ``servescope ui``'s first
request: moving a weight changes the ranking (to the order the view model computes for the new
weights), adding a must-have drops the frameworks without it, and both land in the URL."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from services.views.select import SelectSelection, select_view
from store.lifecycle import open_store

pytestmark = pytest.mark.e2e


def _order(url: str, selection: SelectSelection) -> str:
    """The page's "Ranking: 1. vLLM 2.88 · …" caption for ``selection``, from the view model."""
    store = open_store(url)
    try:
        view = select_view(store, selection)
    finally:
        store.dispose()
    return " · ".join(
        f"{r.rank}. {view.framework_label(r.framework)} {r.total:.2f}" for r in view.ranking.rows
    )


def test_weights_and_must_haves_change_the_ranking(
    tmp_path: Path, ui_server: Callable[[str], Any], page: Any
) -> None:
    from playwright.sync_api import expect

    url = f"duckdb:///{tmp_path / 'select.duckdb'}"
    open_store(url).dispose()
    server = ui_server(url)
    page.goto(f"{server.url}/select?preset=online-chat")
    expect(page.get_by_role("heading", name="Select a framework").first).to_be_visible()
    before = _order(url, SelectSelection(preset="online-chat"))
    expect(page.get_by_text(f"Ranking: {before}")).to_be_visible()

    # move the hardware-breadth weight from 0 to its maximum with the keyboard
    page.get_by_text("Weights", exact=True).click()
    slider = (
        page.locator('[data-testid="stSlider"]')
        .filter(has_text="Hardware breadth")
        .get_by_role("slider")
    )
    slider.focus()
    slider.press("End")
    store = open_store(url)
    try:
        weights = dict(select_view(store, SelectSelection()).weights) | {"hardware_breadth": 5.0}
    finally:
        store.dispose()
    after = _order(url, SelectSelection(weights=tuple(sorted(weights.items()))))
    assert after != before
    expect(page.get_by_text(f"Ranking: {after}")).to_be_visible()
    expect(page).to_have_url(re.compile(r"w=.*hardware_breadth%3A5"))

    # a must-have: Google TPU
    must = page.locator('[data-testid="stMultiSelect"]').filter(has_text="Must have")
    must.locator("input").fill("Google TPU")
    must.locator("input").press("Enter")
    expect(page.get_by_text("Left out by the must-haves")).to_be_visible()
    expect(page.get_by_text("Ollama lacks Google TPU")).to_be_visible()
    both = SelectSelection(weights=tuple(sorted(weights.items())), must_have=("tpu",))
    expect(page.get_by_text(f"Ranking: {_order(url, both)}")).to_be_visible()
    expect(page).to_have_url(re.compile(r"must=tpu"))
    assert page.locator('[data-testid="stException"]').count() == 0
