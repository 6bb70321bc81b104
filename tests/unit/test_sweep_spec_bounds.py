"""Sweep specs that used to hang or end in a traceback (issue 24, cases 6 and 7): a custom
command with ``{}`` or a lone brace, a TOML spec nested thousands of levels deep, and a grid of
10¹² points, each refused by ``parse_spec`` with one line naming the key — before anything is
launched; ``sweep --dry-run`` on the grid ends at once with exit 2."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

import cli
from analysis.sweep_spec import MAX_SWEEP_RUNS, expand, parse_spec
from errors import ExitCode, InputError

COMMAND_SPEC = """
name = "t"
[engine]
command = "my-server --port {port} --batch {max_batch_size}"
[grid]
max_batch_size = [8, 64]
[load]
workload = "mixed"
kind = "rate"
levels = [2]
requests = 20
[slo]
profile = "interactive-chat"
"""


def error_of(text: str) -> str:
    with pytest.raises(InputError) as exc:
        parse_spec(textwrap.dedent(text))
    return str(exc.value)


@pytest.mark.parametrize(
    ("command", "says"),
    [
        ("my-server --port {port} {} --batch {max_batch_size}", "{} is not a placeholder name"),
        ("my-server --port {port} --batch {max_batch_size} {0}", "{0} is not a placeholder"),
        ("my-server --port {port.real} --batch {max_batch_size}", "{port.real} is not"),
        ("my-server --port {port!r} --batch {max_batch_size}", "{port!r} is not"),
        ("my-server --port {port} --batch {max_batch_size} {", "Single '{' encountered"),
        ("my-server --port {port} --batch {max_batch_size} }", "Single '}' encountered"),
        ("my-server --port {port --batch {max_batch_size}", "[engine].command"),
    ],
)
def test_a_command_with_a_brace_that_is_no_placeholder_is_refused(command: str, says: str) -> None:
    message = error_of(
        COMMAND_SPEC.replace("my-server --port {port} --batch {max_batch_size}", command)
    )
    assert message.startswith("sweep spec: [engine].command: ") and says in message
    assert "{{ and }}" in message  # the hint says how to write a brace


def test_literal_braces_and_placeholders_still_parse() -> None:
    spec = parse_spec(
        COMMAND_SPEC.replace("--batch {max_batch_size}", "--batch {max_batch_size} --json {{}}")
    )
    assert spec.engine.command is not None and "{{}}" in spec.engine.command


@pytest.mark.parametrize("levels", [40, 3000])
def test_a_spec_nested_too_deep_is_not_valid_toml(levels: int) -> None:
    deep = "[" * levels + "1" + "]" * levels
    message = error_of(COMMAND_SPEC.replace("max_batch_size = [8, 64]", f"max_batch_size = {deep}"))
    assert message.startswith("sweep spec: not valid TOML: nested")


def test_a_grid_of_a_million_steps_is_refused_at_once() -> None:
    grid = (
        "max_batch_size = { from = 1, to = 1000000, steps = 1000000 }\n"
        "max_batched_tokens = { from = 1, to = 1000000, steps = 1000000 }"
    )
    t0 = time.monotonic()
    message = error_of(
        COMMAND_SPEC.replace("max_batch_size = [8, 64]", grid).replace(
            "--batch {max_batch_size}", "--batch {max_batch_size} --t {max_batched_tokens}"
        )
    )
    assert time.monotonic() - t0 < 1.0
    assert "steps: 1,000,000 is more than the 1,000 runs a sweep may measure" in message


def test_the_product_of_the_grid_and_repeats_is_bounded() -> None:
    values = list(range(1, 41))
    grid = f"max_batch_size = {values}\nmax_batched_tokens = {[v * 64 for v in values]}"
    text = COMMAND_SPEC.replace("max_batch_size = [8, 64]", grid).replace(
        "--batch {max_batch_size}", "--batch {max_batch_size} --t {max_batched_tokens}"
    )
    message = error_of(text)
    assert "[grid]: 40 max_batch_size × 40 max_batched_tokens = 1,600 runs" in message
    assert f"more than the {MAX_SWEEP_RUNS:,}" in message
    small = text.replace(str(values), "[1, 2]")
    assert len(expand(parse_spec(small))) == 80  # 2 × 40: within the bound
    message = error_of(small + "[sweep]\nrepeats = 20\n")
    assert "2 max_batch_size × 40 max_batched_tokens × 20 repeats = 1,600 runs" in message


def test_sweep_dry_run_of_a_huge_grid_ends_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "huge.toml"
    path.write_text(
        COMMAND_SPEC.replace(
            "max_batch_size = [8, 64]",
            "max_batch_size = { from = 1, to = 1000000, steps = 1000000 }\n"
            "max_batched_tokens = { from = 1, to = 1000000, steps = 1000000 }",
        ).replace("--batch {max_batch_size}", "--batch {max_batch_size} --t {max_batched_tokens}")
    )
    t0 = time.monotonic()
    code = cli.main(["sweep", str(path), "--dry-run", "--db", f"duckdb:///{tmp_path / 's.db'}"])
    assert time.monotonic() - t0 < 5.0
    err = capsys.readouterr().err
    assert code == ExitCode.ERROR and "Traceback" not in err
    assert err.startswith("servescope: error: sweep spec: [grid].max_batch_size.steps")
