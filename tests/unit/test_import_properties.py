"""Property-based tests of the parsers: arbitrary input never escapes as anything but an
ImportFormatError (or a clean parse), and recomputed metrics follow the definitions."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors.importers import ImportOptions, Source, parse_sources
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
