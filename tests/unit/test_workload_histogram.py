"""The ``histogram`` length distribution (draws, expected value, strict validation), the workload
files ``bench --workload-file`` reads, and ``workload from-metrics``'s window, +Inf closing and
file."""

from __future__ import annotations

import math
import random
from collections import Counter
from pathlib import Path

import pytest

from analysis.length_mix import LengthDist
from collectors.loadgen.prompts import Calibration
from collectors.loadgen.workloads import (
    Length,
    RequestFactory,
    load_workload_file,
    parse_length,
    parse_workload,
)
from errors import ConfigError, InputError
from services.commands import workload as wl_cmd

INF = math.inf

SPEC = {"dist": "histogram", "edges": [0, 10, 100, 1000], "weights": [1, 3, 6]}


def test_draws_follow_the_weights_and_stay_inside_their_buckets() -> None:
    length = parse_length(SPEC, where="w.input_tokens")
    rng = random.Random(11)
    draws = [length.sample(rng) for _ in range(20_000)]
    assert min(draws) >= 1 and max(draws) <= 1000
    shares = Counter(0 if d <= 10 else 1 if d <= 100 else 2 for d in draws)
    for bucket, weight in enumerate((0.1, 0.3, 0.6)):
        # binomial sd at n = 20k is ≤ 0.0035: 0.015 is over 4 sd
        assert shares[bucket] / len(draws) == pytest.approx(weight, abs=0.015)
    # uniform inside a bucket: (100, 1000] has mean 550.5
    top = [d for d in draws if d > 100]
    assert sum(top) / len(top) == pytest.approx(550.5, rel=0.02)
    # both ends of a bucket are reachable: 1 and 10 in (0, 10]
    assert {1, 10} <= set(draws)


def test_expected_is_the_exact_mean_of_the_whole_numbers_drawn() -> None:
    length = parse_length(SPEC, where="w")
    # (0,10] → 1..10 mean 5.5; (10,100] → 11..100 mean 55.5; (100,1000] → 101..1000 mean 550.5
    assert length.expected == pytest.approx(0.1 * 5.5 + 0.3 * 55.5 + 0.6 * 550.5)
    assert (length.min, length.max) == (1, 1000)
    rng = random.Random(3)
    mean = sum(length.sample(rng) for _ in range(20_000)) / 20_000
    assert mean == pytest.approx(length.expected, rel=0.02)


def test_zero_weight_buckets_are_never_drawn_and_bound_min_max() -> None:
    length = parse_length(
        {"dist": "histogram", "edges": [0, 50, 60, 5000], "weights": [0, 1, 0]}, where="w"
    )
    assert (length.min, length.max) == (51, 60)
    rng = random.Random(5)
    assert {length.sample(rng) for _ in range(2000)} <= set(range(51, 61))
    assert length.expected == pytest.approx(55.5)


def test_length_stays_frozen_and_hashable() -> None:
    a = parse_length(SPEC, where="w")
    b = parse_length(dict(SPEC), where="w")
    assert a == b and hash(a) == hash(b)
    assert isinstance(a.edges, tuple) and isinstance(a.weights, tuple)
    with pytest.raises(AttributeError):
        a.mean = 3.0  # type: ignore[misc]


def test_a_workload_with_histogram_lengths_builds_requests_deterministically() -> None:
    wl = parse_workload(
        {
            "name": "prod",
            "input_tokens": SPEC,
            "output_tokens": {"dist": "histogram", "edges": [0, 16, 64], "weights": [1, 1]},
        }
    )
    f1 = RequestFactory(workload=wl, dataset=None, calibration=Calibration(), seed=4)
    f2 = RequestFactory(workload=wl, dataset=None, calibration=Calibration(), seed=4)
    c1, c2 = f1.conversation(17), f2.conversation(17)
    assert c1.turns[0].max_tokens == c2.turns[0].max_tokens
    assert 1 <= c1.turns[0].max_tokens <= 64
    assert c1.turns[0].target_input_tokens == c2.turns[0].target_input_tokens


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"dist": "histogram", "edges": [0, 10], "weights": [1, 2]}, "n + 1 edges"),
        ({"dist": "histogram", "edges": [0, 10, 5], "weights": [1, 2]}, "strictly ascending"),
        ({"dist": "histogram", "edges": [-1, 10], "weights": [1]}, "≥ 0"),
        ({"dist": "histogram", "edges": [0, 10], "weights": [-1]}, "positive sum"),
        ({"dist": "histogram", "edges": [0, 10], "weights": [0]}, "positive sum"),
        ({"dist": "histogram", "edges": [0, 10, float("inf")], "weights": [1, 1]}, "finite"),
        ({"dist": "histogram", "edges": "0,10", "weights": [1]}, "list of numbers"),
        ({"dist": "histogram", "edges": [0, True], "weights": [1]}, "list of numbers"),
        ({"dist": "histogram", "weights": [1]}, "'edges' must be a list"),
        ({"dist": "histogram", "edges": [0, 10], "weights": [1], "mean": 4}, "unknown key"),
        ({"dist": "histogram", "edges": [1.2, 1.8, 5], "weights": [1, 1]}, "(1.2, 1.8]"),
    ],
)
def test_bad_histograms_name_the_workload_key_and_what_is_accepted(
    spec: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        parse_workload({"name": "prod", "input_tokens": spec, "output_tokens": 8})
    text = str(err.value)
    assert "workload 'prod'.input_tokens" in text
    assert message in text


def test_a_bad_histogram_error_shows_the_accepted_form() -> None:
    with pytest.raises(ConfigError) as err:
        parse_length({"dist": "histogram", "edges": [0, 10, 5], "weights": [1, 1]}, where="w")
    assert err.value.hint is not None and 'dist = "histogram"' in err.value.hint


def test_other_dists_are_unchanged() -> None:
    assert parse_length({"dist": "uniform", "min": 3, "max": 9}, where="w") == Length(
        "uniform", 6.0, 0.0, 3, 9
    )


# --- `workload from-metrics`: the window, the end, closing the +Inf bucket, the file ---------


@pytest.mark.parametrize(
    ("text", "seconds"), [("30m", 1800.0), ("24h", 86400.0), ("7d", 604800.0), ("90s", 90.0)]
)
def test_window_forms(text: str, seconds: float) -> None:
    assert wl_cmd.parse_window(text) == seconds


@pytest.mark.parametrize("text", ["24", "24 hours", "0h", "-1h", "h", "1w"])
def test_bad_windows_name_the_accepted_forms(text: str) -> None:
    with pytest.raises(InputError) as err:
        wl_cmd.parse_window(text)
    assert "30m, 24h, 7d" in str(err.value)


def test_end_forms() -> None:
    assert wl_cmd.parse_end(None, now=5.0) is None
    assert wl_cmd.parse_end("now", now=5.0) == 5.0
    assert wl_cmd.parse_end("2026-01-01T00:00:00Z", now=0) == 1767225600.0
    assert wl_cmd.parse_end("2026-01-01T00:00:00", now=0) == 1767225600.0  # no zone: UTC
    with pytest.raises(InputError, match="ISO 8601"):
        wl_cmd.parse_end("yesterday", now=0)


def test_an_open_inf_bucket_is_closed_at_twice_the_last_bound_or_inf_max() -> None:
    d = LengthDist((100.0, 1000.0, INF), (30.0, 60.0, 10.0))
    h = wl_cmd.close_histogram(d, side="prompt", inf_max=None)
    assert h.edges == (0.0, 100.0, 1000.0, 2000.0) and h.weights == (30.0, 60.0, 10.0)
    assert "10 request(s) (10.0%) above 1000 tokens; closed at 2000 tokens" in h.inf_note
    h = wl_cmd.close_histogram(d, side="prompt", inf_max=1500)
    assert h.edges[-1] == 1500.0 and "--inf-max" in h.inf_note
    with pytest.raises(InputError, match="above the prompt histogram's last finite bound 1000"):
        wl_cmd.close_histogram(d, side="prompt", inf_max=1000)
    only_inf = LengthDist((INF,), (5.0,))
    with pytest.raises(InputError, match="only a \\+Inf bucket"):
        wl_cmd.close_histogram(only_inf, side="output", inf_max=None)
    assert wl_cmd.close_histogram(only_inf, side="output", inf_max=64).edges == (0.0, 64.0)


def test_trailing_empty_buckets_are_dropped() -> None:
    d = LengthDist((10.0, 100.0, 1000.0, INF), (0.0, 5.0, 0.0, 0.0))
    h = wl_cmd.close_histogram(d, side="output", inf_max=None)
    assert h.edges == (0.0, 10.0, 100.0) and h.weights == (0.0, 5.0)
    assert "no request above 100 tokens" in h.inf_note


def test_the_rendered_file_is_what_bench_reads(tmp_path: Path) -> None:
    prompt = LengthDist((100.0, 1000.0, INF), (30.0, 60.0, 10.0))
    output = LengthDist((10.0, 100.0, INF), (50.0, 50.0, 0.0))
    text = wl_cmd.render(
        name='prod "eu"',
        target="http://10.0.0.5:8000/metrics",
        engine="vllm",
        start=0.0,
        end=86400.0,
        prompt=prompt,
        output=output,
        inputs=wl_cmd.close_histogram(prompt, side="prompt", inf_max=None),
        outputs=wl_cmd.close_histogram(output, side="output", inf_max=None),
        written_at=86400.0,
    )
    path = tmp_path / "prod.toml"
    wl_cmd.write_atomically(path, text)
    entry = load_workload_file(path)
    assert entry["name"] == 'prod "eu"'
    workload = parse_workload(entry)
    (shape,) = workload.shapes
    assert shape.input.edges == (0.0, 100.0, 1000.0, 2000.0)
    assert shape.input.weights == (30.0, 60.0, 10.0)
    assert shape.output.max == 100
    assert "window 1970-01-01T00:00:00Z → 1970-01-02T00:00:00Z, 1d" in text
    assert "Requests finished in the window: 100" in text
    assert "Independence assumption" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prod.toml"]


def test_an_unreadable_spec_is_never_published(tmp_path: Path) -> None:
    path = tmp_path / "prod.toml"
    path.write_text("# earlier\n", encoding="utf-8")
    with pytest.raises(InputError):
        wl_cmd.write_atomically(path, '[[workloads]]\nname = "x"\n')  # no lengths
    assert path.read_text(encoding="utf-8") == "# earlier\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prod.toml"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("not toml [", "not valid TOML"),
        ('[[workloads]]\nname = "a"\ninput_tokens = 1\noutput_tokens = 1\n'
         '[[workloads]]\nname = "b"\ninput_tokens = 1\noutput_tokens = 1\n', "holds 2 workloads"),
        ('x = 1\n[[workloads]]\nname = "a"\ninput_tokens = 1\noutput_tokens = 1\n', "top-level"),
    ],
)  # fmt: skip
def test_bad_workload_files_are_refused(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "w.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as err:
        load_workload_file(path)
    assert needle in str(err.value) and str(path) in str(err.value)


def test_a_top_level_workload_file_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "w.toml"
    path.write_text('name = "a"\ninput_tokens = 12\noutput_tokens = 3\n', encoding="utf-8")
    assert parse_workload(load_workload_file(path)).shapes[0].input.mean == 12
