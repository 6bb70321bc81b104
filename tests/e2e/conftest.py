"""End-to-end fixtures: a real `servescope ui` server and Debian's chromium driven by Playwright.

- ``ui_server(db_url)`` starts ``servescope ui --port <free>`` with ``SERVESCOPE_DB=db_url`` in
  its own process group, waits for Streamlit's health endpoint with a deadline, and stops the
  whole group afterwards (``servescope ui`` runs Streamlit as a child process).
- ``page``: a fresh browser page; when the test fails, a full-page screenshot, the page's HTML and
  the server's log go to ``test-results/<test name>.*``.

chromium comes from Debian (``tools/install_chromium.sh``); Playwright cannot download browsers
here. Without /usr/bin/chromium the tests are skipped (failed under SERVESCOPE_TEST_STRICT=1).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NoReturn

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

CHROMIUM = Path(os.environ.get("SERVESCOPE_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-background-networking",  # the closed network refuses Google's hosts
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--disable-dev-shm-usage",
]
RESULTS_DIR = REPO_ROOT / "test-results"
SERVER_START_S = 90.0
EXPECT_TIMEOUT_MS = 30_000
WIDE_MIN_PX = 900  # layout="centered" caps the main column at 736 px; "wide" fills the window


def unavailable(reason: str) -> NoReturn:
    """Skip, or fail under SERVESCOPE_TEST_STRICT=1 (as tests/conftest.py does)."""
    if os.environ.get("SERVESCOPE_TEST_STRICT") == "1":
        pytest.fail(f"{reason} (SERVESCOPE_TEST_STRICT=1)", pytrace=False)
    pytest.skip(reason)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    item.stash.setdefault(_REPORTS, {})[report.when] = report
    return report


_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()


def _failed(item: pytest.Item) -> bool:
    reports = item.stash.get(_REPORTS, {})
    return any(r.failed for r in reports.values())


def _artifact(item: pytest.Item, suffix: str) -> Path:
    """test-results/<node id, flattened><suffix>, e.g. ``tests_e2e_test_home_py_test_x.png``."""
    RESULTS_DIR.mkdir(exist_ok=True)
    return RESULTS_DIR / (re.sub(r"[^A-Za-z0-9_-]+", "_", item.nodeid) + suffix)


def servescope_cmd() -> list[str]:
    """The `servescope` console script of the running interpreter's environment."""
    script = Path(sys.executable).with_name("servescope")
    if script.exists():
        return [str(script)]
    found = shutil.which("servescope")
    if found:
        return [found]
    return [sys.executable, "-c", "import sys, cli; sys.exit(cli.main())"]


@dataclass
class UiServer:
    url: str
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    _log: IO[bytes] = field(repr=False)

    def log_tail(self, chars: int = 4000) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-chars:]

    def wait_healthy(self, deadline_s: float) -> None:
        deadline = time.monotonic() + deadline_s
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"servescope ui exited with {self.proc.returncode} before serving:\n"
                    + self.log_tail()
                )
            try:
                with urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2) as resp:
                    if resp.status == 200:
                        return
                    last = f"HTTP {resp.status}"
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                last = str(exc)
            time.sleep(0.2)  # poll interval, bounded by the deadline
        raise AssertionError(
            f"servescope ui not healthy after {deadline_s:.0f} s ({last}):\n" + self.log_tail()
        )

    def terminate(self) -> None:
        """Ask the process group to end, without waiting (stop() waits)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)

    def stop(self) -> None:
        try:
            if self.proc.poll() is None:
                self.terminate()
                try:
                    self.proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(timeout=15)
            # Streamlit, its grandchild, may outlive the CLI's process: end the group either way.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        finally:
            self._log.close()


@pytest.fixture
def ui_server(
    tmp_path: Path, request: pytest.FixtureRequest, free_port: Callable[[], int]
) -> Iterator[Callable[[str], UiServer]]:
    """Call with a store URL to start `servescope ui` on it; returns the running server."""
    with _servers(tmp_path, request, free_port) as launch:

        def start(db_url: str) -> UiServer:
            server = launch(db_url)
            server.wait_healthy(SERVER_START_S)
            return server

        yield start


@pytest.fixture
def ui_servers(
    tmp_path: Path, request: pytest.FixtureRequest, free_port: Callable[[], int]
) -> Iterator[Callable[[list[str]], list[UiServer]]]:
    """Call with store URLs to start one `servescope ui` per URL, all at once (they boot in
    parallel), and wait until every one is healthy. Only the health endpoint is requested, so a
    page's first request is the test's own."""
    with _servers(tmp_path, request, free_port) as launch:

        def start(db_urls: list[str]) -> list[UiServer]:
            servers = [launch(url) for url in db_urls]
            for server in servers:
                server.wait_healthy(SERVER_START_S)
            return servers

        yield start


@contextlib.contextmanager
def _servers(
    tmp_path: Path, request: pytest.FixtureRequest, free_port: Callable[[], int]
) -> Iterator[Callable[[str], UiServer]]:
    """Launches `servescope ui` processes (not waiting for them); stops them all on exit."""
    started: list[UiServer] = []

    def launch(db_url: str) -> UiServer:
        port = free_port()
        while port in {s.port for s in started}:  # not yet bound by the one launched before
            port = free_port()
        log_path = tmp_path / f"ui-{port}.log"
        log = log_path.open("wb")
        env = dict(os.environ, SERVESCOPE_DB=db_url, PYTHONUNBUFFERED="1")
        proc = subprocess.Popen(
            [*servescope_cmd(), "ui", "--port", str(port)],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() ends Streamlit too
        )
        server = UiServer(f"http://127.0.0.1:{port}", port, proc, log_path, log)
        started.append(server)
        return server

    try:
        yield launch
    finally:
        for server in started:  # all at once: they end in parallel
            server.terminate()
        for server in started:
            if _failed(request.node):
                shutil.copy(server.log_path, _artifact(request.node, f".server-{server.port}.log"))
            server.stop()


def expect_framed(page: Any, link: str, heading: str) -> None:
    """The page a link opened is drawn inside the app's frame (ui/frame.py): its heading, the app's
    menu in the sidebar (not Streamlit's file-order ``pages/`` menu), the store box, and the wide
    layout. Call right after ``page.goto``."""
    from playwright.sync_api import expect

    from ui.nav import PAGES

    expect(page.get_by_role("heading", name=heading).first).to_be_visible()
    sidebar = page.get_by_test_id("stSidebar")
    # a menu link's text is its icon's ligature name, then its title ("timerLatency")
    menu = [re.compile(f"{re.escape(p.title)}$") for p in PAGES]
    expect(sidebar.get_by_test_id("stSidebarNavLink"), f"{link}: the app's menu").to_have_text(menu)
    expect(sidebar.get_by_test_id("stCaptionContainer"), f"{link}: store box").to_have_text(
        ["Store"]
    )
    expect(sidebar.get_by_role("button", name="Refresh data")).to_be_visible()
    box = page.get_by_test_id("stMainBlockContainer").bounding_box()
    assert box is not None, f"{link}: no main column"
    assert box["width"] > WIDE_MIN_PX, f"{link}: main column {box['width']:.0f} px, not wide"


@pytest.fixture(name="expect_framed")
def _expect_framed_fixture() -> Callable[[Any, str, str], None]:
    """Call as ``expect_framed(page, link, heading)`` (see :func:`expect_framed`)."""
    return expect_framed


@pytest.fixture
def browser() -> Iterator[Any]:
    """A chromium for this test only. Not session-scoped: Playwright's sync API keeps an asyncio
    loop marked running in the main thread while it is started, and later tests that call
    asyncio.run() would fail ("cannot be called from a running event loop")."""
    if not CHROMIUM.exists():
        unavailable(
            f"{CHROMIUM} not found: run tools/install_chromium.sh (apt-get install chromium)"
        )
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=EXPECT_TIMEOUT_MS)  # a cold Streamlit page on a busy machine
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(EXPECT_TIMEOUT_MS)
    try:
        yield page
    finally:
        if _failed(request.node):
            page.screenshot(path=str(_artifact(request.node, ".png")), full_page=True)
            _artifact(request.node, ".html").write_text(page.content())
        context.close()
