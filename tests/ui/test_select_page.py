"""AppTest: the Select page. The ranking follows the weights and the must-haves (the expected
order computed by the view model on the same store, for the new weights), a score edit and a
preset saved from the page are kept, bad edits are refused with the reason, and the URL carries
the selection. Widgets are found by key."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from streamlit.testing.v1 import AppTest

from services.views.select import SelectSelection, select_view
from store import checklist as checklist_store
from store.lifecycle import open_store

ROOT = Path(__file__).resolve().parents[2]
PAGE = str(ROOT / "pages" / "select.py")
TIMEOUT = 60


def _run(**query: str) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT)
    for key, value in query.items():
        at.query_params[key] = value
    return at.run()


def _no_exception(at: AppTest) -> None:
    assert [e.value for e in at.exception] == []
    assert [e.value for e in at.error] == []


#: A column only each table has (AppTest does not expose a dataframe's key).
_MARKERS = {
    "ranking": "Score (0–5)",
    "evidence": "Best SLO capacity",
    "history": "By",
}


def _table(at: AppTest, name: str) -> pd.DataFrame:
    return next(d.value for d in at.dataframe if _MARKERS[name] in d.value.columns)


def _ranking(at: AppTest) -> list[str]:
    return [str(f) for f in _table(at, "ranking")["Framework"]]


def _expected(url: str, selection: SelectSelection) -> list[str]:
    store = open_store(url)
    try:
        view = select_view(store, selection)
    finally:
        store.dispose()
    return [view.framework_label(r.framework) for r in view.ranking.rows]


def test_the_page_ranks_the_checklist_on_an_empty_store(db_url: str) -> None:
    at = _run()
    _no_exception(at)
    assert _ranking(at) == _expected(db_url, SelectSelection())
    assert len(_ranking(at)) == 8
    assert at.selectbox(key="select_preset").value == "online-chat"
    evidence = _table(at, "evidence")
    assert set(evidence["Best SLO capacity"]) == {"no measurements"}
    assert "ranks first" in " ".join(m.value for m in at.markdown)
    assert len(at.get("plotly_chart")) == 3


def test_changing_a_weight_changes_the_ranking(db_url: str) -> None:
    at = _run()
    before = _ranking(at)
    at.slider(key="select_w_hardware_breadth").set_value(5.0).run()
    _no_exception(at)
    after = _ranking(at)
    store = open_store(db_url)
    try:
        weights = dict(select_view(store, SelectSelection()).weights) | {"hardware_breadth": 5.0}
    finally:
        store.dispose()
    assert after == _expected(db_url, SelectSelection(weights=tuple(sorted(weights.items()))))
    assert after != before
    assert "hardware_breadth:5" in at.query_params["w"]


def test_a_must_have_drops_the_frameworks_without_it(db_url: str) -> None:
    at = _run()
    assert "Ollama" in _ranking(at)
    at.multiselect(key="select_must").select("tpu").run()
    _no_exception(at)
    ranked = _ranking(at)
    assert "Ollama" not in ranked and ranked == _expected(
        db_url, SelectSelection(must_have=("tpu",))
    )
    left_out = " ".join(m.value for m in at.markdown)
    assert "Left out by the must-haves" in left_out and "**Ollama** lacks Google TPU" in left_out
    assert at.query_params["must"] == "tpu"


def test_a_preset_from_the_url_brings_its_must_haves(db_url: str) -> None:
    at = _run(preset="edge-cpu")
    _no_exception(at)
    assert at.multiselect(key="select_must").value == ["cpu", "native_binary"]
    assert _ranking(at) == _expected(db_url, SelectSelection(preset="edge-cpu"))
    # switching the preset back forgets them
    at.selectbox(key="select_preset").set_value("online-chat").run()
    assert at.multiselect(key="select_must").value == []
    assert len(_ranking(at)) == 8


def test_a_score_edit_from_the_page_is_kept_and_a_bad_one_refused(db_url: str) -> None:
    at = _run()
    at.selectbox(key="select_edit_framework").set_value("ollama").run()
    at.selectbox(key="select_edit_criterion").set_value("parallelism").run()
    evidence = next(t for t in at.text_input if t.label.startswith("Evidence"))
    evidence.set_value("Edited in the page test.")
    next(b for b in at.button if b.label == "Save score").click().run()
    _no_exception(at)
    store = open_store(db_url)
    try:
        history = checklist_store.score_history(store)
    finally:
        store.dispose()
    assert history[["framework", "criterion", "edited_by"]].iloc[0].tolist() == [
        "ollama",
        "parallelism",
        "dashboard",
    ]
    assert history["evidence"].iloc[0] == "Edited in the page test."
    assert _table(at, "history")["By"].tolist() == ["dashboard"]
    # an empty evidence is refused with the reason, and nothing more is stored
    evidence = next(t for t in at.text_input if t.label.startswith("Evidence"))
    evidence.set_value("")
    next(b for b in at.button if b.label == "Save score").click().run()
    assert any("evidence" in e.value for e in at.error)
    store = open_store(db_url)
    try:
        assert len(checklist_store.score_history(store)) == 1
    finally:
        store.dispose()
