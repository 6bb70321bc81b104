#!/usr/bin/env python3
"""Full-page PNG screenshot of a running dashboard, through Debian's chromium and Playwright.

    servescope ui --port 8501 &                     # or: make demo
    .venv/bin/python tools/screenshot.py http://127.0.0.1:8501 docs/screenshot.png

Waits until Streamlit has rendered (the app container is up, no script is running, the network
is quiet, and ``--wait-for`` text if given is visible), then grows the viewport to the height of
the page's content (Streamlit scrolls inside its main section, so a plain full-page capture would
stop at the window) and saves the PNG.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

CHROMIUM = os.environ.get("SERVESCOPE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--disable-dev-shm-usage",
]
_SCROLLERS = '[data-testid="stMain"], section.main, [data-testid="stAppViewContainer"]'
_CONTENT_HEIGHT_JS = f"""() => {{
  const parts = [document.documentElement, document.body,
    ...document.querySelectorAll('{_SCROLLERS}')];
  return Math.max(...parts.filter(Boolean).map(e => e.scrollHeight));
}}"""


def screenshot(
    url: str,
    out: Path,
    *,
    width: int = 1400,
    height: int = 900,
    max_height: int = 6000,
    wait_for: str | None = None,
    timeout_s: float = 60.0,
) -> tuple[int, int]:
    """Save a PNG of ``url`` to ``out``; returns its (width, height) in CSS pixels."""
    from playwright.sync_api import expect, sync_playwright

    timeout_ms = timeout_s * 1000
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(timeout_ms)
            page.goto(url, wait_until="domcontentloaded")
            expect(page.locator('[data-testid="stAppViewContainer"]')).to_be_visible(
                timeout=timeout_ms
            )
            if wait_for:
                expect(page.get_by_text(wait_for).first).to_be_visible(timeout=timeout_ms)
            page.wait_for_load_state("networkidle")
            # "Running…" indicator gone: the script run has finished.
            expect(page.locator('[data-testid="stStatusWidget"]')).to_have_count(
                0, timeout=timeout_ms
            )
            # placeholders of elements not yet delivered (the first run is still streaming)
            expect(page.locator('[data-testid="stSkeleton"]')).to_have_count(0, timeout=timeout_ms)
            content = int(page.evaluate(_CONTENT_HEIGHT_JS))
            full = max(height, min(content, max_height))
            page.set_viewport_size({"width": width, "height": full})
            page.wait_for_load_state("networkidle")
            out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out), full_page=True)
            return width, full
        finally:
            browser.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="dashboard URL, e.g. http://127.0.0.1:8501")
    parser.add_argument("out", type=Path, help="PNG file to write, e.g. docs/screenshot.png")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=900, help="minimum height")
    parser.add_argument("--max-height", type=int, default=6000)
    parser.add_argument("--wait-for", help="text that must be visible before the capture")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per wait")
    args = parser.parse_args(argv)
    if not Path(CHROMIUM).exists():
        print(f"screenshot: {CHROMIUM} not found: run tools/install_chromium.sh", file=sys.stderr)
        return 1
    w, h = screenshot(
        args.url,
        args.out,
        width=args.width,
        height=args.height,
        max_height=args.max_height,
        wait_for=args.wait_for,
        timeout_s=args.timeout,
    )
    print(f"{args.out} ({w}x{h})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
