"""The Tune page in Debian's chromium: ``/tune?sweep=…`` opened as a fresh ``servescope ui``'s
first request, on a sweep stored as the runner stores one (tests/tune_sweep.py), shows the
recommendation's headline, its explanation, the points table and the three charts inside the
app's frame, with no exception; the failed point's log tail opens in its expander. And a sweep
stored by the real runner (``servescope sweep`` of a small spec) opened by its link shows the
headline the runner printed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tune_sweep import SWEEP, run_real_sweep, store_sweep

from services.views.tune import recommendation_for
from store import sweeps as sweeps_store
from store.lifecycle import open_store

pytestmark = pytest.mark.e2e


def test_a_sweep_link_shows_the_recommendation_and_charts(
    tmp_path: Path,
    ui_server: Callable[[str], Any],
    page: Any,
    expect_framed: Callable[[Any, str, str], None],
) -> None:
    from playwright.sync_api import expect

    url = f"duckdb:///{tmp_path / 'tune.duckdb'}"
    store_sweep(url)
    server = ui_server(url)
    link = f"/tune?sweep={SWEEP}"
    page.goto(f"{server.url}{link}")  # the fresh server's first page request
    expect_framed(page, link, "Tune")
    expect(
        page.get_by_text(
            "Recommended: max_batch_size=128 max_batched_tokens=2048 — SLO capacity 14.2 req/s"
        )
    ).to_be_visible()
    expect(
        page.get_by_text("max_batched_tokens 8192 → 2048 cut P99 TTFT in the 4k–16k bucket by 40 %")
    ).to_be_visible()
    expect(page.locator('[data-testid="stDataFrame"]')).to_have_count(1)
    charts = page.locator('[data-testid="stPlotlyChart"]')
    expect(charts).to_have_count(3)
    for title in ("SLO capacity by max_batch_size", "Throughput per GPU", "Capacity search"):
        expect(page.locator(".gtitle").filter(has_text=title)).to_have_count(1)
    page.get_by_text("(repeat 0): ran out of memory").click()
    expect(page.get_by_text("torch.OutOfMemoryError: CUDA out of memory")).to_be_visible()
    expect(page.locator('[data-testid="stStatusWidget"]')).to_have_count(0)
    exceptions = page.locator('[data-testid="stException"]')
    assert exceptions.count() == 0, exceptions.first.inner_text()
    assert page.locator('[data-testid="stAlertContentError"]').count() == 0


def test_a_sweep_stored_by_the_real_runner_opens_by_its_link(
    tmp_path: Path,
    ui_server: Callable[[str], Any],
    page: Any,
    expect_framed: Callable[[Any, str, str], None],
) -> None:
    from playwright.sync_api import expect

    url = f"duckdb:///{tmp_path / 'real.duckdb'}"
    done = run_real_sweep(url, tmp_path)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    store = open_store(url)
    try:
        sweep_id = str(sweeps_store.sweep_list(store)["sweep_id"].iloc[0])
        headline = recommendation_for(store, sweep_id).headline()
    finally:
        store.dispose()
    assert headline in done.stdout
    server = ui_server(url)
    link = f"/tune?sweep={sweep_id}"
    page.goto(f"{server.url}{link}")
    expect_framed(page, link, "Tune")
    expect(page.get_by_text(headline)).to_be_visible()
    expect(page.locator('[data-testid="stPlotlyChart"]')).to_have_count(3)
    expect(page.locator('[data-testid="stStatusWidget"]')).to_have_count(0)
    exceptions = page.locator('[data-testid="stException"]')
    assert exceptions.count() == 0, exceptions.first.inner_text()
    assert page.locator('[data-testid="stAlertContentError"]').count() == 0
