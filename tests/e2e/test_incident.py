"""The incident page in Debian's chromium: ``/incident?target=…&from=…&to=…`` opened as a fresh
``servescope ui``'s first request, on a store holding a calm quarter hour then a KV-saturation
episode (tests/incident_store.py), shows pattern 1 with its numbers, before vs during and the
four charts inside the app's frame; a bad value in the link is one message and the form."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from incident_store import SPAN, T0, TARGET, store_episode

from services.views.traffic import incident_path

pytestmark = pytest.mark.e2e

LINK = incident_path(TARGET, T0 + SPAN, T0 + 2 * SPAN)


def _no_exception(page: Any) -> None:
    exceptions = page.locator('[data-testid="stException"]')
    assert exceptions.count() == 0, exceptions.first.inner_text()


def test_an_incident_link_names_pattern_1_with_its_numbers(
    tmp_path: Path,
    ui_server: Callable[[str], Any],
    page: Any,
    expect_framed: Callable[[Any, str, str], None],
) -> None:
    from playwright.sync_api import expect

    url = f"duckdb:///{tmp_path / 'incident.duckdb'}"
    store_episode(url)
    server = ui_server(url)
    page.goto(f"{server.url}{LINK}")  # the fresh server's first page request
    expect_framed(page, LINK, "Incident")
    expect(page.get_by_text("1. Memory full and the queue building")).to_be_visible()
    expect(
        page.get_by_text("KV-cache usage was at or above 90% in 100% of the window's samples")
    ).to_be_visible()
    charts = page.locator('[data-testid="stPlotlyChart"]')
    expect(charts).to_have_count(4)
    for title in (
        "Latency per 30 s window",
        "Mean TTFT: queueing vs prefill",
        "Prompt length before vs during",
        "Engine state and GPUs",
    ):
        expect(page.locator(".gtitle").filter(has_text=title)).to_have_count(1)
    # the shareable link is on the page, and the form holds the window
    expect(page.get_by_text(LINK)).to_be_visible()
    expect(page.get_by_role("textbox", name="From (UTC)")).to_have_value("2030-03-17T18:01:40Z")
    expect(page.locator('[data-testid="stStatusWidget"]')).to_have_count(0)
    _no_exception(page)
    assert page.locator('[data-testid="stAlertContentError"]').count() == 0


def test_a_bad_value_in_the_link_is_a_message(
    tmp_path: Path,
    ui_server: Callable[[str], Any],
    page: Any,
    expect_framed: Callable[[Any, str, str], None],
) -> None:
    from playwright.sync_api import expect

    url = f"duckdb:///{tmp_path / 'incident.duckdb'}"
    store_episode(url)
    server = ui_server(url)
    link = f"/incident?target={TARGET}&from=yesterday&to=1900001800"
    page.goto(f"{server.url}{link}")
    expect_framed(page, link, "Incident")
    expect(page.get_by_text("from='yesterday' is not a time")).to_be_visible()
    expect(page.get_by_role("button", name="Investigate")).to_be_visible()
    expect(page.locator('[data-testid="stPlotlyChart"]')).to_have_count(0)
    _no_exception(page)
