"""The planning-review report on a real DuckDB store: runs measured by the real sim through the
real load generator (``servescope demo``'s engine, one run renamed ``<script>alert(1)</script>``)
and a sweep stored as the runner stores one (tests/tune_sweep.py).

The document has its sections in order with what fills them, escapes every user text, names no
external resource, and is written atomically; unknown runs, sweeps and profiles are one error
line with a hint, exit 2, and no file.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from tune_sweep import SWEEP, store_sweep

import cli
from errors import ConfigError, InputError
from services import run_edits
from services.commands import demo
from services.commands import report as report_command
from services.views.plan import PlanSpec, headline, plan_view
from services.views.report import ReportRequest, report_data
from services.views.tune import recommendation_for
from store import plans as plans_store
from store.db import Store
from store.lifecycle import open_store
from ui import report as report_html

HOSTILE = "<script>alert(1)</script>"
ENGINE = demo.DemoEngine(
    "tiny", "H100-SXM-80GB", "llama-3.1-8b", "test engine", {"max_batch_size": 4}
)
RUNS = ("demo-tiny-c1", "demo-tiny-c4")
PLAN = "q3 peak"
PLAN_SPEC = PlanSpec(
    model="llama-3.1-8b", peak_qps=20, avg_qps=8, gpus=("H100-SXM-80GB", "A100-SXM-80GB")
)


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store with two sim runs (the first renamed to a script tag) and the Tune sweep."""
    url = f"duckdb:///{tmp_path_factory.mktemp('report') / 'report.duckdb'}"
    store_sweep(url)
    store = open_store(url)
    try:
        written = demo.run_demo(
            store,
            engines=[ENGINE],
            levels=[1, 4],
            requests_per_stream=3,
            max_tokens=48,
            progress=False,
        )
        assert written == list(RUNS)
        run_edits.rename_run(store, RUNS[0], HOSTILE)
        plans_store.save_plan(store, PLAN, PLAN_SPEC.to_json())
    finally:
        store.dispose()
    return url


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url)
    try:
        yield s
    finally:
        s.dispose()


class _Doc(HTMLParser):
    """What a browser's parser sees: elements with their attributes, the text outside
    scripts, the scripts' bodies."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts[-1] += data
        else:
            self.text.append(data)


def _parse(document: str) -> _Doc:
    doc = _Doc()
    doc.feed(document)
    doc.close()
    return doc


def _render(store: Store, request: ReportRequest) -> str:
    return report_html.render_html(report_data(store, request))


def _figure_calls(script: str) -> tuple[Any, Any, Any] | None:
    """(data, layout, config) of the ``Plotly.newPlot`` call in a figure's script."""
    start = script.find("Plotly.newPlot(")
    if start < 0:
        return None
    rest = script[start + len("Plotly.newPlot(") :]
    decoder = json.JSONDecoder()
    parts: list[Any] = []
    pos = 0
    for _ in range(4):  # the div id, data, layout, config
        while rest[pos] in " \n\t,":
            pos += 1
        value, pos = decoder.raw_decode(rest, pos)
        parts.append(value)
    return parts[1], parts[2], parts[3]


def test_the_report_has_its_sections_in_order_with_the_pages_figures(store: Store) -> None:
    request = ReportRequest(run_ids=RUNS, sweep_id=SWEEP, title="Q3 review")
    document = _render(store, request)
    doc = _parse(document)
    sections = [a.get("id") for t, a in doc.tags if t == "section"]
    assert sections == [
        "summary",
        "checklist",
        "slo",
        "latency",
        "memory",
        "recommendation",
        "plan",
    ]
    toc = [a.get("href") for t, a in doc.tags if t == "a"]
    assert toc == [f"#{s}" for s in sections]
    text = " ".join(" ".join(doc.text).split())
    # Tune's own headline for the sweep, the checklist's leader, Compare's SLO verdicts
    assert recommendation_for(store, SWEEP).headline() in text
    data = report_data(store, request)
    assert data.checklist is not None and data.checklist.ranking.leader is not None
    leader = data.checklist.framework_label(data.checklist.ranking.leader)
    assert f"{leader} ranks first" in text
    assert "SLO (interactive-chat): 2 of 2 runs pass." in text
    # one figure per chart: the checklist's bar, P99 by input per run, memory per run, the
    # recommendation's Pareto and search curves
    # (a run's memory chart only when the sim's /metrics was scraped during it: short runs
    # may have no sample, and then the section says so)
    sampled = sum(1 for m in data.memory if m.has_samples)
    assert sampled >= 1
    figures = [a.get("id") for t, a in doc.tags if "plotly-graph-div" in (a.get("class") or "")]
    assert figures == [f"figure-{i}" for i in range(1, 1 + 1 + 2 + sampled + 2)]
    for m in data.memory:
        assert m.note in text if m.note else m.has_samples
    # Plotly's JavaScript once, inline; the plan section says what would fill it
    assert document.count("Plotly.newPlot(") == len(figures)
    bundle = report_html.plotly_js()
    assert [s for s in doc.scripts if len(s) >= len(bundle)] == [bundle]
    assert report_html.FILL["plan"] in text
    assert "Generated " in text and "store duckdb:///" in text


def test_every_user_text_is_escaped(store: Store) -> None:
    title = "</script><script>alert(2)</script><!--"
    document = _render(store, ReportRequest(run_ids=RUNS, title=title))
    assert HOSTILE not in document
    doc = _parse(document)
    # the hostile name is text (the summary, the SLO table, each run's headings) …
    text = " ".join(doc.text)
    assert text.count(HOSTILE) >= 4
    assert title in text
    # … and never a script: only the metadata, Plotly's bundle and one script per figure
    n_figures = document.count("Plotly.newPlot(")
    scripts = [a for t, a in doc.tags if t == "script"]
    assert len(scripts) == 2 + n_figures
    assert all(a.get("src") is None for a in scripts)
    for body in doc.scripts:  # none can open, end or comment out a script
        assert "<script" not in body.lower() and "</script" not in body.lower()
        assert "<!--" not in body
    meta = next(a for t, a in doc.tags if t == "script" and a.get("id") == "report-meta")
    assert meta.get("type") == "application/json"
    meta_json = json.loads(doc.scripts[0])
    assert meta_json["title"] == title
    assert meta_json["runs"] == list(RUNS)


def test_the_document_names_no_external_resource(store: Store) -> None:
    document = _render(store, ReportRequest(run_ids=RUNS, sweep_id=SWEEP))
    doc = _parse(document)
    url = re.compile(r"^\s*(https?:)?//|^\s*[a-z][a-z0-9+.-]*:", re.IGNORECASE)
    for tag, attrs in doc.tags:
        assert tag not in ("link", "img", "iframe", "object", "embed", "base"), tag
        for name in ("src", "href", "action", "data", "poster", "srcset"):
            value = attrs.get(name)
            if value is not None:
                assert not url.search(value), f"<{tag} {name}={value!r}>"
        assert "url(" not in (attrs.get("style") or "")
    assert "@import" not in document and "url(http" not in document
    calls = [c for c in (_figure_calls(s) for s in doc.scripts) if c is not None]
    assert len(calls) == document.count('class="plotly-graph-div"') >= 6
    for _, layout, config in calls:
        assert config == {"displaylogo": False, "showSendToCloud": False, "responsive": True}
        assert not re.search(r"https?:", json.dumps(config))
        assert "images" not in layout and "mapbox" not in layout
    assert not re.search(r"https?:", json.dumps(report_html.FIGURE_CONFIG))


def test_a_sweep_alone_reports_its_probe_runs(store: Store) -> None:
    data = report_data(store, ReportRequest(sweep_id=SWEEP))
    assert data.tune is not None and data.tune.curves["run_id"].notna().all()
    expected = list(dict.fromkeys(data.tune.curves["run_id"].astype(str)))
    assert [str(r) for r in data.runs["run_id"]] == expected
    assert [r.run_id for r in data.latency] == expected
    assert data.slo is not None and len(data.slo.rows) == len(expected)
    document = report_html.render_html(data)
    text = " ".join(_parse(document).text)
    # the sweep's runs have no engine samples: the memory section says what would fill it
    assert report_html.FILL["memory"] in " ".join(text.split())


def test_a_saved_plan_fills_the_capacity_plan_as_the_plan_page_computes_it(
    store: Store,
) -> None:
    expected = headline(plan_view(store, PLAN_SPEC))
    for request in (
        ReportRequest(plan_name=PLAN),
        ReportRequest(plan_spec_json=PLAN_SPEC.to_json()),
    ):
        data = report_data(store, request)
        assert data.plan is not None and data.plan.view.options
        document = report_html.render_html(data)
        doc = _parse(document)
        text = " ".join(" ".join(doc.text).split())
        assert expected in text
        assert ("Capacity plan q3 peak: " in text) == (request.plan_name is not None)
        # the plan's GPUs, cost and memory charts, and its inputs and options tables
        assert document.count("Plotly.newPlot(") == 1 + 3  # the checklist's and the plan's
        assert "H100-SXM-80GB, A100-SXM-80GB" in text
        assert "Capacity / replica (req/s)" in text and "Max sequences" in text


def test_a_plan_spec_that_is_not_json_is_an_input_error(store: Store) -> None:
    with pytest.raises(InputError, match="not JSON"):
        report_data(store, ReportRequest(plan_spec_json="{model: 8b"))
    with pytest.raises(InputError, match="unknown keys: gpu_count"):
        report_data(store, ReportRequest(plan_spec_json='{"gpu_count": 8}'))


def test_sections_without_data_say_what_would_fill_them(store: Store) -> None:
    document = _render(store, ReportRequest(run_ids=(RUNS[1],)))
    text = " ".join(" ".join(_parse(document).text).split())
    assert report_html.FILL["recommendation"] in text
    assert report_html.FILL["plan"] in text
    assert report_html.FILL["slo"] not in text  # the run fills the SLO table


@pytest.mark.parametrize(
    ("request_", "named", "hint"),
    [
        (ReportRequest(run_ids=(RUNS[1], "nope-1")), "unknown run 'nope-1'", "servescope db runs"),
        (ReportRequest(run_ids=(RUNS[1],), sweep_id="sw-nope"), "unknown sweep 'sw-nope'", SWEEP),
        (ReportRequest(run_ids=(RUNS[1],), slo="no-such"), "unknown SLO profile", "interactive"),
        (ReportRequest(plan_name="q4"), "unknown plan 'q4'", f"saved plans: {PLAN}"),
    ],
)
def test_unknown_names_are_config_errors_that_say_where_the_valid_ones_are(
    store: Store, request_: ReportRequest, named: str, hint: str
) -> None:
    with pytest.raises(ConfigError) as info:
        report_data(store, request_)
    assert named in info.value.message
    assert info.value.hint is not None and hint in info.value.hint


def test_the_command_writes_the_file_and_prints_its_size(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "review.html"
    runs = f"{RUNS[0]},{RUNS[1]}"  # comma-separated works as well as space-separated
    rc = cli.main(
        ["report", "--db", store_url, "--runs", runs, "--sweep", SWEEP, "--out", str(out)]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    size = out.stat().st_size
    assert f"wrote {out}" in printed and f"({size:,} bytes)" in printed
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["review.html"]  # no temp file left


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--runs", "nope-1"], "servescope: error: unknown run 'nope-1'"),
        (["--runs", RUNS[1], "--sweep", "sw-nope"], "servescope: error: unknown sweep 'sw-nope'"),
        (["--runs", RUNS[1], "--plan", "x", "--plan-spec", "y"], "the plan is given twice"),
        (["--title", "t"], "servescope: error: nothing to report"),
    ],
)
def test_bad_input_is_one_error_line_exit_2_and_the_old_file_stays(
    store_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    out = tmp_path / "review.html"
    out.write_text("the previous report", encoding="utf-8")
    rc = cli.main(["report", "--db", store_url, *argv, "--out", str(out)])
    assert rc == 2
    err = capsys.readouterr().err
    assert message in err and "  hint: " in err
    assert out.read_text(encoding="utf-8") == "the previous report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["review.html"]


def test_a_missing_out_folder_is_refused_before_anything_is_built(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "no-such-folder" / "review.html"
    rc = cli.main(["report", "--db", store_url, "--runs", RUNS[1], "--out", str(out)])
    assert rc == 2
    assert "the folder" in capsys.readouterr().err and not out.parent.exists()


def test_a_failed_build_leaves_the_old_file_and_no_temporary_one(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "review.html"
    out.write_text("the previous report", encoding="utf-8")

    def broken(_: Any) -> str:
        raise RuntimeError("renderer failed")

    with pytest.raises(RuntimeError):
        report_command.write_report(store, ReportRequest(run_ids=RUNS), out, broken)
    assert out.read_text(encoding="utf-8") == "the previous report"

    assert sorted(p.name for p in tmp_path.iterdir()) == ["review.html"]

    def no_rename(src: str, dst: Path) -> None:
        assert Path(src).read_text(encoding="utf-8") == "the new report"  # written in full
        raise OSError("rename failed")

    with monkeypatch.context() as m:
        m.setattr(report_command.os, "replace", no_rename)
        with pytest.raises(OSError, match="rename failed"):
            report_command.write_atomically(out, "the new report")
    assert out.read_text(encoding="utf-8") == "the previous report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["review.html"]
    size = report_command.write_report(store, ReportRequest(run_ids=RUNS), out, lambda d: d.title)
    assert out.read_text(encoding="utf-8") == "Planning review" and size == len("Planning review")


def test_list_flags_parse_as_ids() -> None:
    ns = argparse.Namespace(
        runs=["a,b", "c"], sweep=None, plan=None, plan_spec=None, title=None, slo=None
    )
    assert report_command.request_from_args(ns).run_ids == ("a", "b", "c")
