"""The planning-review report in Debian's chromium, offline: ``servescope report`` (the real
command, on a store of real sim runs and a stored sweep) writes the file; chromium opens it as a
``file://`` URL with every other request aborted — each Plotly chart draws its SVG, nothing
asks the network for anything, no alert dialog fires, and the run named
``<script>alert(1)</script>`` is shown as text."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tune_sweep import SWEEP, store_sweep

from services import run_edits
from services.commands import demo
from services.views.plan import PlanSpec
from store import plans as plans_store
from store.lifecycle import open_store

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[2]

HOSTILE = "<script>alert(1)</script>"
ENGINE = demo.DemoEngine(
    "tiny", "H100-SXM-80GB", "llama-3.1-8b", "test engine", {"max_batch_size": 4}
)
#: The report's charts at least: the checklist's, P99 by input length per run (2 runs), the
#: recommendation's Pareto and capacity-search charts, the plan's GPUs, cost and memory charts
#: (and a memory chart per run whose /metrics the bench scraped: a short run may have none).
MIN_CHARTS = 1 + 2 + 2 + 3
PLAN = "q3 peak"


@pytest.fixture(scope="module")
def report_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report, written before the browser starts (the demo runs its own event loop, which
    Playwright's sync API would refuse while it runs)."""
    tmp_path = tmp_path_factory.mktemp("report")
    url = f"duckdb:///{tmp_path / 'report.duckdb'}"
    store_sweep(url)
    store = open_store(url)
    try:
        runs = demo.run_demo(
            store,
            engines=[ENGINE],
            levels=[1, 4],
            requests_per_stream=3,
            max_tokens=48,
            progress=False,
        )
        run_edits.rename_run(store, runs[0], HOSTILE)
        spec = PlanSpec(model="llama-3.1-8b", peak_qps=20, avg_qps=8, gpus=("H100-SXM-80GB",))
        plans_store.save_plan(store, PLAN, spec.to_json())
        plans_store.set_price(store, "H100-SXM-80GB", 2.5, note="<img src=x onerror=alert(3)>")
    finally:
        store.dispose()
    out = tmp_path / "review.html"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli",
            "report",
            "--db",
            url,
            "--runs",
            *runs,
            "--sweep",
            SWEEP,
            "--plan",
            PLAN,
            "--title",
            f"Review of {HOSTILE}",
            "--out",
            str(out),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"wrote {out}" in done.stdout
    return out


def test_the_report_renders_offline_and_shows_a_script_name_as_text(
    report_file: Path, page: Any
) -> None:
    from playwright.sync_api import expect

    out = report_file
    asked: list[str] = []

    def offline(route: Any) -> None:
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            asked.append(route.request.url)
            route.abort()

    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.route("**/*", offline)
    page.goto(out.as_uri())

    expect(page.get_by_role("heading", name="Summary")).to_be_visible()
    charts = out.read_text(encoding="utf-8").count('class="plotly-graph-div"')
    assert charts >= MIN_CHARTS
    plots = page.locator(".js-plotly-plot")
    expect(plots).to_have_count(charts)
    for i in range(charts):  # every chart drew its SVG …
        expect(plots.nth(i).locator("svg.main-svg").first).to_be_attached()
    for i in range(charts):  # … and its traces (bars, lines, markers)
        expect(plots.nth(i).locator("g.trace").first).to_be_attached()
    # the hostile name and title are text, on the page, never run
    expect(page.get_by_role("heading", name=HOSTILE).first).to_be_visible()
    expect(page.get_by_role("heading", name=f"Review of {HOSTILE}")).to_be_visible()
    assert page.title() == f"Review of {HOSTILE}"
    assert page.locator("td", has_text=HOSTILE).count() >= 2  # summary and SLO table
    page.wait_for_timeout(500)  # give a stray script the time to fire
    assert dialogs == []
    assert asked == [], f"the report asked the network for {asked}"
    # the table of contents jumps to each section
    page.get_by_role("link", name="Recommendation").click()
    expect(page.locator("#recommendation")).to_be_in_viewport()
