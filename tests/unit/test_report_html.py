"""ui.report's escaping, without a store: text into HTML, JSON into a script, tables, and the
downloaded file's name."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from services.views.report import ReportRequest
from ui import report

HOSTILE = ("</script><script>alert(1)</script>", "<!--<script>", "a & b \"'", "\u2028x\u2029")


@pytest.mark.parametrize("text", HOSTILE)
def test_script_json_cannot_end_or_comment_out_its_script_and_round_trips(text: str) -> None:
    encoded = report.script_json({"title": text, "runs": [text]})
    assert "<" not in encoded and ">" not in encoded and "&" not in encoded
    assert "\u2028" not in encoded and "\u2029" not in encoded
    assert json.loads(encoded) == {"title": text, "runs": [text]}


@pytest.mark.parametrize("text", HOSTILE)
def test_text_and_tables_are_escaped(text: str) -> None:
    assert "<" not in report.esc(text) and '"' not in report.esc(text)
    html = report.table(pd.DataFrame({text: [text, None, 1234.5, 3, True]}))
    assert html.count(report.esc(text)) == 2  # the header and the first cell, as text
    assert "<script" not in html and "<!--" not in html
    assert html.count("<td>") == 5 and html.count("<th>") == 1
    assert "<td>—</td>" in html and "<td>1,234</td>" in html and "<td>yes</td>" in html


def test_the_file_name_keeps_only_safe_characters() -> None:
    assert report.report_file_name(ReportRequest(sweep_id="sw-1")) == "review-sw-1.html"
    assert report.report_file_name(ReportRequest(plan_name="../q3 <b>")) == "review-q3--b.html"
    assert report.report_file_name(ReportRequest(plan_spec_json="{}")) == "review.html"


def test_the_request_drops_blank_and_repeated_run_ids() -> None:
    assert ReportRequest(run_ids=("a", " a ", "", "b")).run_ids == ("a", "b")
