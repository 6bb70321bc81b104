"""Malformed inputs give one-line errors naming the file and the problem, and leave the store
unchanged; a batch continues past a bad file; the CLI exits non-zero."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pandas as pd
import pytest

from collectors.importers import ImportOptions, Source, import_paths, parse_sources, runner
from collectors.importers.model import ParsedFile
from collectors.importers.runner import FileReport
from services.commands import imports
from store import tables
from store.db import Store
from store.lifecycle import memory_store, open_store

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


NAN, INF = float("nan"), float("inf")
SGLANG_LINE = json.loads((LOCAL / "sglang" / "output_details.jsonl").read_text().splitlines()[0])
LLMPERF = [
    {
        "error_code": None,
        "error_msg": "",
        "ttft_s": 0.1,
        "end_to_end_latency_s": 0.5,
        "number_output_tokens": 10,
        "number_input_tokens": 100,
    }
] * 2
T0 = 1_735_689_600_000_000_000  # epoch ns


def _sglang(**changes: object) -> bytes:
    return (json.dumps({**SGLANG_LINE, **changes}) + "\n").encode()


def _llmperf(**changes: object) -> bytes:
    return json.dumps([{**LLMPERF[0], **changes}, LLMPERF[1]]).encode()


def _aiperf_record(start: int, end: int) -> bytes:
    record = {
        "metadata": {"request_start_ns": start, "request_end_ns": end},
        "metrics": {"time_to_first_token": {"value": 100.0, "unit": "ms"}},
        "error": None,
    }
    return (json.dumps(record) + "\n").encode()


def _guidellm(first_token_time: float) -> bytes:
    request = {"start_time": 1e9, "first_token_time": first_token_time, "end_time": 1e9 + 1}
    bench = {"type_": "generative_benchmark", "metrics": {}, "requests": {"successful": [request]}}
    return json.dumps({"benchmarks": [bench]}).encode()


def _genai_raw(stamps: list[int]) -> bytes:
    request = {"timestamp": T0, "response_timestamps": stamps, "response_outputs": []}
    return json.dumps({"experiments": [{"requests": [request]}]}).encode()


# impossible values (issue 10 item 4): refused, naming the key and the index
IMPOSSIBLE: dict[str, tuple[bytes, str]] = {
    "vllm NaN gap": (
        _vllm(itls=[[0.01, NAN, 0.03], [0.02, 0.02], [0.04], []]).encode(),
        "key 'itls[0][1]': found NaN; expected an inter-token gap",
    ),
    "vllm null gap": (
        _vllm(itls=[[0.01, 0.02, 0.03], [0.02, None], [0.04], []]).encode(),
        "key 'itls[1][1]': found NaN",
    ),
    "vllm negative gap": (
        _vllm(itls=[[0.01, 0.02, 0.03], [0.02, -0.02], [0.04], []]).encode(),
        "key 'itls[1][1]': found -0.02",
    ),
    "vllm huge output length": (
        _vllm(output_lens=[4, 3e9, 2, 0]).encode(),
        "key 'output_lens[1]': found 3000000000; expected a token count, a whole number ≥ 0 "
        "and < 2^31",
    ),
    "vllm negative output length": (
        _vllm(output_lens=[4, 3, -2, 0]).encode(),
        "key 'output_lens[2]': found -2",
    ),
    "vllm fractional input length": (
        _vllm(input_lens=[100, 100.5, 100, 50]).encode(),
        "key 'input_lens[1]': found 100.5",
    ),
    "vllm integer beyond float": (
        _vllm(input_lens=[100, 10**400, 100, 50]).encode(),
        "key 'input_lens[1]': expected a number but found an integer of 1329 bits",
    ),
    "vllm negative ttft": (
        _vllm(ttfts=[-0.1, 0.2, 0.05, 0.0]).encode(),
        "key 'ttfts[0]': found -0.1; expected a latency",
    ),
    "vllm infinite ttft": (
        _vllm(ttfts=[0.1, INF, 0.05, 0.0]).encode(),
        "key 'ttfts[1]': found inf",
    ),
    "vllm minus infinite ttft": (
        _vllm(ttfts=[0.1, 0.2, -INF, 0.0]).encode(),
        "key 'ttfts[2]': found -inf",
    ),
    "vllm negative e2e": (
        _vllm(latencies=[0.16, -0.24, 0.09, 0.0]).encode(),
        "key 'latencies[1]': found -0.24",
    ),
    "vllm e2e shorter than ttft": (
        _vllm(latencies=[0.05, 0.24, 0.09, 0.0]).encode(),
        "key 'latencies[0]': found 0.05, shorter than ttfts[0] = 0.1",
    ),
    "vllm negative duration": (_vllm(duration=-2.0).encode(), "key 'duration': found -2"),
    "vllm zero duration": (_vllm(duration=0).encode(), "key 'duration': found 0"),
    "vllm negative rate": (_vllm(request_rate=-1).encode(), "key 'request_rate': found -1"),
    "vllm minus inf rate": (_vllm(request_rate="-inf").encode(), "key 'request_rate': found -inf"),
    "vllm infinite start time": (
        _vllm(start_times=[5000.0, INF, 5001.0, 5001.25]).encode(),
        "key 'start_times[1]': found inf; expected a timestamp",
    ),
    "vllm negative aggregate": (
        _vllm(mean_ttft_ms=-5.0).encode(),
        "key 'mean_ttft_ms': found -5",
    ),
    "sglang NaN gap": (
        _sglang(itls=[[0.01, NAN], [0.03]]),
        "key 'line 1: itls[0][1]': found NaN",
    ),
    "sglang negative output length": (
        _sglang(output_lens=[3, -2]),
        "key 'line 1: output_lens[1]': found -2",
    ),
    "sglang negative duration": (
        _sglang(duration=-1.5),
        "key 'line 1: duration': found -1.5",
    ),
    "llmperf negative ttft": (_llmperf(ttft_s=-0.1), "key '[0].ttft_s': found -0.1"),
    "llmperf infinite e2e": (
        _llmperf(end_to_end_latency_s=INF),
        "key '[0].end_to_end_latency_s': found inf",
    ),
    "llmperf e2e shorter than ttft": (
        _llmperf(ttft_s=0.1, end_to_end_latency_s=0.05),
        "key 'requests[0]': E2E 50 ms is shorter than TTFT 100 ms",
    ),
    "aiperf end before start": (
        _aiperf_record(T0, T0 - 1_000_000),
        "key 'line 1: metadata.request_end_ns': found E2E (request_end_ns − request_start_ns, "
        "ms) = -1",
    ),
    "aiperf infinite start": (
        _aiperf_record(T0, T0).replace(str(T0).encode(), b"Infinity", 1),
        "key 'line 1: metadata.request_start_ns': found inf",
    ),
    "guidellm first token before start": (
        _guidellm(1e9 - 0.1),
        "key 'benchmarks[0].requests.successful[0]': found TTFT (first_token_time − "
        "request_start_time, ms) = -100",
    ),
    "genai-perf response before request": (
        _genai_raw([T0 + 5, T0 - 5]),
        "key 'experiments[0].requests[0].response_timestamps[1]': found "
        f"{T0 - 5}, earlier than response_timestamps[0]",
    ),
}

CASES: dict[str, tuple[bytes, str]] = {
    **IMPOSSIBLE,
    "null document": (b"null", "valid JSON, but the whole document is null; expected an object"),
    "number document": (b"12.5", "valid JSON, but the whole document is 12.5"),
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
    return memory_store()


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_file_is_one_line_error_and_store_unchanged(
    case: str, store: Store, tmp_path: Path
) -> None:
    data, expected = CASES[case]
    path = tmp_path / f"{case.replace(' ', '_')}.json"
    path.write_bytes(data)
    before = tables.table_counts(store)
    [report] = import_paths(store, [path])
    assert report.error is not None
    assert str(path) in report.error and expected in report.error
    assert "\n" not in report.error
    assert tables.table_counts(store) == before


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
    imports.register(parser.add_subparsers())
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
    assert imports.run(args, out, err) == 1
    assert "bad.json" in err.getvalue() and len(err.getvalue().strip().splitlines()) == 1
    assert "detailed_small.json" in out.getvalue() and "1 FAILED" in out.getvalue()
    store = open_store(url)
    assert tables.table_counts(store)["requests"] == 4  # the good file still imported


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
    before = tables.table_counts(store)
    [report] = import_paths(store, [big])
    assert report.error is not None and "truncated" in report.error and "big.json" in report.error
    assert tables.table_counts(store) == before


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
    before = tables.table_counts(store)
    [report] = runner.import_sources(store, [], ImportOptions())
    assert report.error is not None and "not stored" in report.error
    assert "no_such_column" in report.error and "detailed_small.json" in report.error
    assert (report.runs, report.requests, report.samples) == (0, 0, 0)
    assert tables.table_counts(store) == before


def test_failing_replace_keeps_the_earlier_copy_whole(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    reports = import_paths(store, [LOCAL / "vllm" / name for name in UNIT_FILES])
    assert [(r.error, r.runs) for r in reports] == [(None, 1), (None, 2)]
    stored = tables.table_counts(store)
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
    assert tables.table_counts(store) == stored


def test_reimport_skips_and_replace_rewrites_in_one_go(store: Store) -> None:
    path = LOCAL / "vllm" / "detailed_small.json"
    [first] = import_paths(store, [path])
    assert (first.runs, first.requests) == (1, 4)
    counts = tables.table_counts(store)
    assert counts["requests"] == 4 and counts["token_gaps"] > 0
    [again] = import_paths(store, [path])
    assert (again.runs, again.skipped_runs, again.requests) == (0, 1, 0)
    assert any("already imported" in w for w in again.warnings)
    [replaced] = import_paths(store, [path], ImportOptions(replace=True))
    assert (replaced.runs, replaced.skipped_runs, replaced.requests) == (1, 0, 4)
    assert tables.table_counts(store) == counts


# --- what NaN and inf mean (docs/importing.md, collectors/importers/validate.py) -------------


def _parse(name: str, data: bytes) -> ParsedFile:
    [(report, parsed)] = parse_sources([(Source.from_bytes(name, data), True)], ImportOptions())
    assert report.error is None and parsed is not None, report.error
    return parsed


def test_nan_ttft_is_not_measured_for_ok_and_failed_requests_alike() -> None:
    parsed = _parse("nan.json", _vllm(ttfts=[0.1, NAN, 0.05, NAN]).encode())
    req = parsed.runs[0].requests
    assert req is not None
    assert list(req["status"]) == ["ok", "ok", "ok", "error"]
    assert req["ttft_ms"].isna().tolist() == [False, True, False, True]
    assert req["e2e_ms"].iloc[1] == pytest.approx(240.0)  # measured: kept
    assert req["tpot_ms"].isna().tolist() == [False, True, False, True]


def test_legitimate_infinities_and_nans_still_import() -> None:
    """vLLM's request_rate "inf" and SGLang's Infinity mean "all at once"; SGLang's NaN std
    (one sample) is "not given"."""
    vllm = _parse("v.json", _vllm(request_rate="inf").encode()).runs[0]
    assert vllm.run.get("target_rate") is None and "rate=inf" in vllm.run["name"]
    line = _parse("s.jsonl", _sglang(request_rate=INF, std_tpot_ms=NAN)).runs[0]
    assert line.run.get("target_rate") is None and "rate=inf" in line.run["name"]
    assert "std" not in line.run["tool_summary"]["metrics"]["tpot_ms"]
    assert line.run["tool_summary"]["raw"]["std_tpot_ms"] == "nan"


def test_failed_requests_values_are_not_stored_but_still_checked() -> None:
    """A failed request's TTFT is not stored (NULL), whatever the file says — but a negative one
    is still an impossible value."""
    parsed = _parse("f.json", _vllm(ttfts=[0.1, 0.2, 0.05, 0.7]).encode())
    req = parsed.runs[0].requests
    assert req is not None and pd.isna(req["ttft_ms"].iloc[3])
    [(report, _)] = parse_sources(
        [(Source.from_bytes("g.json", _vllm(ttfts=[0.1, 0.2, 0.05, -0.7]).encode()), True)],
        ImportOptions(),
    )
    assert report.error is not None and "key 'ttfts[3]': found -0.7" in report.error
