"""Issue 16's flags and their checks (--trace*, --shard/--group, --timestamps, --workers auto),
the two-step share-out of the global plan (shard, then worker) and the auto worker count."""

from __future__ import annotations

import argparse
import itertools

import pytest

from collectors.loadgen.config import BenchConfig, LoadLevel, parse_shard
from collectors.loadgen.cores import auto_workers, free_cores
from collectors.loadgen.engine import WorkerPlan
from errors import InputError
from services.commands.bench import config_from_args, register


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="servescope", exit_on_error=False)
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["bench", "--endpoint", "http://127.0.0.1:8000", *argv])


def test_trace_flags_make_one_trace_level(tmp_path) -> None:
    cfg = config_from_args(
        parse("--trace", "t.csv", "--trace-speed", "2", "--trace-window", "10m:20m")
    )
    assert cfg.trace == "t.csv" and cfg.trace_speed == 2.0
    assert cfg.trace_window == (600.0, 1200.0)
    assert cfg.levels() == [LoadLevel("trace", 2.0)]
    assert cfg.levels()[0].slug == "trace2" and cfg.levels()[0].label == "trace ×2"
    assert cfg.workload_label == "trace:t.csv"
    assert cfg.requests is None and cfg.duration_s is None  # the whole trace
    cut = config_from_args(parse("--trace", "t.csv", "--requests", "50"))
    assert cut.requests == 50


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("--trace", "t.csv", "--workload", "mixed"), "drop --workload"),
        (("--trace", "t.csv", "--trace-speed", "0"), "--trace-speed must be a number > 0"),
        (("--trace", "t.csv", "--trace-speed", "nan"), "--trace-speed must be a number > 0"),
        (("--trace", "t.csv", "--trace-window", "20m:10m"), "0 ≤ START < END"),
        (("--trace", "t.csv", "--trace-window", "10m"), "is not START:END"),
        (("--trace", "t.csv", "--trace-window", "a:b"), "cannot read the duration"),
        (("--workload", "mixed", "--rate", "2", "--trace-speed", "2"), "apply to --trace"),
        (("--workload", "mixed", "--rate", "2"), "exactly one of --requests N or --duration"),
    ],
)
def test_trace_bad_input_says_what_is_accepted(argv: tuple[str, ...], says: str) -> None:
    with pytest.raises(InputError, match=says.replace("(", r"\(")):
        config_from_args(parse(*argv))


def test_trace_with_arrival_flags_or_two_cuts_is_refused() -> None:
    with pytest.raises(InputError, match="a trace has its own"):
        BenchConfig(endpoint="http://x:1", trace="t.csv", arrival="gamma").validated()
    with pytest.raises(InputError, match="at most one of --requests N or --duration S"):
        BenchConfig(endpoint="http://x:1", trace="t.csv", requests=5, duration_s=3).validated()


def test_shard_is_numbered_from_one_on_the_command_line(capsys) -> None:
    assert parse_shard("1/3") == (0, 3)
    assert parse_shard(" 3/3 ") == (2, 3)
    for bad in ("0/3", "4/3", "3", "a/b", "1/0", "-1/2"):
        with pytest.raises(InputError, match="is not I/N with 1 ≤ I ≤ N"):
            parse_shard(bad)
    with pytest.raises(SystemExit):
        parse("--workload", "mixed", "--rate", "2", "--duration", "5", "--shard", "4/3")
    assert "argument --shard: --shard '4/3' is not I/N" in capsys.readouterr().err


def test_shard_needs_a_group_and_a_group_needs_a_shard() -> None:
    base = ("--workload", "mixed", "--concurrency", "8", "--requests", "40")
    cfg = config_from_args(parse(*base, "--shard", "2/3", "--group", "peak-1", "--host-name", "b"))
    assert cfg.shard == (1, 3) and cfg.group == "peak-1" and cfg.host_name == "b"
    with pytest.raises(InputError, match="--shard needs --group NAME"):
        config_from_args(parse(*base, "--shard", "2/3"))
    with pytest.raises(InputError, match="give --shard I/N too"):
        config_from_args(parse(*base, "--group", "g"))
    with pytest.raises(InputError, match="1–64 letters"):
        config_from_args(parse(*base, "--shard", "1/2", "--group", "no spaces"))


def test_workers_auto_and_timestamps_flags(capsys) -> None:
    base = ("--workload", "mixed", "--concurrency", "8", "--requests", "40")
    assert config_from_args(parse(*base)).workers is None  # auto
    assert config_from_args(parse(*base, "--workers", "auto")).workers is None
    assert config_from_args(parse(*base, "--workers", "3")).workers == 3
    with pytest.raises(SystemExit):
        parse(*base, "--workers", "0")
    assert "give a whole number ≥ 1 or auto" in capsys.readouterr().err
    assert config_from_args(parse(*base, "--timestamps", "loop")).timestamps == "loop"
    with pytest.raises(SystemExit):
        parse(*base, "--timestamps", "gps")
    assert "invalid choice: 'gps'" in capsys.readouterr().err
    with pytest.raises(InputError, match="--timestamps 'gps' unknown"):
        BenchConfig(
            endpoint="http://x:1", workload="mixed", rate=(1.0,), requests=5, timestamps="gps"
        ).validated()


def _plans(requests: int, workers_per_shard: list[int]) -> list[WorkerPlan]:
    shards = len(workers_per_shard)
    return [
        WorkerPlan(
            endpoint="http://x:1",
            api="chat",
            model="m",
            kind="rate",
            value=1.0,
            worker=w,
            workers=k,
            shard=s,
            shards=shards,
            requests=requests,
        )
        for s, k in enumerate(workers_per_shard)
        for w in range(k)
    ]


@pytest.mark.parametrize(
    ("requests", "workers_per_shard"),
    [(100, [1]), (100, [3]), (101, [2, 3, 1]), (7, [4, 4, 4]), (1, [2, 2]), (64, [1, 5])],
)
def test_every_request_belongs_to_exactly_one_worker_of_one_shard(
    requests: int, workers_per_shard: list[int]
) -> None:
    plans = _plans(requests, workers_per_shard)
    owners = [[p for p in plans if p.owns(j)] for j in range(requests)]
    assert all(len(o) == 1 for o in owners)
    for p in plans:
        mine = [j for j in range(requests) if p.owns(j)]
        assert p.my_count() == len(mine)
        # the closed loop's sequence (global_index) walks exactly the owned indices, in order
        assert list(itertools.islice(map(p.global_index, itertools.count()), len(mine))) == mine
        # a shard's share is every shards-th request: hosts with different worker counts agree
        assert all(j % p.shards == p.shard for j in mine)


def test_auto_workers_one_per_free_core_at_least_one_per_256_streams() -> None:
    assert auto_workers("concurrency", 64, cores=16, load=0).workers == 1
    assert auto_workers("concurrency", 256, cores=16, load=0).workers == 4  # 64 each
    assert auto_workers("concurrency", 1024, cores=16, load=0).workers == 16  # one per core
    assert auto_workers("concurrency", 1024, cores=8, load=0).workers == 8
    busy = auto_workers("concurrency", 1024, cores=16, load=14.2)
    assert busy.workers == 2 and "may be client-bound" in busy.reason
    one = auto_workers("concurrency", 1024, cores=1, load=0)
    assert one.workers == 1 and "need 4 workers" in one.reason
    assert auto_workers("concurrency", 300, cores=2, load=1.0).workers == 1  # 1 free: bound
    assert auto_workers("rate", 600.0, cores=8, load=1).workers == 7
    assert auto_workers("rate", 10.0, cores=8, load=0).workers == 1
    assert free_cores(2, 5.0) == 1 and free_cores(8, 0.4) == 8


def test_kernel_timestamps_where_unavailable_are_refused_before_measuring() -> None:
    plain = BenchConfig(
        endpoint="http://x:1", workload="mixed", rate=(1.0,), requests=5, timestamps="kernel"
    )
    assert plain.validated().timestamps == "kernel"  # Linux, plain HTTP: available
    with pytest.raises(InputError, match="https: TLS records are decrypted"):
        BenchConfig(
            endpoint="https://x:1", workload="mixed", rate=(1.0,), requests=5, timestamps="kernel"
        ).validated()
    with pytest.raises(InputError, match="httpx transport"):
        BenchConfig(
            endpoint="http://x:1",
            workload="mixed",
            rate=(1.0,),
            requests=5,
            timestamps="kernel",
            transport="httpx",
        ).validated()
