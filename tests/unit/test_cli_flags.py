"""Every list-valued flag of every subcommand takes a space-separated list *and* the flag
repeated (issue 9: a repeated ``--metrics`` silently replaced the earlier list), checked from
one table that must name every list flag the parser has; and the command line's messages
(issue 10 item 13)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import cli
from errors import InputError
from services.commands.bench import config_from_args
from store.lifecycle import open_store

ROOT = Path(__file__).resolve().parents[2]

BENCH = ["bench", "--endpoint", "http://127.0.0.1:8000", "--workload", "mixed"]

#: (subcommand path, flag or positional metavar) → (argv before the list, the values, argv
#: after it). A list flag the parser has that is missing here fails the completeness test.
LIST_FLAGS: dict[tuple[tuple[str, ...], str], tuple[list[str], list[str], list[str]]] = {
    (("watch",), "--metrics"): (
        ["watch"],
        ["http://gw/vllm/metrics", "http://gw/llama/metrics"],
        [],
    ),
    (("watch",), "--dcgm"): (["watch"], ["http://n1:9400/metrics", "http://n2:9400"], []),
    (("bench",), "--concurrency"): ([*BENCH, "--requests", "9"], ["1", "8,32"], []),
    (("bench",), "--rate"): ([*BENCH, "--duration", "5"], ["2", "4.5,8"], []),
    (("bench",), "--engine-param"): (
        [*BENCH, "--rate", "1", "--requests", "1"],
        ["max_num_seqs=64", "prefix_caching=on"],
        [],
    ),
    (("bench",), "--dcgm"): (
        [*BENCH, "--rate", "1", "--requests", "1"],
        ["http://n1:9400/metrics", "http://n2:9400/metrics"],
        [],
    ),
    # tags come after the PATHs (or `--` before them): see test_tags_before_paths_*
    (("import",), "--tag"): (["import", "results/"], ["nightly", "h100"], ["--replace"]),
    (("import",), "PATH"): (["import", "--replace"], ["a.json", "b/"], []),
    (("health",), "FRAMEWORK"): (["health", "--issues", "3"], ["vllm", "sglang"], []),
    (("checklist", "rank"), "--weight"): (["checklist", "rank"], ["scheduling=5", "licence=1"], []),
    (("checklist", "rank"), "--must-have"): (["checklist", "rank"], ["amd", "gguf"], []),
    (("quality",), "--category"): (
        ["quality", "--reference", "http://a:1", "--candidate", "http://b:1"],
        ["factual", "code"],
        [],
    ),
    (("report",), "--runs"): (["report", "--out", "review.html"], ["r1", "r2"], []),
    (("plan",), "--gpu"): (
        ["plan", "--model", "llama-3.1-8b", "--peak-qps", "4", "--avg-qps", "2"],
        ["H100-SXM-80GB", "L4-24GB"],
        [],
    ),
    (("plan",), "--tp"): (
        ["plan", "--model", "llama-3.1-8b", "--peak-qps", "4", "--avg-qps", "2"],
        ["1", "2"],
        [],
    ),
    (("plan",), "--precision"): (
        ["plan", "--model", "llama-3.1-8b", "--peak-qps", "4", "--avg-qps", "2"],
        ["fp16", "int4"],
        [],
    ),
    (("db", "prepare"), "RUN_ID"): (
        ["db", "--db", "duckdb:///x.duckdb", "prepare"],
        ["r1", "r2"],
        [],
    ),
}


def _walk(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, (*path, name))
        else:
            yield path, action


def _is_list(action: argparse.Action) -> bool:
    return (
        action.nargs in ("+", "*")
        or (isinstance(action.nargs, int) and action.nargs > 1)
        or isinstance(action, argparse._AppendAction | argparse._ExtendAction)
        or "," in str(action.metavar or "")  # a comma-separated value list: 1,8,32
    )


def _name(action: argparse.Action) -> str:
    return action.option_strings[-1] if action.option_strings else str(action.metavar)


def _list_actions() -> dict[tuple[tuple[str, ...], str], argparse.Action]:
    return {
        (path, _name(action)): action
        for path, action in _walk(cli.build_parser())
        if _is_list(action)
    }


def test_the_table_names_every_list_flag_of_every_subcommand() -> None:
    found = set(_list_actions())
    assert found - set(LIST_FLAGS) == set(), "a new list flag needs a row in LIST_FLAGS"
    assert set(LIST_FLAGS) - found == set(), "LIST_FLAGS names a flag the parser lacks"


def _parse(argv: list[str]) -> argparse.Namespace:
    return cli.build_parser().parse_args(argv)


@pytest.mark.parametrize("key", list(LIST_FLAGS), ids=lambda k: " ".join((*k[0], k[1])))
def test_a_list_flag_takes_a_space_separated_list_and_repeats(
    key: tuple[tuple[str, ...], str],
) -> None:
    before, values, after = LIST_FLAGS[key]
    action = _list_actions()[key]
    flag = key[1]
    if not action.option_strings:  # a positional list: space-separated only
        ns = _parse([*before, *values, *after])
        assert getattr(ns, action.dest) == values
        return
    spaced = _parse([*before, flag, *values, *after])
    repeated = _parse([*before, *(x for v in values for x in (flag, v)), *after])
    assert getattr(spaced, action.dest) == values
    assert getattr(repeated, action.dest) == values
    # and the two mixed: the first list is never replaced by a later one
    mixed = _parse([*before, flag, *values, flag, "extra", *after])
    assert getattr(mixed, action.dest) == [*values, "extra"]


@pytest.mark.parametrize(
    "load",
    [
        ["--concurrency", "1,8,32"],
        ["--concurrency", "1", "8", "32"],
        ["--concurrency", "1", "--concurrency", "8", "--concurrency", "32"],
        ["--concurrency", "1,8", "--concurrency", "32"],
    ],
)
def test_concurrency_forms_give_the_same_levels(load: list[str]) -> None:
    cfg = config_from_args(_parse([*BENCH, *load, "--requests", "40"]))
    assert cfg.concurrency == (1, 8, 32)


def test_rate_forms_give_the_same_levels() -> None:
    forms = (["2,4.5"], ["2", "4.5"], ["2", "--rate", "4.5"])
    levels = {
        config_from_args(_parse([*BENCH, "--rate", *f, "--duration", "5"])).rate for f in forms
    }
    assert levels == {(2.0, 4.5)}


def test_watch_keeps_every_metrics_and_dcgm_target() -> None:
    """The issue's own command line: both --metrics targets, both --dcgm targets."""
    ns = _parse(
        [
            "watch",
            "--metrics",
            "http://gw/vllm/metrics",
            "--metrics",
            "http://gw/llama/metrics",
            "--dcgm",
            "C",
            "--dcgm",
            "D",
        ]
    )
    assert ns.metrics == ["http://gw/vllm/metrics", "http://gw/llama/metrics"]
    assert ns.dcgm == ["C", "D"]


def test_engine_params_from_both_forms_are_all_recorded() -> None:
    argv = [*BENCH, "--rate", "1", "--requests", "1"]
    a = config_from_args(_parse([*argv, "--engine-param", "max_num_seqs=64", "tp=2"]))
    b = config_from_args(
        _parse([*argv, "--engine-param=--max-num-seqs=64", "--engine-param", "tp=2"])
    )
    assert a.engine_params == b.engine_params == {"max_batch_size": 64, "tensor_parallel": 2}


def test_tags_before_paths_say_how_to_write_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        _parse(["import", "--tag", "nightly", "results/"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "the words after --tag were all read as tags: nightly results/" in err
    assert "put the PATHs first, or write -- before them" in err
    ns = _parse(["import", "--tag", "nightly", "--", "results/"])
    assert ns.paths == ["results/"] and ns.tags == ["nightly"]


# --- messages (issue 10 item 13) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("load", "message"),
    [
        (["--concurrency", "1,,2"], "--concurrency '1,,2': item 2 of '1,,2' is empty"),
        (["--concurrency", "1,8,"], "--concurrency '1,8,': item 3 of '1,8,' is empty"),
        (["--concurrency", "1.5"], "--concurrency '1.5': '1.5' is not a whole number"),
        (["--concurrency", "x"], "--concurrency 'x': 'x' is not a number"),
        (
            ["--concurrency", "8", "8"],
            "--concurrency '8 8': 8 is given twice (each value is one run)",
        ),
        (["--rate", "2,,4"], "--rate '2,,4': item 2 of '2,,4' is empty"),
    ],
)
def test_list_values_are_checked_item_by_item(load: list[str], message: str) -> None:
    with pytest.raises(InputError) as info:
        config_from_args(_parse([*BENCH, *load, "--requests", "5"]))
    assert info.value.message == message
    assert info.value.hint and "comma- or space-separated, or the flag repeated" in info.value.hint


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--requests", "1.5", "'1.5' is not a whole number: give a whole number ≥ 1"),
        ("--requests", "0", "'0': give a whole number ≥ 1"),
        ("--requests", "many", "'many' is not a number: give a whole number ≥ 1"),
        ("--workers", "2.0", "'2.0' is not a whole number: give a whole number ≥ 1"),
        ("--warmup", "-1", "'-1': give a whole number ≥ 0"),
        ("--max-tokens", "0.5", "'0.5' is not a whole number: give a whole number ≥ 1"),
    ],
)
def test_whole_number_flags_say_what_they_accept(
    flag: str, value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [*BENCH, "--concurrency", "1"]
    argv += [flag, value] if flag == "--requests" else ["--requests", "1", flag, value]
    with pytest.raises(SystemExit):
        _parse(argv)
    assert f"argument {flag}: {message}" in capsys.readouterr().err


def test_db_runs_lists_runs_and_prepare_rejects_unknown_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from store import ingest, run_figures

    url = f"duckdb:///{tmp_path / 'runs.duckdb'}"
    store = open_store(url)
    ingest.add_run(store, {"run_id": "known-run", "name": "a run", "started_at": 1.7e9})
    ingest.add_requests(
        store,
        [
            {"run_id": "known-run", "seq": i, "sent_at": 1.7e9 + i, "status": "ok", "ttft_ms": 5.0}
            for i in range(3)
        ],
    )
    store.dispose()

    assert cli.main(["db", "--db", url, "runs"]) == 0
    out = capsys.readouterr().out
    assert "known-run" in out and "a run" in out and "1 run(s) shown" in out

    assert cli.main(["db", "--db", url, "prepare", "known-run", "does-not-exist", "nope"]) == 2
    captured = capsys.readouterr()
    assert "prepared" not in captured.out
    assert captured.err.splitlines() == [
        f"servescope: error: 2 run id(s) not in {url}: does-not-exist, nope; nothing was prepared",
        "  hint: `servescope db runs` lists the stored runs",
    ]
    store = open_store(url)
    assert run_figures.stored(store, ["known-run"]) is None  # nothing prepared, not even this one
    store.dispose()

    assert cli.main(["db", "--db", url, "prepare", "known-run"]) == 0
    assert "prepared 1 run(s)" in capsys.readouterr().out
    store = open_store(url)
    assert run_figures.stored(store, ["known-run"]) is not None
    store.dispose()


def test_the_export_hint_names_a_command_that_lists_runs(tmp_path: Path) -> None:
    from services.commands import export

    store = open_store(f"duckdb:///{tmp_path / 'e.duckdb'}")
    with pytest.raises(InputError) as info:
        export.export_run(store, "nope", "csv", None)
    store.dispose()
    assert info.value.hint is not None
    assert "servescope db runs" in info.value.hint
    assert ("db", "runs") in {path for path, _ in _walk(cli.build_parser())}


def test_progress_lines_are_whole_without_a_terminal() -> None:
    """Piped stderr (CI): plain lines, never cut at 80 columns (rich's width off a terminal)."""
    script = (
        "from collectors.loadgen.progress import ProgressView\n"
        "with ProgressView() as v:\n"
        "    v.level('a-rather-long-workload-name c=32 on the-endpoint-name', 40)\n"
        "    v.note('[yellow]' + 'n' * 150 + '[/yellow]')\n"
        "    v.update(done=40, errors=3, ttft_p50=1234.0, ttft_p99=98765.0, force=True)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert (
        lines[0] == "a-rather-long-workload-name c=32 on the-endpoint-name: started (40 requests)"
    )
    assert lines[1] == "n" * 150
    last = lines[2]
    assert last.startswith("a-rather-long-workload-name c=32 on the-endpoint-name: 40/40 requests")
    assert last.endswith("· TTFT P50 1,234 ms P99 98,765 ms · 3 errors · 0:00:00"), last
    assert len(last) > 80 and "…" not in proc.stderr
