"""The Data page's services on a real DuckDB store: the view (filters' choices, the listing and
its filters), the requests download, uploads through the importer runner (with the new runs'
summaries kept), and the run edits."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from errors import InputError
from services import run_edits, uploads
from services.views.data import LISTING_COLUMNS, DataSelection, data_view, requests_download
from store import ingest, run_figures, runs_table
from store.db import Store
from store.lifecycle import open_store

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@dataclass(frozen=True)
class _Upload:
    """An uploaded file as Streamlit hands it over: a name and its bytes."""

    name: str
    data: bytes

    def getvalue(self) -> bytes:
        return self.data


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(f"duckdb:///{tmp_path / 'store.duckdb'}")
    yield s
    s.dispose()


def _seed(store: Store) -> None:
    ingest.add_run(
        store,
        {
            "run_id": "a",
            "name": "run a",
            "source": "servescope",
            "framework": "sim",
            "model": "m1",
            "started_at": 1_700_000_000.0,
            "tags": ["x", "y"],
        },
    )
    ingest.add_run(
        store,
        {
            "run_id": "b",
            "source": "vllm-bench",
            "framework": "vllm",
            "model": "m2",
            "started_at": 1_600_000_000.0,
            "tool_summary": {"aggregates_only": True},
        },
    )
    ingest.add_requests(
        store,
        pd.DataFrame({"run_id": "a", "seq": range(3), "status": "ok", "ttft_ms": [1.0, 2.0, 3.0]}),
    )


def _upload(*parts: str) -> _Upload:
    path = FIXTURES.joinpath(*parts)
    return _Upload(path.name, path.read_bytes())


def test_an_empty_store(store: Store) -> None:
    view = data_view(store, DataSelection.default())
    assert view.store_empty
    assert view.runs.empty and list(view.runs.columns) == list(LISTING_COLUMNS)


def test_the_listing_and_its_filters(store: Store) -> None:
    _seed(store)
    view = data_view(store, DataSelection.default())
    assert not view.store_empty
    assert view.choices.sources == ("servescope", "vllm-bench")
    assert view.choices.frameworks == ("sim", "vllm")
    assert view.choices.tags == ("x", "y")
    runs = view.runs
    assert list(runs.columns) == list(LISTING_COLUMNS)
    assert runs["run_id"].tolist() == ["a", "b"]  # newest first
    assert runs["requests"].tolist() == [3, 0]
    assert runs["aggregates_only"].tolist() == [False, True]
    assert runs["tags"].tolist() == ["x, y", ""]
    assert runs["started"].iloc[0] == "2023-11-14 22:13"  # 1_700_000_000 s, UTC

    assert data_view(store, DataSelection(sources=("vllm-bench",))).runs["run_id"].tolist() == ["b"]
    assert data_view(store, DataSelection(tag="y")).runs["run_id"].tolist() == ["a"]
    assert data_view(store, DataSelection(models=("nope",))).runs.empty


def test_the_selection_from_the_filter_widgets() -> None:
    assert DataSelection.from_filters(sources=None, tag="") == DataSelection()
    picked = DataSelection.from_filters(sources=["s"], frameworks=("f",), models=[], tag="t")
    assert picked == DataSelection(sources=("s",), frameworks=("f",), tag="t")
    assert hash(picked) == hash(DataSelection(sources=("s",), frameworks=("f",), tag="t"))


def test_requests_download_as_csv_and_parquet(store: Store) -> None:
    _seed(store)
    csv = pd.read_csv(io.BytesIO(requests_download(store, "a", "csv")))
    parquet = pd.read_parquet(io.BytesIO(requests_download(store, "a", "parquet")))
    for frame in (csv, parquet):
        assert frame["seq"].tolist() == [0, 1, 2]
        assert frame["ttft_ms"].tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(InputError, match="csv, parquet"):
        requests_download(store, "a", "xlsx")


def test_uploads_go_through_the_importer_runner(store: Store) -> None:
    files = [_upload("vllm", "detailed_small.json"), _Upload("notes.txt", b"not a result")]
    seen: list[tuple[int, int, str]] = []
    reports = uploads.import_uploads(
        store,
        files,
        framework=" vllm ",
        gpu_name="H100",
        tags="t1, t2, t1",
        progress=lambda i, n, path: seen.append((i, n, path)),
    )
    table = uploads.reports_table(reports)
    assert list(table.columns) == list(uploads.REPORT_COLUMNS)
    by_file = table.set_index("file")
    assert set(by_file.index) == {"detailed_small.json", "notes.txt"}
    ok, failed = by_file.loc["detailed_small.json"], by_file.loc["notes.txt"]
    assert ok["runs"] == 1 and ok["requests"] > 0 and not ok["result"].startswith("FAILED")
    assert failed["result"].startswith("FAILED") and failed["runs"] == 0
    assert seen[-1] == (2, 2, "")
    [run_id] = [r for report in reports for r in report.run_ids]
    record = runs_table.run_record(store, run_id)
    assert record is not None
    assert record["framework"] == "vllm" and record["gpu_name"] == "H100"
    assert record["tags"] == ["t1", "t2"]
    assert run_figures.stored(store, [run_id]) is not None  # prepared right after the import


def test_run_edits(store: Store) -> None:
    _seed(store)
    run_edits.rename_run(store, "a", "  renamed  ")
    run_edits.set_tags(store, "a", " p, q,, p ")
    record = runs_table.run_record(store, "a")
    assert record is not None and record["name"] == "renamed" and record["tags"] == ["p", "q"]
    run_edits.delete_run(store, "a")
    assert runs_table.run_record(store, "a") is None
    assert data_view(store, DataSelection()).runs["run_id"].tolist() == ["b"]


@pytest.mark.parametrize(("text", "tags"), [("", ()), (" a, b,,a ", ("a", "b")), ("one", ("one",))])
def test_parse_tags(text: str, tags: tuple[str, ...]) -> None:
    assert run_edits.parse_tags(text) == tags
