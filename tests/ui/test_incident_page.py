"""AppTest of pages/incident.py: the form with no parameters (defaults: the last 15 minutes of
the newest target; submitting writes the URL), a saturation window named as pattern 1 with its
numbers, bad parameters as one message naming the parameter, an empty window, and the figures."""

from __future__ import annotations

from pathlib import Path

import pytest
from incident_store import SPAN, T0, TARGET, store_episode
from streamlit.testing.v1 import AppTest

from services.views.incident import IncidentRequest, incident_view
from store.lifecycle import open_store
from ui import display, incident_charts

ROOT = Path(__file__).resolve().parents[2]
PAGE = str(ROOT / "pages" / "incident.py")
DURING = {"target": TARGET, "from": str(int(T0 + SPAN)), "to": str(int(T0 + 2 * SPAN))}


def _run(params: dict[str, str] | None = None) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=60)
    for key, value in (params or {}).items():
        at.query_params[key] = value
    at.run()
    assert [e.value for e in at.exception] == []
    return at


def _text(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    parts += [a.value for a in (*at.error, *at.warning, *at.info, *at.success)]
    return "\n".join(str(p) for p in parts)


def test_an_empty_store_says_how_to_fill_it(db_url: str) -> None:
    at = _run()
    assert "No watched engine in the store yet" in _text(at)
    assert not at.get("plotly_chart")


def test_no_parameters_show_the_form_with_the_newest_targets_last_quarter_hour(
    db_url: str,
) -> None:
    store_episode(db_url)
    at = _run()
    assert at.selectbox(key="incident_target").value == TARGET
    assert at.text_input(key="incident_from").value == "2030-03-17T18:01:40Z"  # T0 + 900
    assert at.text_input(key="incident_to").value == "2030-03-17T18:16:40Z"  # T0 + 1800
    assert not at.get("plotly_chart")
    # submitting the form writes the window into the URL, as whole epoch seconds
    at.text_input(key="incident_from").set_value("2030-03-17T18:00:00Z")
    at.button[0].click().run()
    assert at.query_params["from"] in ("1900000800", ["1900000800"])
    assert at.query_params["to"] in ("1900001800", ["1900001800"])
    assert at.query_params["target"] in (TARGET, [TARGET])
    assert [e.value for e in at.exception] == []
    assert "Memory full and the queue building" in _text(at)


def test_a_saturation_window_names_pattern_1_with_its_numbers(db_url: str) -> None:
    store_episode(db_url)
    at = _run(DURING)
    text = _text(at)
    assert "1. Memory full and the queue building" in text
    said = "in 100% of the window's samples while up to 45 requests waited"
    assert display.md_escape(said) in text  # Markdown-escaped as every text from data
    assert "/incident?target=http%3A%2F%2F10.0.0.1%3A8000%2Fmetrics&from=1900000900" in "\n".join(
        str(c.value) for c in at.code
    )
    # the findings' evidence tables in rule order (pattern 1 first), then before vs during
    evidence = at.dataframe[0].value
    rows = dict(zip(evidence["evidence"], evidence["value"], strict=True))
    assert rows["samples with KV ≥ 90%"] == "100% of 900"
    assert rows["waiting requests, mean before → during"] == "0.0 → 22.5"
    table = at.dataframe[-1].value.set_index("measure")
    assert table.loc["TTFT P99", "during"] == "9.70 s"
    assert table.loc["TTFT P99", "note"] == (
        "during: P99 inside the 2.5–10 s bucket; before: P99 inside the 0–0.1 s bucket"
    )
    assert len(at.get("plotly_chart")) == 4
    # the form holds the URL's window
    assert at.text_input(key="incident_from").value == "2030-03-17T18:01:40Z"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"target": TARGET, "from": "noon", "to": "1900001800"}, "from='noon' is not a time"),
        ({"target": TARGET, "from": "1900001800", "to": "1900000900"}, "must be before to"),
        ({"target": TARGET}, "from is missing"),
        (
            {"target": "http://elsewhere:1/metrics", "from": "1900000900", "to": "1900001800"},
            f"known targets: {TARGET}",
        ),
    ],
)
def test_bad_parameters_are_one_message(db_url: str, params: dict[str, str], message: str) -> None:
    store_episode(db_url)
    at = _run(params)
    assert len(at.error) == 1 and display.md_escape(message) in at.error[0].value
    assert not at.get("plotly_chart")
    # the form is still there to pick a window
    assert at.text_input(key="incident_from").value


def test_a_window_without_samples_says_so(db_url: str) -> None:
    store_episode(db_url)
    at = _run({"target": TARGET, "from": str(int(T0 + 86_400)), "to": str(int(T0 + 86_460))})
    assert "No engine or GPU sample in this window" in _text(at)
    assert not at.get("plotly_chart")


def test_figures_shade_the_window_and_compare_the_spans(db_url: str) -> None:
    store_episode(db_url)
    store = open_store(db_url)
    try:
        view = incident_view(store, IncidentRequest(TARGET, T0 + SPAN, T0 + 2 * SPAN))
    finally:
        store.dispose()
    latency = incident_charts.latency_chart(view)
    assert len(latency.layout.shapes) == 1  # the window under investigation
    assert {t.name for t in latency.data} >= {"TTFT P99", "E2E latency P99", "queue time P99"}
    split = incident_charts.ttft_split_chart(view)
    queue = next(t for t in split.data if t.name == "queueing")
    assert list(queue.x) == ["before", "during"] and queue.y[1] == pytest.approx(3200.0)
    lengths = incident_charts.prompt_length_chart(view)
    assert len(lengths.data) == 2 and "KS distance 0.00" in lengths.layout.title.text
    state = incident_charts.state_chart(view)
    assert len(state.layout.shapes) == 4  # shaded on each of the four rows
    names = {t.name for t in state.data}
    assert {"running", "waiting", "KV usage", "preemptions/s"} <= names
    assert any(n.endswith("memory") for n in names)
    # one preemption every 10 s during: 0.1/s in each 30 s window, 0 before
    rate = incident_charts.preemption_rate(view)
    assert len(rate) == 60
    assert rate["rate"].iloc[:30].max() == 0.0
    assert rate["rate"].iloc[31:].to_numpy() == pytest.approx(0.1)
