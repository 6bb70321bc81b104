"""Every page of the dashboard opened in Debian's chromium on real demo data, each as the first
request of a fresh server and drawn inside the app's frame.

The data comes from the demo itself on a small plan: a real `servescope sim` process measured
by the real load generator, with its /metrics scraped into engine samples, into a DuckDB file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from services.commands import demo
from store.lifecycle import open_store
from ui.nav import PAGES

pytestmark = pytest.mark.e2e

ENGINE = demo.DemoEngine(
    "e2e", "H100-SXM-80GB", "llama-3.1-8b", "e2e engine", {"max_batch_size": 4}
)
TITLES = {"home": "ServeScope"}  # other pages are titled as they are named in the menu


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"duckdb:///{tmp_path_factory.mktemp('demo') / 'demo.duckdb'}"
    store = open_store(url)
    try:
        demo.run_demo(
            store,
            engines=[ENGINE],
            levels=[1, 4],
            requests_per_stream=3,
            max_tokens=16,
            progress=False,
        )
    finally:
        store.dispose()
    return url


@pytest.mark.parametrize("spec", PAGES, ids=[p.url_path for p in PAGES])
def test_page_renders_demo_data_without_exception(
    spec: Any,
    demo_store: str,
    ui_server: Callable[[str], Any],
    page: Any,
    expect_framed: Callable[[Any, str, str], None],
) -> None:
    from playwright.sync_api import expect

    server = ui_server(demo_store)
    path = "" if spec.default else spec.url_path
    link = f"/{path}?run=demo-e2e-c4"
    page.goto(f"{server.url}{link}")  # the fresh server's first page request
    expect_framed(page, link, TITLES.get(spec.url_path, spec.title))
    # the script has finished: no running indicator, no element placeholders left
    expect(page.locator('[data-testid="stStatusWidget"]')).to_have_count(0)
    expect(page.locator('[data-testid="stSkeleton"]')).to_have_count(0)
    exceptions = page.locator('[data-testid="stException"]')
    assert exceptions.count() == 0, exceptions.first.inner_text()
    assert page.locator('[data-testid="stAlertContentError"]').count() == 0
