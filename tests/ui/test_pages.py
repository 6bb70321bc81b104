"""AppTest: every page registered in ui.frame runs on an empty and on a seeded store, through the
script `servescope ui` runs (ui/entry/streamlit_app.py) and through app.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from ui import nav

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "ui" / "entry" / "streamlit_app.py")  # what `servescope ui` runs
ROOT_APP = str(ROOT / "app.py")  # `streamlit run app.py`
TIMEOUT = 30


def _run_app(**query: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for key, value in query.items():
        at.query_params[key] = value
    return at.run()


def _no_exception(at: AppTest) -> None:
    assert [e.value for e in at.exception] == []


def _table(at: AppTest, column: str) -> pd.DataFrame:
    """The first table shown that has ``column`` (tables are found by content, not position)."""
    found = [df.value for df in at.dataframe if column in df.value.columns]
    assert found, f"no table with a {column!r} column"
    return found[0]


def test_registered_pages_exist() -> None:
    assert nav.PAGES, "app.py registers at least the home page"
    assert sum(p.default for p in nav.PAGES) == 1
    for page in nav.PAGES:
        assert (ROOT / page.path).is_file(), page.path


def test_a_run_without_requests_shows_empty_figures(seeded_url: str) -> None:
    at = _run_app(run="run-empty")
    _no_exception(at)
    assert at.selectbox(key="run_select").value == "run-empty"
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Requests"] == "0 ok / 0"
    assert metrics["Output throughput"] == "—"
    table = _table(at, "P99 confidence")
    assert table["samples"].tolist() == [0, 0, 0, 0, 0]
    assert len({p.url_path for p in nav.PAGES}) == len(nav.PAGES)


@pytest.mark.parametrize("seeded", [False, True], ids=["empty", "seeded"])
@pytest.mark.parametrize("page", nav.PAGES, ids=lambda p: p.path)
def test_every_page_runs_via_app(
    page: nav.PageSpec, seeded: bool, seed: Callable[[], None]
) -> None:
    if seeded:
        seed()
    at = _run_app()
    _no_exception(at)
    at.switch_page(str(page.file)).run()
    _no_exception(at)


def test_entry_script_has_no_pages_folder_beside_it() -> None:
    """Streamlit runs its legacy pages/ mode, which skips the frame on a fresh server's first
    deep link, for a main script with a `pages` folder beside it (tests/e2e/test_deep_links.py)."""
    assert not (Path(APP).parent / "pages").exists()


@pytest.mark.parametrize("script", [APP, ROOT_APP], ids=["entry", "app.py"])
def test_both_entry_scripts_draw_the_frame(script: str, db_url: str) -> None:
    at = AppTest.from_file(script, default_timeout=TIMEOUT).run()
    _no_exception(at)
    assert at.sidebar.caption[0].value == "Store"
    assert at.sidebar.code[0].value == db_url
    assert at.title[0].value == "ServeScope"


@pytest.mark.parametrize("seeded", [False, True], ids=["empty", "seeded"])
@pytest.mark.parametrize("page", nav.PAGES, ids=lambda p: p.path)
def test_every_page_runs_without_app(
    page: nav.PageSpec, seeded: bool, seed: Callable[[], None]
) -> None:
    """DESIGN §8 pitfall: a page must not depend on widgets created in app.py."""
    if seeded:
        seed()
    at = AppTest.from_file(str(ROOT / page.path), default_timeout=TIMEOUT).run()
    _no_exception(at)


def test_sidebar_shows_masked_store_url(db_url: str) -> None:
    at = _run_app()
    assert at.sidebar.code[0].value == db_url
    assert at.sidebar.button(key="refresh_data") is not None


def test_empty_store_names_the_commands_that_fill_it(db_url: str) -> None:
    at = _run_app()
    _no_exception(at)
    commands = "\n".join(c.value for c in at.main.code)
    assert "servescope demo" in commands
    assert "servescope bench --endpoint" in commands
    assert "--workload mixed --concurrency 1,8,32" in commands
    assert "servescope sim" in commands
    assert len(at.dataframe) == 0


def test_seeded_store_shows_overview_latest_runs_and_detail(seeded_url: str) -> None:
    at = _run_app()
    _no_exception(at)
    overview = _table(at, "runs")
    assert set(zip(overview["source"], overview["framework"], strict=True)) == {
        ("servescope", "sim"),
        ("vllm-bench", "vllm"),
        ("servescope", "—"),  # the empty run has no framework
    }
    runs = _table(at, "client-bound")
    assert list(runs["name"]) == ["sim c=8", "**bold** <b>x</b> [link](http://evil)", "run-empty"]
    assert list(runs["requests"]) == [152, 20, 0]
    assert list(runs["errors"]) == [2, 0, 0]
    assert runs["client-bound"].iloc[0] == ""
    assert runs["client-bound"].iloc[1].startswith("⚠ client-bound")
    assert list(runs["load"]) == ["c=8", "4 req/s poisson", "—"]
    # the newest run is selected by default and put in the URL
    assert at.selectbox(key="run_select").value == "run-sim"
    assert at.query_params["run"] in ("run-sim", ["run-sim"])
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Requests"] == "150 ok / 152"
    assert metrics["Output throughput"] == "125.0 tok/s"  # 150 × 50 tokens / 60 s
    assert metrics["Per GPU"] == "62.5 tok/s"
    assert any("client-bound" in w.value.lower() for w in at.warning)  # the table's banner


def test_latency_table_marks_low_confidence_p99(seeded_url: str) -> None:
    at = _run_app(run="run-import")
    _no_exception(at)
    assert at.selectbox(key="run_select").value == "run-import"
    table = _table(at, "P99 confidence")
    ttft = table.set_index("metric").loc["TTFT"]
    assert ttft["samples"] == 20
    assert ttft["P99 confidence"].startswith("low")

    at = _run_app(run="run-sim")
    table = _table(at, "P99 confidence")
    by_metric = table.set_index("metric")
    assert by_metric.loc["TTFT", "samples"] == 150
    assert by_metric.loc["TTFT", "P99 confidence"] == "ok"
    assert by_metric.loc["ITL (pooled)", "samples"] == 450


def test_picking_a_run_updates_the_url(seeded_url: str) -> None:
    at = _run_app()
    at.selectbox(key="run_select").select("run-import").run()
    _no_exception(at)
    assert at.query_params["run"] in ("run-import", ["run-import"])
    # data from the run is escaped where it reaches Markdown
    reasons = [w.value for w in at.warning if w.value.startswith("Client-bound:")]
    assert len(reasons) == 1
    assert "[see](http" not in reasons[0]
    assert r"\[see\]\(http\:\/\/evil\)" in reasons[0]
    assert "<i>" not in reasons[0]


def test_unknown_run_in_url_falls_back_to_newest(seeded_url: str) -> None:
    at = _run_app(run="no-such-run")
    _no_exception(at)
    assert at.selectbox(key="run_select").value == "run-sim"


def test_refresh_button_rereads_the_store(seed: Callable[[], None]) -> None:
    at = _run_app()
    assert len(at.dataframe) == 0
    seed()
    fresh = _run_app()
    assert len(fresh.dataframe) == 0, "results stay cached until refreshed"
    # (AppTest reruns only the page after the first run, so click on a fresh first run.)
    fresh.sidebar.button(key="refresh_data").click().run()
    _no_exception(fresh)
    assert len(_table(fresh, "client-bound")) == 3


def test_store_errors_are_shown_not_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVESCOPE_DB", "nosuchdialect://user:secret@host/db")
    at = _run_app()
    _no_exception(at)
    assert len(at.error) == 1
    assert "store" in at.error[0].value.lower()
    assert "secret" not in at.error[0].value
    assert "secret" not in at.sidebar.code[0].value
