"""AppTest for pages/data.py on an empty and a seeded store (imported fixtures)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from streamlit.testing.v1 import AppTest

from collectors.importers import import_paths
from store import runs_table
from store.lifecycle import open_store

ROOT = Path(__file__).resolve().parents[2]
PAGE = str(ROOT / "pages" / "data.py")
FIXTURES = ROOT / "tests" / "fixtures"


def _run() -> AppTest:
    return AppTest.from_file(PAGE, default_timeout=60).run()


def _runs(at: AppTest) -> pd.DataFrame:
    """The runs table, found by its content (a run_id column), not by position."""
    found = [df.value for df in at.dataframe if "run_id" in df.value.columns]
    assert found, "no runs table"
    return found[0]


def _seed(url: str) -> list[str]:
    store = open_store(url)
    reports = import_paths(store, [FIXTURES / "vllm", FIXTURES / "sglang"])
    store.dispose()
    return [rid for r in reports for rid in r.run_ids]


def test_empty_store_says_how_to_fill_it(db_url: str) -> None:
    at = _run()
    assert not at.exception
    assert any("servescope import" in i.value for i in at.info)
    assert at.button(key="data_import").disabled  # nothing uploaded yet


def test_seeded_store_lists_and_filters_runs(db_url: str) -> None:
    ids = _seed(db_url)
    at = _run()
    assert not at.exception
    table = _runs(at)
    assert set(table["run_id"]) == set(ids)
    assert table["aggregates_only"].any()  # the legacy vLLM file
    at.multiselect(key="data_f_source").select("sglang-bench").run()
    assert set(_runs(at)["source"]) == {"sglang-bench"}


def test_rename_tag_and_delete_with_confirmation(db_url: str) -> None:
    _seed(db_url)
    at = _run()
    run_id = _runs(at)["run_id"].iloc[0]
    at.text_input(key=f"data_name_{run_id}").input("renamed run")
    at.button(key="data_rename").click().run()
    at.text_input(key=f"data_tags_{run_id}").input("a, b")
    at.button(key="data_save_tags").click().run()
    store = open_store(db_url)
    record = runs_table.run_record(store, run_id)
    assert record is not None and record["name"] == "renamed run" and record["tags"] == ["a", "b"]
    assert at.button(key="data_delete").disabled  # confirmation first
    at.checkbox(key="data_confirm").check().run()
    at.button(key="data_delete").click().run()
    assert not at.exception
    assert runs_table.run_record(store, run_id) is None
