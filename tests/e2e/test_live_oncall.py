"""The Live page for on call in Debian's chromium: ``/live?slo=…&target=…`` opened as a fresh
``servescope ui``'s first request, on a store holding five minutes of a watched vLLM target with
a TTFT burst and a run of aborted requests (tests/live_store.py), shows the page inside the
app's frame with the breaching windows shaded on the timeline and listed with links to their
incident view; dragging across the timeline offers the incident view of that range; a bad value
in the URL is a message, not an exception."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from live_store import TARGET
from live_store import seed as seed_oncall

pytestmark = pytest.mark.e2e

LINK = f"/live?slo=interactive-chat&target={quote(TARGET, safe='')}&span=5&refresh=60"


def _no_exception(page: Any) -> None:
    exceptions = page.locator('[data-testid="stException"]')
    assert exceptions.count() == 0, exceptions.first.inner_text()


def test_a_live_link_marks_the_breaches_and_links_their_incident_view(
    tmp_path: Path,
    ui_server: Callable[[str], Any],
    page: Any,
    expect_framed: Callable[[Any, str, str], None],
) -> None:
    from playwright.sync_api import expect

    url = f"duckdb:///{tmp_path / 'live.duckdb'}"
    seed_oncall(url, time.time())
    server = ui_server(url)
    page.goto(f"{server.url}{LINK}")  # the fresh server's first page request
    expect_framed(page, LINK, "Live")
    expect(
        page.get_by_text(re.compile(r"\d of \d+ windows breach interactive-chat"))
    ).to_be_visible()
    charts = page.locator('[data-testid="stPlotlyChart"]')
    expect(charts).to_have_count(2)  # the timeline and the length mix
    timeline = charts.first
    # breaching windows: red bands drawn behind every row, and crosses on the P99 TTFT line
    bands = timeline.locator(".layer-below .shapelayer path")
    expect(bands.first).to_be_attached()
    n = bands.count()
    assert 2 <= n <= 4, n
    expect(timeline.locator(".legendtext").filter(has_text=re.compile("^breach$"))).to_have_count(1)
    expect(timeline.locator(".legendtext").filter(has_text="SLO P99 TTFT ≤ 0.5 s")).to_have_count(1)
    # each breach listed with its incident link: this target, exactly that window
    links = page.locator('a[href*="/incident?"]')
    expect(links).to_have_count(n)
    for i in range(n):
        href = links.nth(i).get_attribute("href") or ""
        q = parse_qs(urlsplit(href).query)
        assert q["target"] == [TARGET], href
        assert int(q["to"][0]) - int(q["from"][0]) in (30, 31), href
    expect(page.get_by_text(re.compile(r"P99 TTFT \d\.\d+ s > 500 ms")).first).to_be_visible()
    expect(page.get_by_text("Prompt length", exact=False).first).to_be_visible()
    _no_exception(page)
    assert page.locator('[data-testid="stAlertContentError"]').count() == 0

    # drag across the top row (TTFT): the incident view of that range is offered
    drag = timeline.locator(".nsewdrag").first
    box = drag.bounding_box()
    assert box is not None
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.30, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.50, y, steps=8)
    page.mouse.move(box["x"] + box["width"] * 0.70, y, steps=8)
    page.mouse.up()
    investigate = page.get_by_role("link", name=re.compile(r"^Investigate \d\d:\d\d:\d\d–"))
    expect(investigate).to_have_count(1)
    href = investigate.get_attribute("href") or ""
    q = parse_qs(urlsplit(href).query)
    assert q["target"] == [TARGET] and int(q["to"][0]) - int(q["from"][0]) >= 30, href
    _no_exception(page)


def test_a_bad_value_in_the_live_link_is_a_message(
    tmp_path: Path,
    ui_server: Callable[[str], Any],
    page: Any,
    expect_framed: Callable[[Any, str, str], None],
) -> None:
    from playwright.sync_api import expect

    server = ui_server(f"duckdb:///{tmp_path / 'empty.duckdb'}")
    link = "/live?window=abc"
    page.goto(f"{server.url}{link}")
    expect_framed(page, link, "Live")
    expect(
        page.get_by_text("?window=abc is not accepted: a whole number of seconds from 5 to 3600")
    ).to_be_visible()
    expect(page.locator('[data-testid="stPlotlyChart"]')).to_have_count(0)
    _no_exception(page)
