"""AppTest: Tune's download button for the planning-review report. The page offers it under the
recommendation; the report it downloads is built only when clicked (Streamlit's callable
``data``), for the shown sweep and its runs — the same document ``servescope report --sweep``
writes."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest
from tune_sweep import OLD_SWEEP, SWEEP, store_sweep

from services.views.report import ReportRequest
from ui import report

ROOT = Path(__file__).resolve().parents[2]
PAGE = str(ROOT / "pages" / "tune.py")


def _buttons(at: AppTest) -> list[object]:
    return list(at.get("download_button"))


def test_tune_offers_the_report_of_the_shown_sweep(db_url: str) -> None:
    store_sweep(db_url)
    at = AppTest.from_file(PAGE, default_timeout=60)
    at.query_params["sweep"] = SWEEP
    at.run()
    assert [e.value for e in at.exception] == []
    buttons = _buttons(at)
    assert len(buttons) == 1
    assert report.DOWNLOAD_LABEL in str(buttons[0].proto)


def test_the_button_builds_the_report_of_the_sweep_only_when_asked(db_url: str) -> None:
    store_sweep(db_url)
    request = ReportRequest(sweep_id=SWEEP)
    assert report.report_file_name(request) == f"review-{SWEEP}.html"
    assert report.report_file_name(ReportRequest(run_ids=("a/../b c",))) == "review-a-..-b-c.html"
    document = report.build_report(request, db_url)
    assert document.startswith("<!DOCTYPE html>")
    assert "Recommended: max_batch_size=128 max_batched_tokens=2048" in document
    assert OLD_SWEEP not in document


def test_an_empty_store_has_no_button(db_url: str) -> None:
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert [e.value for e in at.exception] == []
    assert _buttons(at) == []
