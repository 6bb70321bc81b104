"""The Plan page in Debian's chromium: ``/plan?model=…&peak=…`` opened as a fresh ``servescope
ui``'s first request, on a store holding a measured run series of the model on an H100
(tests/plan_store.py) and an H100 price, shows the plan inside the app's frame: the headline,
the options table with the measured row, the three charts, the memory table; a bad value in the
URL is a message, not an exception."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from plan_store import H100, store_series

from store import plans as plans_store
from store.lifecycle import open_store

pytestmark = pytest.mark.e2e

LINK = (
    f"/plan?model=llama-3.1-8b&peak=20&avg=10&in=1000&out=200&slo=interactive-chat"
    f"&gpus={H100},L4-24GB&tp=1,2&precision=fp16,int4&headroom=0.2"
)


def _no_exception(page: Any) -> None:
    exceptions = page.locator('[data-testid="stException"]')
    assert exceptions.count() == 0, exceptions.first.inner_text()


def test_a_plan_link_shows_the_plan_with_the_measured_option(
    tmp_path: Path,
    ui_server: Callable[[str], Any],
    page: Any,
    expect_framed: Callable[[Any, str, str], None],
) -> None:
    from playwright.sync_api import expect

    url = f"duckdb:///{tmp_path / 'plan.duckdb'}"
    store_series(url)
    store = open_store(url)
    try:
        plans_store.set_price(store, H100, 2.5)
    finally:
        store.dispose()
    server = ui_server(url)
    page.goto(f"{server.url}{LINK}")  # the fresh server's first page request
    expect_framed(page, LINK, "Plan")
    expect(page.get_by_text("serve 20 req/s peak + 20% headroom")).to_be_visible()
    expect(page.locator('[data-testid="stDataFrame"]')).to_have_count(3)
    charts = page.locator('[data-testid="stPlotlyChart"]')
    expect(charts).to_have_count(3)
    for title in ("GPUs needed per option", "Cost per hour at the peak", "Memory per GPU"):
        expect(page.locator(".gtitle").filter(has_text=title)).to_have_count(1)
    # the measured option is a bar of the GPUs chart, labelled by its configuration
    expect(page.locator(".legendtext").filter(has_text="capacity measured")).to_have_count(1)
    expect(page.get_by_text("Prices: H100-SXM-80GB $2.50/GPU-hour")).to_be_visible()
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

    server = ui_server(f"duckdb:///{tmp_path / 'empty.duckdb'}")
    link = "/plan?model=llama-3.1-8b&peak=4&avg=9"
    page.goto(f"{server.url}{link}")
    expect_framed(page, link, "Plan")
    expect(page.get_by_text("average QPS 9 is above the peak 4")).to_be_visible()
    expect(page.locator('[data-testid="stPlotlyChart"]')).to_have_count(0)
    _no_exception(page)
