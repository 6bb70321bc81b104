"""``servescope workload from-metrics`` round trip on the sim, over loopback, into DuckDB files.

Production: a sim watched (``collectors.watch.LiveCollection``) while a bench with a known
lognormal length mix runs against it. ``workload from-metrics`` turns the watched prompt/output
length histograms into a workload file; ``servescope bench --workload-file`` replays it against
a fresh sim, watched too. The replay reproduces production's length distribution: the KS
distance (``analysis.length_mix.distance``) between the replay's measured request lengths and
production's histogram, and between the two watched histograms, stays below ``THRESHOLD``.
Then the refusals: exit 2, nothing written, an existing file untouched.
"""

from __future__ import annotations

import argparse
import math
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from analysis import length_mix
from analysis.length_mix import LengthDist
from collectors import watch
from collectors.loadgen.config import BenchConfig
from collectors.loadgen.runner import run_benchmark
from errors import InputError
from services.commands import bench, workload
from services.views.production_mix import production_mix
from sim.engine import EngineConfig
from sim.server import start_in_thread
from store import request_rows
from store.lifecycle import open_store

#: The stated bound of the round trip's KS distance (docs/workloads.md).
THRESHOLD = 0.1
REQUESTS = 600
#: Production's known mix: long-tailed prompts over several of the sim's 1-2-5 buckets, short
#: outputs (generated in full: ignore_eos) so the test takes seconds.
KNOWN = {
    "name": "known-lognormal",
    "input_tokens": {"dist": "lognormal", "mean": 400, "sd": 300, "min": 16, "max": 3000},
    "output_tokens": {"dist": "lognormal", "mean": 24, "sd": 14, "min": 2, "max": 120},
}


def wait_for(predicate: Callable[[], bool], timeout_s: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _cli(*argv: str) -> int:
    """Run ``workload``/``bench`` through their own parsers, as cli.py composes them."""
    parser = argparse.ArgumentParser(prog="servescope")
    sub = parser.add_subparsers(dest="command", required=True)
    workload.register(sub)
    bench.register(sub)
    args = parser.parse_args(list(argv))
    try:
        return int(args.func(args) or 0)
    except InputError:
        return 2


@dataclass
class Watched:
    """One sim watched while ``drive`` loaded it: the store, the target, the run ids."""

    db: str
    target: str
    run_ids: list[str]


def _watched(db: str, drive: Callable[[str, str], list[str]]) -> Watched:
    sim = start_in_thread(EngineConfig.from_names("H100-SXM-80GB", "llama-3.1-8b"), time_scale=20)
    store = open_store(db)
    try:
        live = watch.LiveCollection.start(
            store, metrics_urls=[sim.url], gpu=False, interval_s=0.25, flush_interval_s=0.5
        )
        try:
            wait_for(lambda: live.watcher.states[0].scrapes >= 2, what="two scrapes")
            run_ids = drive(sim.url, db)
            seen = live.watcher.states[0].scrapes
            wait_for(lambda: live.watcher.states[0].scrapes >= seen + 2, what="final scrapes")
        finally:
            live.stop()
    finally:
        store.dispose()
        sim.stop()
    return Watched(db, f"{sim.url}/metrics", run_ids)


@dataclass
class RoundTrip:
    production: Watched
    replay: Watched
    spec: Path
    runs_db: str


@pytest.fixture(scope="module")
def round_trip(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RoundTrip]:
    tmp = tmp_path_factory.mktemp("roundtrip")

    def known_bench(url: str, db: str) -> list[str]:
        store = open_store(db)
        try:
            config = BenchConfig(
                endpoint=url,
                workload_spec=KNOWN,
                concurrency=(64,),
                requests=REQUESTS,
                ignore_eos=True,
                seed=1,
                gpu=False,
                metrics_url=None,
            )
            return run_benchmark(config, store, progress=False)
        finally:
            store.dispose()

    production = _watched(f"duckdb:///{tmp / 'production.duckdb'}", known_bench)
    spec = tmp / "prod.toml"
    code = _cli(
        "workload", "from-metrics", "--target", production.target, "--window", "1h",
        "--out", str(spec), "--db", production.db, "--min-requests", "100",
    )  # fmt: skip
    assert code == 0 and spec.exists()
    runs_db = f"duckdb:///{tmp / 'replay-runs.duckdb'}"

    def replay_bench(url: str, db: str) -> list[str]:
        code = _cli(
            "bench", "--endpoint", url, "--workload-file", str(spec), "--concurrency", "64",
            "--requests", str(REQUESTS), "--ignore-eos", "--seed", "2", "--metrics-url", "off",
            "--no-gpu", "--db", runs_db,
        )  # fmt: skip
        assert code == 0
        store = open_store(runs_db)
        try:
            return list(store.read_df("SELECT run_id FROM runs")["run_id"])
        finally:
            store.dispose()

    replay = _watched(f"duckdb:///{tmp / 'replay-watch.duckdb'}", replay_bench)
    yield RoundTrip(production, replay, spec, runs_db)


def _histograms(w: Watched) -> tuple[LengthDist, LengthDist]:
    store = open_store(w.db)
    try:
        mix = production_mix(store, target=w.target, window_s=3600.0)
    finally:
        store.dispose()
    assert mix is not None and mix.prompt is not None and mix.output is not None
    return mix.prompt, mix.output


def _measured(db: str, run_ids: list[str]) -> tuple[list[float], list[float]]:
    store = open_store(db)
    try:
        (run_id,) = run_ids
        rows = request_rows.run_requests_all(store, run_id)
    finally:
        store.dispose()
    ok = rows[rows["status"] == "ok"]
    assert len(ok) == REQUESTS
    return ok["input_tokens"].astype(float).tolist(), ok["output_tokens"].astype(float).tolist()


def test_the_written_spec_is_production_histograms_with_its_header(round_trip: RoundTrip) -> None:
    prompt, output = _histograms(round_trip.production)
    text = round_trip.spec.read_text(encoding="utf-8")
    doc = tomllib.loads(text)
    (entry,) = doc["workloads"]
    assert entry["name"] == "prod"
    for key, dist in (("input_tokens", prompt), ("output_tokens", output)):
        h = entry[key]
        assert h["dist"] == "histogram"
        # every bucket that held a request is there, with its count, on the histogram's edges
        finite = [e for e, c in zip(dist.edges, dist.counts, strict=True) if math.isfinite(e)]
        assert h["edges"][0] == 0 and h["edges"][1:] == finite[: len(h["weights"])]
        assert sum(h["weights"]) == dist.total
        assert not dist.open_ended  # the sim's buckets reach 100k tokens: +Inf stays empty
    # the production histogram counted the bench's requests (and its 2 calibration probes)
    assert REQUESTS <= prompt.total <= REQUESTS + 4
    for needle in (
        round_trip.production.target,
        "window",
        f"Requests finished in the window: {round(prompt.total)}",
        "Independence assumption",
        "+Inf bucket",
        "was empty and is dropped",
    ):
        assert needle in text, needle


def test_production_histogram_is_the_known_benchs_lengths(round_trip: RoundTrip) -> None:
    """Sanity of the source: the watched histogram bins the first bench's own lengths."""
    prompt, output = _histograms(round_trip.production)
    inputs, outputs = _measured(round_trip.production.db, round_trip.production.run_ids)
    assert length_mix.distance(length_mix.from_lengths(inputs, prompt.edges), prompt) < 0.01
    assert length_mix.distance(length_mix.from_lengths(outputs, output.edges), output) < 0.01


def test_bench_with_the_written_spec_reproduces_production_lengths(round_trip: RoundTrip) -> None:
    prompt, output = _histograms(round_trip.production)
    inputs, outputs = _measured(round_trip.runs_db, round_trip.replay.run_ids)
    measured_prompt = length_mix.from_lengths(inputs, prompt.edges)
    measured_output = length_mix.from_lengths(outputs, output.edges)
    d_prompt = length_mix.distance(measured_prompt, prompt)
    d_output = length_mix.distance(measured_output, output)
    replay_prompt, replay_output = _histograms(round_trip.replay)
    h_prompt = length_mix.distance(replay_prompt, prompt)
    h_output = length_mix.distance(replay_output, output)
    print(
        f"round trip KS: measured vs production prompt {d_prompt:.4f}, output {d_output:.4f}; "
        f"replay histogram vs production prompt {h_prompt:.4f}, output {h_output:.4f}"
    )
    assert d_prompt < THRESHOLD and d_output < THRESHOLD
    assert h_prompt < THRESHOLD and h_output < THRESHOLD
    # and a workload that is not production's is told apart: the material threshold fires
    shifted = length_mix.from_lengths([x * 4 for x in inputs], prompt.edges)
    assert length_mix.distance(shifted, prompt) >= length_mix.MATERIAL_DISTANCE


def _refused(*argv: str) -> str:
    """The InputError (cli.main prints it and exits 2) of a from-metrics that must refuse."""
    parser = argparse.ArgumentParser(prog="servescope")
    sub = parser.add_subparsers(dest="command", required=True)
    workload.register(sub)
    args = parser.parse_args(["workload", "from-metrics", *argv])
    with pytest.raises(InputError) as err:
        args.func(args)
    return str(err.value)


def test_refusals_write_nothing_and_leave_an_existing_file(
    round_trip: RoundTrip, tmp_path: Path
) -> None:
    db, target = round_trip.production.db, round_trip.production.target
    out = tmp_path / "prod.toml"
    out.write_text("# an earlier spec\n", encoding="utf-8")
    base = ["--db", db, "--out", str(out)]
    cases = {
        "unknown target": (["--target", "http://nowhere:1/metrics"], target),
        "bad window": (["--target", target, "--window", "24 hours"], "24h"),
        "bad end": (["--target", target, "--end", "yesterday"], "ISO 8601"),
        "too few": (["--target", target, "--min-requests", "100000"], "at least 100000"),
        "empty window": (
            ["--target", target, "--end", "2020-01-01T00:00:00Z", "--window", "1h"],
            "vLLM",
        ),
        "missing folder": (
            ["--target", target, "--out", str(tmp_path / "no" / "p.toml")],
            "does not exist",
        ),
    }
    for why, (argv, needle) in cases.items():
        message = _refused(*base, *argv)
        assert needle in message, (why, message)
        assert out.read_text(encoding="utf-8") == "# an earlier spec\n", why
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prod.toml"]  # no temp file left
    # host:port names the same target as its /metrics URL
    ok = _cli(
        "workload", "from-metrics", "--target", target.removesuffix("/metrics"), "--db", db,
        "--out", str(out), "--window", "1h",
    )  # fmt: skip
    assert ok == 0 and tomllib.loads(out.read_text(encoding="utf-8"))["workloads"][0]["name"]


def test_bench_refuses_a_bad_workload_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[[workloads]]\nname = "p"\noutput_tokens = 8\n[workloads.input_tokens]\n'
        'dist = "histogram"\nedges = [0, 10, 5]\nweights = [1, 1]\n',
        encoding="utf-8",
    )
    argv = ["bench", "--endpoint", "http://127.0.0.1:9", "--concurrency", "1", "--requests", "1"]
    parser = argparse.ArgumentParser(prog="servescope")
    sub = parser.add_subparsers(dest="command", required=True)
    bench.register(sub)
    huge = tmp_path / "huge.toml"  # issue 24: written by from-metrics, then an OverflowError
    huge.write_text(bad.read_text().replace("[0, 10, 5]", "[0, 10, 1e300]"), encoding="utf-8")
    for path, needle in (
        (bad, "strictly ascending"),
        (tmp_path / "absent.toml", "does not exist"),
        (huge, "histogram edge 1e+300 is above the 2,097,152 tokens a request may have"),
    ):
        args = parser.parse_args([*argv, "--workload-file", str(path)])
        with pytest.raises(InputError) as err:
            bench.config_from_args(args)
        assert str(path) in str(err.value) and needle in str(err.value)
