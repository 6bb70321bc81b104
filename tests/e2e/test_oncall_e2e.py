"""On call end to end in Debian's chromium, on a real watched sim driven into KV saturation by a
burst (tests/oncall_store.py: ``servescope sim`` + ``servescope watch`` + the load generator):
``/live?slo=interactive-chat&target=…`` marks the burst's windows as breaches with links to
their incident view, and ``/incident?target=…&from=…&to=…`` of the burst names pattern 1
(memory full, queue building) with the window's numbers. Each page is a fresh ``servescope ui``'s
first request."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from oncall_store import SaturationStore, build_saturation_store

from services.views.incident import IncidentRequest, incident_view
from services.views.traffic import incident_path
from store.lifecycle import open_store

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def saturation(tmp_path_factory: pytest.TempPathFactory) -> SaturationStore:
    return build_saturation_store(tmp_path_factory.mktemp("oncall-e2e"))


def _no_exception(page: Any) -> None:
    exceptions = page.locator('[data-testid="stException"]')
    assert exceptions.count() == 0, exceptions.first.inner_text()


def test_live_marks_the_burst_as_a_breach(
    saturation: SaturationStore,
    ui_server: Callable[[str], Any],
    page: Any,
    expect_framed: Callable[[Any, str, str], None],
) -> None:
    from playwright.sync_api import expect

    link = (
        f"/live?slo=interactive-chat&target={quote(saturation.target, safe='')}"
        "&window=5&span=5&refresh=60"
    )
    server = ui_server(saturation.url)
    page.goto(f"{server.url}{link}")  # the fresh server's first page request
    expect_framed(page, link, "Live")
    summary = page.get_by_text(re.compile(r"\d+ of \d+ windows breach interactive-chat"))
    expect(summary).to_be_visible()
    m = re.search(r"(\d+) of (\d+) windows", summary.inner_text())
    assert m is not None
    assert int(m.group(1)) >= 2, summary.inner_text()
    # the breaching windows are the burst's: every incident link overlaps it, on this target
    links = page.locator('a[href*="/incident?"]')
    expect(links.first).to_be_attached()
    for i in range(links.count()):
        href = links.nth(i).get_attribute("href") or ""
        q = parse_qs(urlsplit(href).query)
        assert q["target"] == [saturation.target], href
        start, end = int(q["from"][0]), int(q["to"][0])
        assert end > saturation.burst_start and start < saturation.burst_end + 1, (
            href,
            saturation,
        )
    expect(page.get_by_text(re.compile(r"P99 TTFT \d[\d.]* s > 500 ms")).first).to_be_visible()
    _no_exception(page)


def test_incident_of_the_burst_names_pattern_1(
    saturation: SaturationStore,
    ui_server: Callable[[str], Any],
    page: Any,
    expect_framed: Callable[[Any, str, str], None],
) -> None:
    from playwright.sync_api import expect

    link = incident_path(saturation.target, saturation.burst_start, saturation.burst_end)
    # what the page must show, from the view model on the same store (read before the UI opens it)
    params = {k: v[0] for k, v in parse_qs(urlsplit(link).query).items()}
    request = IncidentRequest.from_params(params)
    assert request is not None
    store = open_store(saturation.url)
    try:
        view = incident_view(store, request)
    finally:
        store.dispose()
    finding = next(f for f in view.findings if f.rule == 1)
    server = ui_server(saturation.url)
    page.goto(f"{server.url}{link}")  # the fresh server's first page request
    expect_framed(page, link, "Incident")
    box = page.locator(".st-key-incident_finding_1")
    expect(box).to_be_visible()
    expect(box.get_by_text("1. Memory full and the queue building")).to_be_visible()
    # its numbers: the summary names the KV share, the queue's peak and the preemptions
    expect(box.get_by_text(finding.summary)).to_be_visible()
    assert f"up to {view.during.waiting_max:.0f} requests waited" in finding.summary
    expect(page.get_by_text(link).first).to_be_visible()  # the link to share
    _no_exception(page)
