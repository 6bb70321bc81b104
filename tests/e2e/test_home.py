"""The dashboard in a real browser: `servescope ui` (Streamlit) driven through Debian's chromium."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from store import ingest
from store.lifecycle import open_store

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[2]

RUN_ID = "e2e-run-1"
RUN_NAME = "e2e-smoke-7f3a"  # unique text to look for in the page
N_REQUESTS = 40


def seed_store(url: str) -> None:
    """One completed run of N_REQUESTS ok requests, written through the store's ingest API."""
    store = open_store(url)
    try:
        ingest.add_run(
            store,
            {
                "run_id": RUN_ID,
                "name": RUN_NAME,
                "source": "servescope",
                "framework": "sim",
                "model": "llama-3.1-8b",
                "gpu_name": "H100-SXM-80GB",
                "gpu_count": 1,
                "workload": "short-in-short-out",
                "arrival": "concurrency",
                "concurrency": 4,
                "started_at": 1_700_000_000.0,
                "ended_at": 1_700_000_020.0,
                "duration_s": 20.0,
                "status": "completed",
                "client_bound": False,
            },
        )
        seq = range(N_REQUESTS)
        ingest.add_requests(
            store,
            pd.DataFrame(
                {
                    "run_id": RUN_ID,
                    "seq": list(seq),
                    "status": "ok",
                    "sent_at": [1_700_000_000.0 + i * 0.5 for i in seq],
                    "first_token_at": [1_700_000_000.05 + i * 0.5 for i in seq],
                    "done_at": [1_700_000_000.4 + i * 0.5 for i in seq],
                    "input_tokens": [120 + i for i in seq],
                    "output_tokens": 32,
                    "ttft_ms": [50.0 + i for i in seq],
                    "tpot_ms": 10.0,
                    "e2e_ms": [400.0 + i for i in seq],
                    "http_status": 200,
                    "finish_reason": "length",
                }
            ),
        )
    finally:
        store.dispose()


def _no_exception_shown(page: Any) -> None:
    exceptions = page.locator('[data-testid="stException"]')
    assert exceptions.count() == 0, exceptions.first.inner_text()


def test_home_shows_the_seeded_run(
    tmp_path: Path, ui_server: Callable[[str], Any], page: Any
) -> None:
    url = f"duckdb:///{tmp_path / 'seeded.duckdb'}"
    seed_store(url)
    server = ui_server(url)

    page.goto(server.url)

    from playwright.sync_api import expect

    expect(page.get_by_role("heading", name="ServeScope").first).to_be_visible()
    # The runs tables (overview and latest runs) are rendered as data grids.
    expect(page.locator('[data-testid="stDataFrame"]').nth(1)).to_be_visible()
    # The run picker names the seeded run; its summary figures are rendered.
    expect(page.get_by_role("combobox", name="Run")).to_have_value(re.compile(RUN_NAME))
    expect(page.locator('[data-testid="stMetric"]').first).to_be_visible()
    # The selection is shareable: it lands in the query string.
    expect(page).to_have_url(f"{server.url}/?run={RUN_ID}")
    _no_exception_shown(page)


def test_home_on_an_empty_store_names_the_commands_that_fill_it(
    tmp_path: Path, ui_server: Callable[[str], Any], page: Any
) -> None:
    server = ui_server(f"duckdb:///{tmp_path / 'empty.duckdb'}")

    page.goto(server.url)

    from playwright.sync_api import expect

    expect(page.get_by_text("servescope demo").first).to_be_visible()
    assert page.locator('[data-testid="stDataFrame"]').count() == 0
    _no_exception_shown(page)


def test_screenshot_tool_captures_the_dashboard(
    tmp_path: Path, ui_server: Callable[[str], Any], browser: Any
) -> None:
    """tools/screenshot.py (how docs/screenshot.png is made) writes a PNG of the whole page."""
    url = f"duckdb:///{tmp_path / 'shot.duckdb'}"
    seed_store(url)
    server = ui_server(url)
    out = tmp_path / "shot.png"

    proc = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "tools" / "screenshot.py"),
            server.url,
            str(out),
            "--width",
            "1200",
            "--wait-for",
            "Latest runs",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )

    assert proc.returncode == 0, proc.stderr
    header = out.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", header[16:24])
    assert width == 1200
    assert height >= 900
