"""Malformed inputs give one-line errors naming the file and the problem, and leave the store
unchanged; a batch continues past a bad file; the CLI exits non-zero."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pandas as pd
import pytest

from collectors.importers import ImportOptions, Source, command, import_paths, parse_sources, runner
from collectors.importers.model import ParsedFile
from collectors.importers.runner import FileReport
from store import queries_admin
from store.db import Store

LOCAL = Path(__file__).resolve().parents[1] / "fixtures"
GOOD_VLLM = (LOCAL / "vllm" / "detailed_small.json").read_text()


def _vllm(**changes: object) -> str:
    doc = json.loads(GOOD_VLLM)
    for key, value in changes.items():
        if value is KeyError:
            del doc[key]
        else:
            doc[key] = value
    return json.dumps(doc)


CASES: dict[str, tuple[bytes, str]] = {
    "empty": (b"", "empty file"),
    "whitespace": (b"  \n\n", "empty file"),
    "binary": (bytes(range(256)) * 4, "binary data"),
    "not utf8": (b"\xff\xfe\xfa not text at all \x80\x81", "binary data"),
    "truncated": (GOOD_VLLM[: len(GOOD_VLLM) // 2].encode(), "truncated"),
    "wrong type": (_vllm(ttfts="fast").encode(), "key 'ttfts': expected an array but found str"),
    "wrong element": (_vllm(ttfts=[0.1, "x", 0.2, 0]).encode(), "key 'ttfts[1]'"),
    "wrong length": (_vllm(output_lens=[1, 2]).encode(), "expected 4 entries"),
    "gap not a number": (
        _vllm(itls=[[0.01, "soon"], [0.02], [0.04], []]).encode(),
        "key 'itls[0][1]': expected a number",
    ),
    "missing key": (_vllm(num_prompts=KeyError).encode(), "not a recognised result file"),
    "missing itls": (_vllm(itls=KeyError).encode(), "key 'itls': required key is missing"),
    "unknown json": (b'{"hello": "world"}', "not a recognised result file"),
    "csv wrong table": (
        b"name,ttft,e2e\r\na,1,2\r\n",
        "not a recognised result file: found a CSV table with header 'name,ttft,e2e'",
    ),
    "jsonl bad line": (
        (LOCAL / "sglang" / "output_details.jsonl").read_bytes() + b'{"backend": "sglang", oops\n',
        "line 2 column",
    ),
}


@pytest.fixture
def store() -> Store:
    return Store.memory()


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_file_is_one_line_error_and_store_unchanged(
    case: str, store: Store, tmp_path: Path
) -> None:
    data, expected = CASES[case]
    path = tmp_path / f"{case.replace(' ', '_')}.json"
    path.write_bytes(data)
    before = queries_admin.table_counts(store)
    [report] = import_paths(store, [path])
    assert report.error is not None
    assert str(path) in report.error and expected in report.error
    assert "\n" not in report.error
    assert queries_admin.table_counts(store) == before


def test_csv_with_the_wrong_table_forced_as_summary(store: Store, tmp_path: Path) -> None:
    """AIPerf's records CSV read as if it were the summary table."""
    path = tmp_path / "records.csv"
    path.write_text("request_num,request_start_ns\r\n0,1\r\n")
    [report] = import_paths(store, [path], ImportOptions(format="aiperf-csv"))
    assert report.error is not None and "expected the summary table 'Metric,avg" in report.error


def test_unknown_format_name_lists_the_choices(store: Store) -> None:
    with pytest.raises(Exception, match="available: vllm-bench, sglang-bench"):
        import_paths(store, [LOCAL / "vllm"], ImportOptions(format="nope"))


def test_batch_continues_past_bad_file_and_cli_exits_nonzero(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"date": ')
    url = f"duckdb:///{tmp_path / 's.duckdb'}"
    parser = argparse.ArgumentParser()
    command.register(parser.add_subparsers())
    args = parser.parse_args(
        [
            "import",
            str(bad),
            str(LOCAL / "vllm" / "detailed_small.json"),
            "--db",
            url,
            "--tag",
            "t1",
        ]
    )
    out, err = io.StringIO(), io.StringIO()
    assert command.run(args, out, err) == 1
    assert "bad.json" in err.getvalue() and len(err.getvalue().strip().splitlines()) == 1
    assert "detailed_small.json" in out.getvalue() and "1 FAILED" in out.getvalue()
    store = Store.open(url)
    assert queries_admin.table_counts(store)["requests"] == 4  # the good file still imported


def test_folder_ignores_files_that_are_not_results(store: Store, tmp_path: Path) -> None:
    (tmp_path / "inputs.json").write_text('{"data": []}')
    (tmp_path / "notes.md").write_text("# not imported")
    (tmp_path / "run.json").write_text(GOOD_VLLM)
    reports = import_paths(store, [tmp_path])
    assert [r.error for r in reports] == [None, None]
    assert [r.ignored for r in reports] == [True, False]


@pytest.mark.slow
def test_200mb_truncated_file_fails_cleanly(store: Store, tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    with big.open("w") as fh:
        fh.write('{"date": "20250101-000000", "num_prompts": 1, "itls": [')
        chunk = ",".join(["[0.01, 0.02, 0.03, 0.04]"] * 10_000)
        while fh.tell() < 200_000_000:
            fh.write(chunk + ",")
    before = queries_admin.table_counts(store)
    [report] = import_paths(store, [big])
    assert report.error is not None and "truncated" in report.error and "big.json" in report.error
    assert queries_admin.table_counts(store) == before


def test_parse_sources_touches_no_store() -> None:
    src = Source.from_bytes("mem.json", GOOD_VLLM.encode())
    [(report, parsed)] = parse_sources([(src, True)], ImportOptions())
    assert report.error is None and parsed is not None and parsed.runs[0].request_count == 4


# --- one transaction per import unit ---------------------------------------------------------


UNIT_FILES = ("detailed_small.json", "append_two_runs.jsonl")


def _runs_with_bad_samples() -> list[tuple[FileReport, ParsedFile | None]]:
    """One parsed unit of three runs (one with requests and gaps) whose sample table the store
    refuses. The sample rows are written last in the transaction, after every run's rows, so a
    store that kept the work done before a failure would be left holding three runs."""
    units = parse_sources(
        [(Source.read(LOCAL / "vllm" / name), True) for name in UNIT_FILES], ImportOptions()
    )
    parsed = units[0][1]
    assert parsed is not None and units[1][1] is not None
    parsed.runs.extend(units[1][1].runs)
    assert len(parsed.runs) == 3 and parsed.runs[0].request_count == 4
    parsed.samples["gpu_samples"] = pd.DataFrame(
        {"host": ["h"], "gpu_index": [0], "ts": [1.0], "no_such_column": [1]}
    )
    return [units[0]]


def test_unit_failing_at_write_leaves_the_store_unchanged(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "parse_sources", lambda *a, **k: _runs_with_bad_samples())
    before = queries_admin.table_counts(store)
    [report] = runner.import_sources(store, [], ImportOptions())
    assert report.error is not None and "not stored" in report.error
    assert "no_such_column" in report.error and "detailed_small.json" in report.error
    assert (report.runs, report.requests, report.samples) == (0, 0, 0)
    assert queries_admin.table_counts(store) == before


def test_failing_replace_keeps_the_earlier_copy_whole(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    reports = import_paths(store, [LOCAL / "vllm" / name for name in UNIT_FILES])
    assert [(r.error, r.runs) for r in reports] == [(None, 1), (None, 2)]
    stored = queries_admin.table_counts(store)
    units = _runs_with_bad_samples()
    parsed = units[0][1]
    assert parsed is not None
    # the new copy differs from the stored one (2 of its 4 requests, no gaps), so a replacement
    # committed before the failure would show in the counts
    first = parsed.runs[0]
    first.requests = None if first.requests is None else first.requests.iloc[:2]
    first.token_gaps = None
    monkeypatch.setattr(runner, "parse_sources", lambda *a, **k: units)
    [report] = runner.import_sources(store, [], ImportOptions(replace=True))
    assert report.error is not None
    assert queries_admin.table_counts(store) == stored


def test_reimport_skips_and_replace_rewrites_in_one_go(store: Store) -> None:
    path = LOCAL / "vllm" / "detailed_small.json"
    [first] = import_paths(store, [path])
    assert (first.runs, first.requests) == (1, 4)
    counts = queries_admin.table_counts(store)
    assert counts["requests"] == 4 and counts["token_gaps"] > 0
    [again] = import_paths(store, [path])
    assert (again.runs, again.skipped_runs, again.requests) == (0, 1, 0)
    assert any("already imported" in w for w in again.warnings)
    [replaced] = import_paths(store, [path], ImportOptions(replace=True))
    assert (replaced.runs, replaced.skipped_runs, replaced.requests) == (1, 0, 4)
    assert queries_admin.table_counts(store) == counts
