"""Property-based tests of the parsers: arbitrary input never escapes as anything but an
ImportFormatError (or a clean parse), and recomputed metrics follow the definitions."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors.importers import ImportOptions, ParsedFile, Source, parse_sources, validate
from collectors.importers.parsing import Reader
from errors import ImportFormatError

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=20,
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_give_a_report_not_a_crash(data: bytes) -> None:
    [(report, parsed)] = parse_sources([(Source.from_bytes("x.json", data), True)], ImportOptions())
    assert (report.error is None) == (parsed is not None)
    if report.error:
        assert report.error.startswith("x.json") and "\n" not in report.error


@settings(max_examples=150, deadline=None)
@given(json_values)
def test_any_json_gives_a_report_not_a_crash(value: object) -> None:
    data = json.dumps(value).encode()
    [(report, _)] = parse_sources([(Source.from_bytes("y.json", data), True)], ImportOptions())
    if report.error:
        assert report.error.startswith("y.json") and "\n" not in report.error


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["ttfts", "itls", "output_lens", "errors", "latencies"]),
        json_values,
        max_size=5,
    )
)
def test_vllm_with_arbitrary_arrays_reports_cleanly(extra: dict[str, object]) -> None:
    doc = {
        "date": "20250101-000000",
        "model_id": "m",
        "num_prompts": 2,
        "request_throughput": 1.0,
        "ttfts": [0.1, 0.2],
        "itls": [[0.01], [0.02]],
        "output_lens": [2, 2],
        **extra,
    }
    data = json.dumps(doc).encode()
    [(report, parsed)] = parse_sources([(Source.from_bytes("v.json", data), True)], ImportOptions())
    assert (report.error is None) == (parsed is not None)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0.001, 10),  # ttft s
            st.lists(st.floats(0.0, 1.0), min_size=0, max_size=6),  # gaps s
        ),
        min_size=1,
        max_size=8,
    )
)
def test_sglang_details_follow_the_definitions(reqs: list[tuple[float, list[float]]]) -> None:
    line = {
        "backend": "sglang",
        "completed": len(reqs),
        "total_output_tokens_retokenized": 0,
        "mean_e2e_latency_ms": 1.0,
        "ttfts": [t for t, _ in reqs],
        "itls": [g for _, g in reqs],
        "output_lens": [len(g) + 1 for _, g in reqs],
        "errors": [""] * len(reqs),
    }
    src = Source.from_bytes("s.jsonl", (json.dumps(line) + "\n").encode())
    [(report, parsed)] = parse_sources([(src, True)], ImportOptions())
    assert parsed is not None, report.error
    req = parsed.runs[0].requests
    assert req is not None
    for i, (t, gaps) in enumerate(reqs):
        e2e = (t + sum(gaps)) * 1000
        assert abs(req["e2e_ms"].iloc[i] - e2e) < 1e-6 * max(1.0, e2e)
        if gaps:
            assert abs(req["tpot_ms"].iloc[i] - sum(gaps) * 1000 / len(gaps)) < 1e-6
    gaps_df = parsed.runs[0].token_gaps
    assert (0 if gaps_df is None else len(gaps_df)) == sum(len(g) for _, g in reqs)


@given(st.text(max_size=12))
def test_number_reader_accepts_or_names_the_key(text: str) -> None:
    r = Reader("f.csv")
    try:
        r.number(text, "col")
    except ImportFormatError as exc:
        assert "key 'col'" in str(exc) and "expected a number" in str(exc)


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12))
def test_thousands_separators_round_trip(value: float) -> None:
    assert Reader("f").number(f"{value:,.2f}", "k") == float(f"{value:.2f}")


# --- hostile values in every importer (issue 10, items 3 and 4) ------------------------------

LOCAL = Path(__file__).resolve().parents[1] / "fixtures"
T0_NS = 1_735_689_600_000_000_000  # 2025-01-01 in epoch ns
T0_S = 1_735_689_600.0
SSE = 'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'


def _aiperf_record(k: int) -> dict[str, object]:
    start = T0_NS + k * 1_000_000_000
    return {
        "metadata": {
            "request_start_ns": start,
            "request_end_ns": start + 500_000_000,
            "benchmark_phase": "profiling",
            "was_cancelled": False,
            "conversation_id": f"c{k}",
            "turn_index": 0,
        },
        "metrics": {
            "time_to_first_token": {"value": 100.0, "unit": "ms"},
            "inter_chunk_latency": {"value": [10.0, 20.0], "unit": "ms"},
            "output_sequence_length": {"value": 3, "unit": "tokens"},
            "input_sequence_length": {"value": 100, "unit": "tokens"},
        },
        "error": None,
    }


def _guidellm_request(k: int) -> dict[str, object]:
    start = T0_S + k
    return {
        "request_id": f"r{k}",
        "start_time": start,
        "first_token_time": start + 0.1,
        "end_time": start + 0.5,
        "prompt_tokens": 100,
        "output_tokens": 10,
        "time_to_first_token_ms": 100.0,
        "request_latency": 0.5,
    }


# name → (file name, JSON lines?, a valid document of the format)
TEMPLATES: dict[str, tuple[str, bool, object]] = {
    "vllm": ("run.json", False, json.loads((LOCAL / "vllm" / "detailed_small.json").read_text())),
    "sglang": (
        "run.jsonl",
        True,
        json.loads((LOCAL / "sglang" / "output_details.jsonl").read_text().splitlines()[0]),
    ),
    "llmperf": (
        "m_individual_responses.json",
        False,
        [
            {
                "error_code": None,
                "error_msg": "",
                "inter_token_latency_s": 0.05,
                "ttft_s": 0.1 * (k + 1),
                "end_to_end_latency_s": 0.5 * (k + 1),
                "request_output_throughput_token_per_s": 20.0,
                "number_total_tokens": 110,
                "number_output_tokens": 10,
                "number_input_tokens": 100,
            }
            for k in range(2)
        ],
    ),
    "llmperf-summary": (
        "m_summary.json",
        False,
        {
            "version": "2023-08-31",
            "model": "m",
            "num_concurrent_requests": 2,
            "results_ttft_s_mean": 0.15,
            "results_ttft_s_quantiles_p50": 0.15,
            "results_end_to_end_latency_s_mean": 0.75,
            "results_num_completed_requests": 2,
            "results_num_completed_requests_per_min": 60.0,
            "results_error_code_frequency": "{429.0: 2}",
            "timestamp": T0_S,
        },
    ),
    "aiperf-records": ("profile_export.jsonl", True, [_aiperf_record(k) for k in range(2)]),
    "aiperf-summary": (
        "profile_export_aiperf.json",
        False,
        {
            "aiperf_version": "0.8.0",
            "time_to_first_token": {"unit": "ms", "avg": 100.0, "p50": 90.0, "p99": 150.0},
            "request_latency": {"unit": "ms", "avg": 500.0, "p50": 450.0},
            "request_throughput": {"unit": "requests/sec", "avg": 5.0},
            "benchmark_duration": {"unit": "sec", "avg": 60.0},
            "input_config": {"loadgen": {"concurrency": 4}},
            "start_time": "2025-01-01T00:00:00",
            "end_time": "2025-01-01T00:01:00",
        },
    ),
    "aiperf-gpu": (
        "gpu_telemetry_export.jsonl",
        True,
        [
            {
                "timestamp_ns": T0_NS + k,
                "gpu_index": 0,
                "gpu_uuid": "GPU-1",
                "gpu_model_name": "H100",
                "hostname": "h",
                "telemetry_data": {
                    "gpu_power_usage": 300.0,
                    "gpu_memory_used": 40.0,
                    "gpu_utilization": 90.0,
                    "gpu_temperature": 60.0,
                },
            }
            for k in range(2)
        ],
    ),
    "aiperf-server": (
        "server_metrics_export.jsonl",
        True,
        [
            {
                "endpoint_url": "http://e/metrics",
                "timestamp_ns": T0_NS + k,
                "metrics": {"vllm:num_requests_running": [{"labels": {"m": "x"}, "value": 3}]},
            }
            for k in range(2)
        ],
    ),
    "genai-perf-raw": (
        "profile_export.json",
        False,
        {
            "experiments": [
                {
                    "experiment": {"mode": "concurrency", "value": 2},
                    "requests": [
                        {
                            "timestamp": T0_NS + k,
                            "response_timestamps": [
                                T0_NS + k + 100_000_000,
                                T0_NS + k + 120_000_000,
                            ],
                            "response_outputs": [{"response": SSE}, {"response": SSE}],
                        }
                        for k in range(2)
                    ],
                }
            ],
            "service_kind": "openai",
            "endpoint": "v1/chat/completions",
        },
    ),
    "guidellm": (
        "benchmarks.json",
        False,
        {
            "benchmarks": [
                {
                    "type_": "generative_benchmark",
                    "start_time": T0_S,
                    "end_time": T0_S + 10,
                    "duration": 10.0,
                    "args": {"strategy": {"type_": "concurrent", "streams": 2}},
                    "metrics": {
                        "time_to_first_token_ms": {
                            "successful": {"mean": 100.0, "median": 100.0, "count": 2}
                        }
                    },
                    "request_totals": {"successful": 2},
                    "requests": {
                        "successful": [_guidellm_request(k) for k in range(2)],
                        "errored": [],
                        "incomplete": [],
                    },
                }
            ]
        },
    ),
}

HOSTILE = st.one_of(
    st.sampled_from(
        [
            math.nan,
            math.inf,
            -math.inf,
            -1,
            -100.5,
            0,
            2**31,
            3e9,
            10**400,
            1e308,
            "x",
            "-inf",
            "NaN",
            "",
            True,
            None,
            [1, 2],
            [],
            {"a": 1},
            {},
        ]
    ),
    st.floats(),
    st.integers(),
)


def _paths(value: object, prefix: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Every place in a JSON document: each key or index, containers included."""
    out: list[tuple[object, ...]] = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_paths(v, (*prefix, i)))
    return out


def _replace(doc: object, path: tuple[object, ...], value: object) -> object:
    doc = copy.deepcopy(doc)
    parent = doc
    for step in path[:-1]:
        parent = parent[step]  # type: ignore[index]
    parent[path[-1]] = value  # type: ignore[index]
    return doc


def _encode(doc: object, lines: bool) -> bytes:
    if lines:
        assert isinstance(doc, list | dict)
        items = doc if isinstance(doc, list) else [doc]
        return "".join(json.dumps(item) + "\n" for item in items).encode()
    return json.dumps(doc).encode()


def _assert_physical(parsed: ParsedFile) -> None:
    """What was accepted is physically possible (checked here, independently of the validator)."""

    def within(values: np.ndarray, low: float, high: float = math.inf) -> bool:
        given = values[~np.isnan(values)]
        return bool(np.isfinite(given).all() and (given >= low).all() and (given <= high).all())

    for run in parsed.runs:
        for field in ("started_at", "ended_at", "duration_s", "target_rate", "concurrency"):
            value = run.run.get(field)
            assert value is None or math.isfinite(value), (field, value)
        assert run.run.get("duration_s") is None or run.run["duration_s"] > 0
        req = run.requests
        if req is not None:
            for col in ("ttft_ms", "e2e_ms", "tpot_ms"):
                assert within(req[col].to_numpy(dtype="float64", na_value=np.nan), 0.0), col
            for col in ("input_tokens", "output_tokens", "chunks", "turn"):
                values = req[col].to_numpy(dtype="float64", na_value=np.nan)
                assert within(values, 0.0, 2**31 - 1), col
            for col in ("sent_at", "first_token_at", "done_at"):
                if col in req:
                    assert within(req[col].to_numpy(dtype="float64"), -math.inf), col
        if run.token_gaps is not None:
            gaps = run.token_gaps["gap_ms"].to_numpy(dtype="float64")
            assert np.isfinite(gaps).all() and (gaps >= 0).all()
    for frame in parsed.samples.values():
        assert np.isfinite(frame["ts"].to_numpy(dtype="float64")).all()


def _parse_one(name: str, data: bytes) -> tuple[str | None, ParsedFile | None]:
    [(report, parsed)] = parse_sources([(Source.from_bytes(name, data), True)], ImportOptions())
    return report.error, parsed


@pytest.mark.parametrize("fmt", sorted(TEMPLATES))
def test_templates_import_cleanly(fmt: str) -> None:
    name, lines, doc = TEMPLATES[fmt]
    error, parsed = _parse_one(name, _encode(doc, lines))
    assert error is None and parsed is not None
    _assert_physical(parsed)


@pytest.mark.parametrize("fmt", sorted(TEMPLATES))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_hostile_value_anywhere_is_refused_by_name_or_harmless(
    fmt: str, data: st.DataObject
) -> None:
    """NaN, ±inf, negatives, huge integers, wrong types (strings for numbers, lists for
    objects …) put anywhere in a valid file: the importer either refuses the file with one line
    naming it — never a traceback, never an "unexpected structure" — or what it accepted is
    physically possible."""
    name, lines, doc = TEMPLATES[fmt]
    path = data.draw(st.sampled_from(_paths(doc)), label="path")
    value = data.draw(HOSTILE, label="value")
    error, parsed = _parse_one(name, _encode(_replace(doc, path, value), lines))
    if error is not None:
        assert error.startswith(name + ":") and "\n" not in error
        assert "unexpected structure" not in error, error
    else:
        assert parsed is not None
        _assert_physical(parsed)


RECORDS_CSV = [
    [
        "request_num",
        "request_start_ns",
        "request_end_ns",
        "benchmark_phase",
        "was_cancelled",
        "error_code",
        "error_message",
        "time_to_first_token (ms)",
        "output_sequence_length (tokens)",
        "input_sequence_length (tokens)",
        "turn_index",
        "conversation_id",
    ],
    *[
        [
            str(k),
            str(T0_NS + k),
            str(T0_NS + k + 500_000_000),
            "profiling",
            "False",
            "",
            "",
            "100.0",
            "3",
            "100",
            "0",
            f"c{k}",
        ]
        for k in range(2)
    ],
]


def _csv(rows: list[list[str]]) -> bytes:
    return "".join(",".join(row) + "\r\n" for row in rows).encode()


@settings(max_examples=60, deadline=None)
@given(
    row=st.integers(1, len(RECORDS_CSV) - 1),
    col=st.integers(0, len(RECORDS_CSV[0]) - 1),
    value=HOSTILE.map(lambda v: v if isinstance(v, str) else json.dumps(v)),
)
def test_hostile_cell_in_records_csv_is_refused_by_name_or_harmless(
    row: int, col: int, value: str
) -> None:
    rows = copy.deepcopy(RECORDS_CSV)
    rows[row][col] = '"' + value.replace('"', '""') + '"'
    error, parsed = _parse_one("profile_export_records.csv", _csv(rows))
    if error is not None:
        assert error.startswith("profile_export_records.csv:") and "\n" not in error
        assert "unexpected structure" not in error, error
    else:
        assert parsed is not None
        _assert_physical(parsed)


def test_records_csv_template_imports_cleanly() -> None:
    error, parsed = _parse_one("profile_export_records.csv", _csv(RECORDS_CSV))
    assert error is None and parsed is not None and parsed.runs[0].request_count == 2


# --- the shared bounds -------------------------------------------------------------------------


def _breaks(value: float, bound: validate.Bound) -> bool:
    """A plain restatement of a bound, value by value."""
    if math.isnan(value):
        return bound.nan == "bad"
    if math.isinf(value):
        return not (bound.pos_inf and value > 0)
    if bound.low is not None and (value <= bound.low if bound.low_open else value < bound.low):
        return True
    if bound.high is not None and value > bound.high:
        return True
    return bound.integer and not value.is_integer()


BOUNDS = [
    validate.LATENCY,
    validate.GAP,
    validate.TOKENS,
    validate.DURATION,
    validate.TIMESTAMP,
    validate.RATE,
    validate.CODE,
    validate.MEASURE,
]


@given(
    st.sampled_from(BOUNDS),
    st.lists(
        st.floats() | st.sampled_from([0.0, -0.0, 2.0**31, 2.0**31 - 1, 1e15, 1e19]), max_size=8
    ),
)
def test_check_array_refuses_exactly_the_values_out_of_bounds_naming_the_first(
    bound: validate.Bound, values: list[float]
) -> None:
    arr = np.array(values, dtype="float64")
    bad = [i for i, x in enumerate(values) if _breaks(x, bound)]
    try:
        validate.check_array("f.json", "k", arr, bound)
    except ImportFormatError as exc:
        assert bad and exc.key == f"k[{bad[0]}]" and bound.what in exc.reason
    else:
        assert not bad


@given(
    st.lists(st.lists(st.floats(0, 10), max_size=4), min_size=1, max_size=5),
    st.data(),
    st.sampled_from([math.nan, -0.5, math.inf, None, "x"]),
)
def test_gap_lists_name_request_and_position_of_a_bad_gap(
    lists: list[list[object]], data: st.DataObject, bad: object
) -> None:
    assert validate.gap_lists(Reader("f.json"), lists, "itls", len(lists))[0].size == sum(
        map(len, lists)
    )
    i = data.draw(st.integers(0, len(lists) - 1))
    j = data.draw(st.integers(0, len(lists[i])))
    lists[i].insert(j, bad)
    with pytest.raises(ImportFormatError) as info:
        validate.gap_lists(Reader("f.json"), lists, "itls", len(lists))
    assert info.value.key == f"itls[{i}][{j}]"
