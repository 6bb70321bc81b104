"""Production traces (``bench --trace``): the three public formats parsed from files written
here, speed, window, the --requests/--duration cuts, sorting, skipped rows, every refusal."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from collectors.loadgen.traces import FORMATS, Trace, load_trace
from errors import InputError

# the public files' own first rows (Azure 2023 conv, Azure 2024 code, BurstGPT_1, Mooncake
# conversation_trace), as docs/traces.md cites them
AZURE_2023 = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:15:46.6805900,374,44\n"
    "2023-11-16 18:15:50.9951690,396,109\n"
    "2023-11-16 18:15:51.2224670,879,55\n"
    "2023-11-16 18:15:51.3910170,91,16\n"
)
AZURE_2024 = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2024-05-10 23:59:59.990000+00:00,2162,5\n"
    "2024-05-11 00:00:00+00:00,2399,6\n"
    "2024-05-11 00:00:00.022314+00:00,76,15\n"
)
BURSTGPT = (
    "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    "5,ChatGPT,472,18,490,Conversation log\n"
    "45,ChatGPT,1087,0,1087,Conversation log\n"
    "110.5,GPT-4,417,505,922,API log\n"
    "118,ChatGPT,1360,172,1532,Conversation log\n"
)
MOONCAKE = [
    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47]},
    {"timestamp": 30535, "input_length": 6472, "output_length": 26, "hash_ids": [46, 48]},
    {"timestamp": 30600, "input_length": 100, "output_length": 1, "hash_ids": []},
]


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def jsonl(rows: Sequence[Mapping[str, object]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_azure_2023_date_times_with_seven_fractional_digits(tmp_path: Path) -> None:
    p = write(tmp_path, "AzureLLMInferenceTrace_conv.csv", AZURE_2023)
    tr = load_trace(p)
    assert isinstance(tr, Trace) and tr.format == "azure"
    assert tr.name == "AzureLLMInferenceTrace_conv.csv" and tr.sha256 == sha(p)
    assert tr.offsets == pytest.approx([0.0, 4.314579, 4.541877, 4.710427], abs=1e-9)
    assert tr.input_tokens == (374, 396, 879, 91)
    assert tr.output_tokens == (44, 109, 55, 16)
    assert (tr.rows_read, tr.rows_skipped, tr.rows_unusable, tr.reordered) == (4, 0, 0, False)
    assert tr.span_s == pytest.approx(4.710427)
    assert tr.mean_rate == pytest.approx(3 / 4.710427)


def test_azure_2024_utc_offsets_missing_fractions_and_midnight(tmp_path: Path) -> None:
    tr = load_trace(write(tmp_path, "code_1week.csv", AZURE_2024))
    assert tr.format == "azure"
    assert tr.offsets == pytest.approx([0.0, 0.01, 0.032314], abs=1e-9)
    assert tr.input_tokens == (2162, 2399, 76)


def test_azure_offsets_are_converted_to_utc(tmp_path: Path) -> None:
    text = (
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2024-05-10 12:00:00+00:00,1,1\n"
        "2024-05-10 12:00:05+00:00,2,1\n"  # the same minute again (cached)
        "2024-05-10 14:00:01+02:00,3,1\n"  # 12:00:01 UTC
        "2024-05-10T12:00:02Z,4,1\n"
        "2024-05-10 12:00:06+00:30,5,1\n"  # a cached minute with another offset: 11:30:06 UTC
    )
    tr = load_trace(write(tmp_path, "tz.csv", text))
    assert tr.reordered and tr.input_tokens == (5, 1, 3, 4, 2)
    assert tr.offsets == pytest.approx([0, 1794, 1795, 1796, 1799])


def test_burstgpt_seconds_and_failed_requests_skipped(tmp_path: Path) -> None:
    p = write(tmp_path, "BurstGPT_1.csv", BURSTGPT)
    tr = load_trace(p)
    assert tr.format == "burstgpt" and tr.sha256 == sha(p)
    # the failed request (Response tokens 0) at 45 s is skipped and counted
    assert tr.offsets == (0.0, 105.5, 113.0)
    assert tr.input_tokens == (472, 417, 1360)
    assert tr.output_tokens == (18, 505, 172)
    assert (tr.rows_read, tr.rows_skipped, tr.rows_unusable) == (4, 1, 1)


def test_burstgpt_newer_columns_and_order_are_found_by_name(tmp_path: Path) -> None:
    text = (
        "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,"
        "Log Type\n"
        '10.25,abc,1.5,ChatGPT,100,20,120,"Conversation log"\n'
        "11.75,,0.7,GPT-4,200,30,230,API log\r\n"
    )
    tr = load_trace(write(tmp_path, "BurstGPT_3.csv", text))
    assert tr.format == "burstgpt"
    assert tr.offsets == (0.0, 1.5)
    assert tr.input_tokens == (100, 200) and tr.output_tokens == (20, 30)


def test_mooncake_milliseconds(tmp_path: Path) -> None:
    p = write(tmp_path, "conversation_trace.jsonl", jsonl(MOONCAKE))
    tr = load_trace(p)
    assert tr.format == "mooncake" and tr.sha256 == sha(p)
    assert tr.offsets == pytest.approx([0.0, 3.053, 3.118])
    assert tr.input_tokens == (6955, 6472, 100)
    assert tr.output_tokens == (52, 26, 1)


def test_speed_divides_the_gaps(tmp_path: Path) -> None:
    p = write(tmp_path, "b.csv", BURSTGPT)
    tr = load_trace(p, speed=2.0)
    assert tr.offsets == (0.0, 52.75, 56.5) and tr.speed == 2.0
    assert tr.mean_rate == pytest.approx(2 * load_trace(p).mean_rate)
    assert load_trace(p, speed=0.5).offsets == (0.0, 211.0, 226.0)


def test_window_is_in_seconds_of_the_original_trace_from_its_first_arrival(
    tmp_path: Path,
) -> None:
    p = write(tmp_path, "b.csv", BURSTGPT)
    # arrivals at 0, (40: failed), 105.5, 113 s from the first; [100, 110) holds 105.5 only
    tr = load_trace(p, window=(100.0, 110.0))
    assert tr.offsets == (0.0,) and tr.input_tokens == (417,) and tr.window == (100.0, 110.0)
    assert (tr.rows_read, tr.rows_skipped) == (4, 3)
    # the window applies before the speed: the same requests, gaps halved
    tr2 = load_trace(p, window=(100.0, 200.0), speed=2.0)
    assert tr2.offsets == (0.0, 3.75) and tr2.input_tokens == (417, 1360)
    # the end is excluded, the start included
    assert load_trace(p, window=(0.0, 105.5)).input_tokens == (472,)
    assert load_trace(p, window=(105.5, 105.6)).input_tokens == (417,)


def test_requests_and_duration_cut_after_speed_and_window(tmp_path: Path) -> None:
    rows = [{"timestamp": 1000 * i, "input_length": 10 + i, "output_length": 5} for i in range(10)]
    p = write(tmp_path, "m.jsonl", jsonl(rows))
    assert load_trace(p, requests=3).input_tokens == (10, 11, 12)
    assert load_trace(p, requests=3).rows_skipped == 7
    # replay seconds (after speed): offsets < 2 s at speed 2 are the trace's first 4 s
    cut = load_trace(p, speed=2.0, duration_s=2.0)
    assert cut.offsets == (0.0, 0.5, 1.0, 1.5) and cut.rows_skipped == 6
    both = load_trace(p, window=(5.0, 100.0), duration_s=3.0, requests=2)
    assert both.input_tokens == (15, 16) and both.offsets == (0.0, 1.0)
    assert load_trace(p, requests=100).input_tokens == tuple(range(10, 20))


def test_unsorted_rows_are_sorted_stably(tmp_path: Path) -> None:
    text = (
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "30,ChatGPT,3,1,4,API log\n"
        "10,ChatGPT,1,1,2,API log\n"
        "20,ChatGPT,2,1,3,API log\n"
        "10,ChatGPT,9,1,10,API log\n"
    )
    tr = load_trace(write(tmp_path, "u.csv", text))
    assert tr.reordered is True
    assert tr.offsets == (0.0, 0.0, 10.0, 20.0)
    assert tr.input_tokens == (1, 9, 2, 3)  # ties keep the file's order
    assert load_trace(write(tmp_path, "s.csv", BURSTGPT)).reordered is False


def test_unusable_rows_are_skipped_and_counted(tmp_path: Path) -> None:
    text = (
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.0,374,44\n"
        "not a time,396,109\n"
        "2023-11-16 18:15:47.0,,55\n"
        "2023-11-16 18:15:48.0,12.0,7\n"  # a whole number written as a float
        "\n"
        "2023-11-16 18:15:49.0,-3,16\n"
        "2023-11-16 18:15:50.0,100,2\n"
        "2023-11-16 18:15:51.0,100\n"
        "2023-11-16 18:15:52.0,100,3\n"
    )
    tr = load_trace(write(tmp_path, "a.csv", text))
    assert tr.input_tokens == (374, 12, 100, 100)
    assert tr.offsets == (0.0, 2.0, 4.0, 6.0)
    assert (tr.rows_read, tr.rows_unusable, tr.rows_skipped) == (8, 4, 4)


def test_format_option_overrides_and_is_checked(tmp_path: Path) -> None:
    p = write(tmp_path, "trace.txt", BURSTGPT)
    assert load_trace(p, fmt="BurstGPT").format == "burstgpt"
    with pytest.raises(InputError) as exc:
        load_trace(p, fmt="mooncake")
    assert "--trace-format mooncake" in exc.value.message and "line 1" in exc.value.message
    assert "timestamp" in (exc.value.hint or "")
    with pytest.raises(InputError) as exc:
        load_trace(p, fmt="sharegpt")
    assert "sharegpt" in exc.value.message
    assert all(f in exc.value.message for f in FORMATS)
    with pytest.raises(InputError) as exc:
        load_trace(write(tmp_path, "other.csv", "time,in,out\n1,2,3\n"), fmt="azure")
    msg = exc.value.message
    assert "line 1" in msg and "TIMESTAMP, ContextTokens, GeneratedTokens" in msg


def test_large_file_read_in_blocks(tmp_path: Path) -> None:
    """Rows that straddle the reader's blocks (1 MiB) are read whole, line numbers kept."""
    n = 60_000
    lines = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    lines += [
        f"{i * 0.01:.2f},ChatGPT,{i % 97 + 1},{i % 13 + 1},0,Conversation log" for i in range(n)
    ]
    lines[40_001] = "oops"
    p = write(tmp_path, "big.csv", "\n".join(lines))  # no final newline
    tr = load_trace(p)
    assert tr.rows_read == n and tr.rows_unusable == 1 and len(tr) == n - 1
    assert tr.input_tokens[-1] == (n - 1) % 97 + 1 and tr.offsets[-1] == pytest.approx(599.99)
    assert tr.sha256 == sha(p)


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("empty.csv", "", "is empty"),
        ("blank.csv", "\n\n  \n", "is empty"),
        ("header.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n", "has a header but no rows"),
        ("other.csv", "a,b,c\n1,2,3\n", "line 1 ('a,b,c') is not the header of a known"),
        ("prompts.jsonl", '{"prompt": "hi"}\n{"prompt": "yo"}\n', "2 of 2 rows are unusable"),
    ],
)
def test_bad_files_are_refused_naming_file_line_and_formats(
    tmp_path: Path, name: str, content: str, says: str
) -> None:
    p = write(tmp_path, name, content)
    with pytest.raises(InputError) as exc:
        load_trace(p)
    assert str(p) in exc.value.message and says in exc.value.message
    assert "Mooncake JSONL" in (exc.value.hint or "") and "BurstGPT CSV" in (exc.value.hint or "")


def test_a_file_mostly_unusable_is_refused_naming_its_first_bad_line(tmp_path: Path) -> None:
    rows = [jsonl(MOONCAKE[:1])]
    rows += ['{"timestamp": 5, "input_length": 0, "output_length": 3}\n'] * 2
    rows += ["{not json\n"]
    p = write(tmp_path, "m.jsonl", "".join(rows))
    with pytest.raises(InputError) as exc:
        load_trace(p)
    msg = exc.value.message
    assert "3 of 4 rows are unusable as mooncake" in msg
    assert "line 2: input_length 0 is not a whole number of tokens ≥ 1" in msg
    # half unusable is still a trace (skipped and counted)
    ok = write(tmp_path, "half.jsonl", "".join(rows[:2]) + jsonl(MOONCAKE[1:2]))
    assert load_trace(ok).rows_unusable == 1


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(InputError) as exc:
        load_trace(tmp_path / "missing.csv")
    assert "missing.csv does not exist" in exc.value.message
    with pytest.raises(InputError) as exc:
        load_trace(tmp_path)
    assert "is a folder" in exc.value.message
    gz = tmp_path / "t.csv.gz"
    gz.write_bytes(gzip.compress(BURSTGPT.encode()))
    with pytest.raises(InputError) as exc:
        load_trace(gz)
    assert "gzip-compressed" in exc.value.message and "decompress" in (exc.value.hint or "")
    latin = tmp_path / "latin.csv"
    latin.write_bytes(BURSTGPT.encode() + b"120,Caf\xe9,1,1,2,API log\n")
    with pytest.raises(InputError) as exc:
        load_trace(latin)
    assert "line 6 is not UTF-8" in exc.value.message


def test_an_empty_window_says_the_trace_span(tmp_path: Path) -> None:
    p = write(tmp_path, "b.csv", BURSTGPT)
    with pytest.raises(InputError) as exc:
        load_trace(p, window=(600.0, 1200.0))
    msg = exc.value.message
    assert "600s:1200s holds no request" in msg and "spans 113.000 s" in msg
    assert "3 requests" in msg and "0:113s" in (exc.value.hint or "")
    # between two arrivals
    with pytest.raises(InputError, match="holds no request"):
        load_trace(p, window=(1.0, 100.0))


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"speed": 0.0}, "--trace-speed must be a number > 0"),
        ({"speed": float("inf")}, "--trace-speed must be a number > 0"),
        ({"requests": 0}, "--requests must be ≥ 1"),
        ({"duration_s": 0.0}, "--duration must be > 0"),
        ({"window": (5.0, 5.0)}, "is not START:END"),
    ],
)
def test_bad_arguments(tmp_path: Path, kwargs: dict[str, object], says: str) -> None:
    with pytest.raises(InputError, match=says):
        load_trace(write(tmp_path, "b.csv", BURSTGPT), **kwargs)  # type: ignore[arg-type]


# --- bounds (issue 24, case 4) -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        (
            "azure.csv",
            AZURE_2023.replace(",374,44", ",1000000000000,44"),
            "line 2 asks for 1,000,000,000,000 input tokens, beyond the 2,097,152 tokens",
        ),
        (
            "azure-out.csv",
            AZURE_2023.replace(",396,109", ",396,3000000"),
            "line 3 asks for 3,000,000 output tokens",
        ),
        (
            "azure-year.csv",
            AZURE_2023.replace("2023-11-16 18:15:51.2224670", "9999-11-16 18:15:51.2224670"),
            "line 4 asks for the time",
        ),
        (
            "burst.csv",
            BURSTGPT.replace("110.5,GPT-4", "1e308,GPT-4"),
            "line 4 asks for the time 1e+308 s",
        ),
        (
            "moon.jsonl",
            jsonl([*MOONCAKE[:2], {**MOONCAKE[2], "timestamp": 1e18}]),
            "line 3 asks for the time 1e+18 ms, beyond ±1e+10 s",
        ),
        (
            "moon-neg.jsonl",
            jsonl([{**MOONCAKE[0], "timestamp": -1e18}, *MOONCAKE[1:]]),
            "line 1 asks for the time -1e+18 ms",
        ),
    ],
)
def test_a_length_or_time_beyond_the_bounds_refuses_the_file_naming_the_line(
    tmp_path: Path, name: str, text: str, says: str
) -> None:
    p = write(tmp_path, name, text)
    with pytest.raises(InputError) as exc:
        load_trace(p)
    assert says in str(exc.value) and str(p) in str(exc.value)


def test_the_fast_path_refuses_a_huge_length_too(tmp_path: Path) -> None:
    rows = "".join(f"{i},ChatGPT,100,10,110,API log\n" for i in range(2000))
    big = BURSTGPT.splitlines()[0] + "\n" + rows + "2001,ChatGPT,5000000,10,0,API log\n"
    with pytest.raises(InputError, match="line 2002 asks for 5,000,000 input tokens"):
        load_trace(write(tmp_path, "b.csv", big))


def test_a_replay_longer_than_the_bound_is_refused_unless_cut_or_sped_up(tmp_path: Path) -> None:
    from collectors.loadgen.traces import MAX_REPLAY_S

    forty_days = 40 * 86400
    text = (
        BURSTGPT.splitlines()[0]
        + "\n"
        + f"0,ChatGPT,10,5,15,API log\n{forty_days},ChatGPT,10,5,15,API log\n"
    )
    p = write(tmp_path, "long.csv", text)
    with pytest.raises(
        InputError, match=r"the replay would last 40\.0 days .* more than the 31 days"
    ):
        load_trace(p)
    assert load_trace(p, speed=2).span_s == forty_days / 2 <= MAX_REPLAY_S
    assert len(load_trace(p, window=(0, 86400))) == 1
    assert len(load_trace(p, requests=1)) == 1


def test_mooncake_json_nested_too_deep_is_an_unusable_row(tmp_path: Path) -> None:
    deep = "[" * 5000 + "]" * 5000 + "\n"
    p = write(tmp_path, "m.jsonl", jsonl(MOONCAKE) + deep)
    trace = load_trace(p)
    assert len(trace) == 3 and trace.rows_unusable == 1
    only = write(
        tmp_path,
        "deep.jsonl",
        '{"timestamp": 1, "input_length": 2, "output_length": 3}\n' + deep * 2,
    )
    with pytest.raises(InputError, match="not valid JSON \\(nested too deep to decode\\)"):
        load_trace(only)


def test_a_request_beyond_the_models_context_is_refused(tmp_path: Path) -> None:
    from collectors.loadgen.traces import check_context

    trace = load_trace(write(tmp_path, "m.jsonl", jsonl(MOONCAKE)))
    check_context(trace, 7007, "here")  # 6955 + 52: fits exactly
    with pytest.raises(InputError) as exc:
        check_context(trace, 7006, "http://x/v1/models")
    assert str(exc.value).startswith(
        "trace m.jsonl: 1 of 3 requests do not fit the 7,006-token context http://x/v1/models "
        "names (the largest: request 1, 6,955 input + 52 output tokens)"
    )
