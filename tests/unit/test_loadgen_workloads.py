"""Workload parsing and validation, length distributions, datasets, prompt synthesis."""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

import pytest

import seeds
from collectors.loadgen.prompts import VOCAB, Calibration, fit, synthesise
from collectors.loadgen.workloads import (
    RequestFactory,
    load_dataset,
    parse_length,
    parse_workload,
)
from errors import ConfigError, InputError

NAMES = {
    "short-in-short-out",
    "long-in-short-out",
    "long-in-long-out",
    "mixed",
    "shared-prefix",
    "multi-turn",
}


def test_every_seed_workload_parses() -> None:
    entries = {e["name"]: e for e in seeds.entries("workloads")}
    assert set(entries) == NAMES
    for entry in entries.values():
        assert entry["description"] and entry["source"]
        wl = parse_workload(entry)
        assert wl.shapes
    assert parse_workload(entries["mixed"]).shapes[0].weight == pytest.approx(0.6)
    sp = parse_workload(entries["shared-prefix"])
    assert sp.num_prefixes == 8 and sp.prefix_tokens is not None
    mt = parse_workload(entries["multi-turn"])
    assert mt.multi_turn and mt.history == "full"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "x"}, "missing 'input_tokens'"),
        (
            {"name": "x", "input_tokens": 5, "output_tokens": {"dist": "pareto"}},
            "lognormal, normal, uniform, fixed",
        ),
        (
            {
                "name": "x",
                "input_tokens": 5,
                "output_tokens": {"dist": "uniform", "min": 9, "max": 3},
            },
            "min ≤ max",
        ),
        (
            {"name": "x", "input_tokens": 5, "output_tokens": {"dist": "lognormal", "sd": 3}},
            "numeric 'mean'",
        ),
        ({"name": "x", "input_tokens": 5, "output_tokens": 5, "colour": 1}, "unknown key"),
        ({"name": "x", "mix": []}, "non-empty list"),
        ({"name": "x", "mix": [{"weight": -1, "input_tokens": 1, "output_tokens": 1}]}, "weight"),
        ({"name": "x", "input_tokens": 5, "output_tokens": 5, "prefix_tokens": 10}, "num_prefixes"),
        ({"name": "x", "input_tokens": 5, "output_tokens": 5, "history": "some"}, "full, none"),
        ({"name": "x", "input_tokens": 0, "output_tokens": 5}, "≥ 1"),
        ({"input_tokens": 5, "output_tokens": 5}, "name"),
    ],
)
def test_workload_errors_are_specific(entry: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_workload(entry)


def test_lognormal_has_the_requested_mean_and_sd() -> None:
    length = parse_length(
        {"dist": "lognormal", "mean": 200, "sd": 80, "min": 1, "max": 10_000}, where="t"
    )
    rng = random.Random(3)
    xs = [length.sample(rng) for _ in range(20_000)]
    assert statistics.fmean(xs) == pytest.approx(200, rel=0.03)
    assert statistics.pstdev(xs) == pytest.approx(80, rel=0.08)


def test_clipping_uniform_and_fixed() -> None:
    rng = random.Random(0)
    clipped = parse_length(
        {"dist": "normal", "mean": 100, "sd": 100, "min": 50, "max": 120}, where="t"
    )
    xs = [clipped.sample(rng) for _ in range(2000)]
    assert min(xs) == 50 and max(xs) == 120
    uni = parse_length({"dist": "uniform", "min": 3, "max": 5}, where="t")
    assert {uni.sample(rng) for _ in range(200)} == {3, 4, 5}
    assert parse_length(7, where="t").sample(rng) == 7


def test_prompt_synthesis_hits_target_lengths_under_a_calibration() -> None:
    cal = Calibration(tokens_per_word=1.5, overhead=7.0)
    rng = random.Random(1)
    for target in (16, 128, 1024, 4096):
        text = synthesise(rng, target, cal)
        words = text.split()
        assert all(w in VOCAB for w in words)
        assert cal.tokens_for(len(words)) == pytest.approx(target, abs=1.0)


def test_calibration_fit() -> None:
    cal = fit([(32, 7 + 48), (288, 7 + 432)])
    assert cal is not None
    assert cal.tokens_per_word == pytest.approx(1.5) and cal.overhead == pytest.approx(7.0)
    assert fit([(32, 5)]) is None
    assert fit([(32, 5), (288, 5)]) is None  # implausible: usage does not grow


def test_request_factory_is_deterministic_and_respects_overrides() -> None:
    wl = parse_workload(seeds.entry("workloads", "mixed"))
    cal = Calibration()
    a = RequestFactory(workload=wl, dataset=None, calibration=cal, seed=5)
    b = RequestFactory(workload=wl, dataset=None, calibration=cal, seed=5)
    assert [a.conversation(i).turns[0].text for i in range(20)] == [
        b.conversation(i).turns[0].text for i in range(20)
    ]
    labels = [a.conversation(i).label for i in range(2000)]
    assert labels.count("chat") / 2000 == pytest.approx(0.6, abs=0.05)
    fixed = RequestFactory(workload=wl, dataset=None, calibration=cal, seed=5, max_tokens=33)
    assert {fixed.conversation(i).turns[0].max_tokens for i in range(50)} == {33}


def test_shared_prefix_and_multi_turn_plans() -> None:
    cal = Calibration()
    sp = RequestFactory(
        workload=parse_workload(seeds.entry("workloads", "shared-prefix")),
        dataset=None,
        calibration=cal,
        seed=1,
    )
    prefixes = {sp.conversation(i).prefix for i in range(300)}
    assert len(prefixes) == 8
    mt = RequestFactory(
        workload=parse_workload(seeds.entry("workloads", "multi-turn")),
        dataset=None,
        calibration=cal,
        seed=1,
    )
    turns = [len(mt.conversation(i).turns) for i in range(300)]
    assert min(turns) == 2 and max(turns) == 6


def test_dataset_formats(tmp_path: Path) -> None:
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text(
        '{"prompt": "hello there", "max_tokens": 12}\n\n'
        '{"messages": [{"role": "user", "content": "hi"}]}\n'
    )
    items = load_dataset(jsonl)
    assert items[0].prompt == "hello there" and items[0].max_tokens == 12
    assert items[1].messages is not None
    share = tmp_path / "sharegpt.json"
    share.write_text(
        json.dumps(
            [
                {
                    "id": "1",
                    "conversations": [
                        {"from": "human", "value": "q?"},
                        {"from": "gpt", "value": "x" * 40},
                    ],
                },
                {"id": "2", "conversations": []},
            ]
        )
    )
    items = load_dataset(share)
    assert len(items) == 1 and items[0].prompt == "q?" and items[0].max_tokens == 10


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty"),
        ("not json\n", "line 1 is not valid JSON"),
        ('{"question": "x"}\n', "no 'prompt', 'messages' or 'conversations'"),
        ('{"prompt": "x", "max_tokens": -2}\n', "max_tokens"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_dataset_errors_name_the_accepted_formats(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(InputError, match=message) as info:
        load_dataset(path)
    assert info.value.hint and "JSONL" in info.value.hint


@pytest.mark.parametrize(
    ("content", "found"),
    [
        ('{"prompt": 42}\n', "found a number (42)"),
        ('{"prompt": "ok"}\n{"prompt": ["a", "b"]}\n', "found a list of 2 item(s)"),
        ('{"prompt": null}\n', "found null"),
        ('{"prompt": true}\n', "found a boolean (true)"),
    ],
)
def test_a_prompt_that_is_not_a_string_is_named_with_file_and_line(
    tmp_path: Path, content: str, found: str
) -> None:
    """Issue 10 item 13: ``{"prompt": 42}`` was said to lack a prompt."""
    path = tmp_path / "typed.jsonl"
    path.write_text(content)
    with pytest.raises(InputError) as info:
        load_dataset(path)
    line = content.count("\n")
    assert info.value.message == (
        f"dataset {path}: line {line}: 'prompt' must be a string, {found}"
    )


def test_a_null_prompt_beside_messages_is_still_read_as_messages(tmp_path: Path) -> None:
    path = tmp_path / "both.jsonl"
    path.write_text('{"prompt": null, "messages": [{"role": "user", "content": "hi"}]}\n')
    (item,) = load_dataset(path)
    assert item.prompt is None and item.messages == ({"role": "user", "content": "hi"},)


def test_missing_dataset(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        load_dataset(tmp_path / "nope.jsonl")
