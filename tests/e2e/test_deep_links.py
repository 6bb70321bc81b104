"""A shared link opened as the very first request of a fresh `servescope ui` gets the app's frame.

Streamlit 1.67 decides once per process whether the app uses its legacy ``pages/`` folder
(``PagesManager.__init__`` in streamlit/runtime/pages_manager.py sets the class flag
``uses_pages_directory`` when a ``pages`` folder sits beside the main script); until some run
calls ``st.navigation``, the script runner runs ``_mpa_v1`` instead of the main script, so a deep
link as a fresh server's first request rendered the page alone: a file-order menu (app, compare,
data, …), no store box, the narrow layout. Each server here has answered only its health endpoint
before the browser opens the link. (test_every_page.py opens every page the same way, with a run
selected, and checks the frame too.)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from store.lifecycle import open_store

pytestmark = pytest.mark.e2e

#: (link, the page's heading): a selection in the query string, a plain page, and the default
#: page by its own name (not "/").
LINKS = [("/latency?run=x", "Latency"), ("/compare", "Compare"), ("/home", "ServeScope")]


def _empty_store(path: Path) -> str:
    url = f"duckdb:///{path}"
    open_store(url).dispose()
    return url


def test_deep_links_open_framed_on_fresh_servers(
    tmp_path: Path,
    ui_servers: Callable[[list[str]], list[Any]],
    page: Any,
    expect_framed: Callable[[Any, str, str], None],
) -> None:
    # One store per server: two processes may not open one DuckDB file for writing.
    servers = ui_servers([_empty_store(tmp_path / f"s{i}.duckdb") for i in range(len(LINKS))])
    for server, (link, heading) in zip(servers, LINKS, strict=True):
        page.goto(f"{server.url}{link}")
        expect_framed(page, link, heading)
