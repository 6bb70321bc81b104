"""Hostile files against a real DuckDB store (issue 10, items 3 and 4): one bad file never stops
a batch, never raises, and never leaves a row behind; the good files of the batch are stored
whole and the CLI ends with its summary."""

from __future__ import annotations

import argparse
import copy
import io
import json
import math
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors.importers import ImportOptions, Source, import_paths, parse_sources
from collectors.importers.records import run_id_for
from services.commands import imports
from store import tables
from store.db import Store
from store.lifecycle import open_store

LOCAL = Path(__file__).resolve().parents[1] / "fixtures"
GOOD_VLLM = json.loads((LOCAL / "vllm" / "detailed_small.json").read_text())
SGLANG_LINE = json.loads((LOCAL / "sglang" / "output_details.jsonl").read_text().splitlines()[0])
NAN = float("nan")
RUN_TABLES = ("runs", "requests", "token_gaps")


def _vllm(**changes: object) -> str:
    return json.dumps({**GOOD_VLLM, **changes})


def _cli(paths: list[Path], url: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    imports.register(parser.add_subparsers())
    args = parser.parse_args(["import", *map(str, paths), "--db", url])
    out, err = io.StringIO(), io.StringIO()
    code = imports.run(args, out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated, empty DuckDB file; each test copies it (migrating a new file for every
    hypothesis example would dominate the test's time)."""
    path = tmp_path_factory.mktemp("empty") / "empty.duckdb"
    open_store(f"duckdb:///{path}").dispose()
    return path


def _fresh_store(empty: Path, folder: Path) -> Store:
    target = folder / "store.duckdb"
    shutil.copyfile(empty, target)
    return open_store(f"duckdb:///{target}")


def _rows(store: Store, run_ids: list[str]) -> dict[str, int]:
    """Rows of ``run_ids`` in each table that holds per-run rows."""
    if not run_ids:
        return dict.fromkeys(RUN_TABLES, 0)
    ids = ", ".join(f"'{r}'" for r in run_ids)
    return {
        table: int(
            store.read_df(f"SELECT count(*) AS n FROM {table} WHERE run_id IN ({ids})")["n"][0]
        )
        for table in RUN_TABLES
    }


def test_folder_with_nan_gap_and_huge_length_imports_the_rest_and_prints_the_summary(
    tmp_path: Path,
) -> None:
    """Item 3: NaN inside vLLM's itls used to stop the folder at NOT NULL constraint failed:
    token_gaps.gap_ms, and an output length of 3e9 at a DuckDB INT32 conversion error; the later
    good files were not imported and no summary was printed."""
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "a_nan_gap.json").write_text(
        _vllm(itls=[[0.01, NAN, 0.03], [0.02, 0.02], [0.04], []])
    )
    (folder / "b_huge_length.json").write_text(_vllm(output_lens=[4, 3e9, 2, 0]))
    (folder / "c_good.json").write_text(_vllm(site="c"))
    (folder / "d_good.jsonl").write_text(json.dumps(SGLANG_LINE) + "\n")
    url = f"duckdb:///{tmp_path / 'store.duckdb'}"
    code, out, err = _cli([folder], url)
    assert code == 1
    errors = err.strip().splitlines()
    assert len(errors) == 2
    assert "a_nan_gap.json: key 'itls[0][1]': found NaN" in errors[0]
    assert "b_huge_length.json: key 'output_lens[1]': found 3000000000" in errors[1]
    assert "Traceback" not in err + out
    assert "4 file(s): 2 run(s), 6 request(s) imported; 2 FAILED" in out
    counts = tables.table_counts(open_store(url))
    assert (counts["runs"], counts["requests"], counts["token_gaps"]) == (2, 6, 9)


# --- store-level property: one hostile file beside a good one ---------------------------------

# name → (file name, JSON lines?, a valid document); each has per-request rows and gaps
TEMPLATES: dict[str, tuple[str, bool, object]] = {
    "vllm": ("run.json", False, GOOD_VLLM),
    "sglang": ("run.jsonl", True, SGLANG_LINE),
    "aiperf-records": (
        "profile_export.jsonl",
        True,
        [
            {
                "metadata": {
                    "request_start_ns": 1_735_689_600_000_000_000 + k,
                    "request_end_ns": 1_735_689_600_500_000_000 + k,
                    "turn_index": 0,
                },
                "metrics": {
                    "time_to_first_token": {"value": 100.0, "unit": "ms"},
                    "inter_chunk_latency": {"value": [10.0, 20.0], "unit": "ms"},
                    "output_sequence_length": {"value": 3, "unit": "tokens"},
                },
                "error": None,
            }
            for k in range(2)
        ],
    ),
}
HOSTILE = st.sampled_from(
    [math.nan, math.inf, -math.inf, -1, -0.5, 2**31, 3e9, 10**400, "x", True, None, [1], {}]
) | st.floats(allow_nan=True)


def _places(value: object, prefix: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_places(v, (*prefix, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_places(v, (*prefix, i)))
    return out


def _encode(doc: object, lines: bool) -> bytes:
    if lines:
        items = doc if isinstance(doc, list) else [doc]
        return "".join(json.dumps(item) + "\n" for item in items).encode()
    return json.dumps(doc).encode()


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(fmt=st.sampled_from(sorted(TEMPLATES)), data=st.data())
def test_hostile_file_beside_a_good_one_leaves_no_rows_and_the_good_one_whole(
    empty_store: Path, fmt: str, data: st.DataObject
) -> None:
    name, lines, template = TEMPLATES[fmt]
    place = data.draw(st.sampled_from(_places(template)), label="place")
    value = data.draw(HOSTILE, label="value")
    doc = copy.deepcopy(template)
    parent = doc
    for step in place[:-1]:
        parent = parent[step]  # type: ignore[index]
    parent[place[-1]] = value  # type: ignore[index]
    bad_bytes = _encode(doc, lines)
    good_bytes = _vllm(site="good").encode()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "in"
        folder.mkdir()
        (folder / f"a_{name}").write_bytes(bad_bytes)
        (folder / "b_good.json").write_bytes(good_bytes)
        store = _fresh_store(empty_store, Path(tmp))
        reports = import_paths(store, [folder])  # never raises
        bad, good = reports
        assert good.error is None and (good.runs, good.requests) == (1, 4)
        assert _rows(store, good.run_ids) == {"runs": 1, "requests": 4, "token_gaps": 6}
        bad_ids = [run_id_for(Source.from_bytes("x", bad_bytes).sha256, i) for i in range(4)]
        if bad.error is not None:
            assert "\n" not in bad.error and f"a_{name}" in bad.error
            assert _rows(store, bad_ids) == dict.fromkeys(RUN_TABLES, 0)
        elif not bad.ignored:
            # accepted: stored whole, exactly what the parser produced
            [(_, parsed)] = parse_sources(
                [(Source.from_bytes(name, bad_bytes), True)], ImportOptions()
            )
            assert parsed is not None
            stored = _rows(store, [r.run_id for r in parsed.runs])
            assert stored["runs"] == len(parsed.runs)
            assert stored["requests"] == sum(r.request_count for r in parsed.runs)
            gaps = sum(0 if r.token_gaps is None else len(r.token_gaps) for r in parsed.runs)
            assert stored["token_gaps"] == gaps
        store.dispose()


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"itls": [[0.01, NAN, 0.03], [0.02, 0.02], [0.04], []]}, "itls[0][1]"),
        ({"output_lens": [4, 3e9, 2, 0]}, "output_lens[1]"),
        ({"ttfts": [-0.1, 0.2, 0.05, 0.0]}, "ttfts[0]"),
        ({"duration": -2.0}, "duration"),
    ],
)
def test_replace_with_a_hostile_copy_keeps_the_stored_one_whole(
    empty_store: Path, tmp_path: Path, changes: dict[str, object], key: str
) -> None:
    """--replace of a stored run by an impossible copy: refused, the stored copy untouched."""
    store = _fresh_store(empty_store, tmp_path)
    good = tmp_path / "good.json"
    good.write_text(_vllm())
    [first] = import_paths(store, [good])
    before = tables.table_counts(store)
    bad = tmp_path / "bad.json"
    bad.write_text(_vllm(**changes))
    [report] = import_paths(store, [bad], ImportOptions(replace=True))
    assert report.error is not None and f"key {key!r}" in report.error
    assert tables.table_counts(store) == before
    assert _rows(store, first.run_ids) == {"runs": 1, "requests": 4, "token_gaps": 6}
