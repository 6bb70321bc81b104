"""BenchConfig validation, the bench subcommand's flags, engine params, client-bound verdict."""

from __future__ import annotations

import argparse

import pytest

from collectors.loadgen.client import base_url, build_body, error_text
from collectors.loadgen.config import (
    MAX_CONCURRENCY,
    BenchConfig,
    LoadLevel,
    normalise_engine_params,
    parse_list,
)
from collectors.loadgen.results import client_bound
from collectors.loadgen.runner import public_endpoint
from collectors.loadgen.workloads import TurnSpec
from errors import InputError
from services.commands.bench import config_from_args, register


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="servescope", exit_on_error=False)
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["bench", *argv])


BASE = ("--endpoint", "http://127.0.0.1:8000", "--workload", "mixed")


def test_cli_builds_a_config() -> None:
    args = parse(
        *BASE,
        "--rate",
        "2,4.5",
        "--arrival",
        "gamma",
        "--burstiness",
        "0.5",
        "--duration",
        "30",
        "--engine-param=--max-num-seqs=64",
        "--engine-param",
        "gpu_memory_utilization=0.9",
        "--engine-param",
        "prefix_caching=on",
        "--ignore-eos",
        "--max-tokens",
        "64",
        "--workers",
        "2",
    )
    cfg = config_from_args(args)
    assert cfg.rate == (2.0, 4.5) and cfg.arrival == "gamma" and cfg.burstiness == 0.5
    assert cfg.duration_s == 30 and cfg.requests is None
    assert cfg.engine_params == {
        "max_batch_size": 64,
        "kv_memory_fraction": 0.9,
        "prefix_caching": True,
    }
    assert [lv.label for lv in cfg.levels()] == ["rate=2/s", "rate=4.5/s"]
    assert args.func.__name__ == "run"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ((*BASE, "--concurrency", "1,x", "--requests", "5"), "not a number"),
        ((*BASE, "--concurrency", "0", "--requests", "5"), "> 0"),
        ((*BASE, "--concurrency", "4", "--requests", "5", "--arrival", "gamma"), "--rate runs"),
        ((*BASE, "--rate", "4", "--requests", "5", "--burstiness", "2"), "--arrival gamma"),
        (
            ("--endpoint", "ftp://x", "--workload", "mixed", "--rate", "1", "--requests", "1"),
            "http",
        ),
        ((*BASE, "--rate", "4", "--requests", "5", "--engine-param", "novalue"), "KEY=VALUE"),
    ],
)
def test_cli_errors_are_specific(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(InputError, match=message):
        config_from_args(parse(*argv))


def test_mutually_exclusive_flags_are_enforced_by_argparse() -> None:
    with pytest.raises((argparse.ArgumentError, SystemExit)):
        parse(*BASE, "--concurrency", "1", "--rate", "2", "--requests", "3")


def test_config_validation_in_python() -> None:
    with pytest.raises(InputError, match="exactly one of --workload NAME or --dataset FILE"):
        BenchConfig(endpoint="http://x:1", concurrency=(1,), requests=1).validated()
    with pytest.raises(InputError, match="--concurrency 1,8,32"):
        BenchConfig(endpoint="http://x:1", workload="mixed", requests=1).validated()
    with pytest.raises(InputError, match="--requests N or --duration S"):
        BenchConfig(endpoint="http://x:1", workload="mixed", concurrency=(1,)).validated()
    with pytest.raises(InputError, match="chat, completions"):
        BenchConfig(
            endpoint="http://x:1", workload="w", api="x", concurrency=(1,), requests=1
        ).validated()


def test_a_refused_url_is_quoted_without_its_password() -> None:
    bad = "ftp://user:hunter2-pw@host:21/v1"
    with pytest.raises(InputError) as info:
        BenchConfig(endpoint=bad, workload="mixed", concurrency=(1,), requests=1).validated()
    assert "hunter2-pw" not in str(info.value) and "ftp://***@host:21/v1" in str(info.value)


def test_requests_below_one_is_refused_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(*BASE, "--rate", "4", "--requests", "0")
    assert "argument --requests: '0': give a whole number ≥ 1" in capsys.readouterr().err
    with pytest.raises(InputError, match="--requests must be ≥ 1"):
        BenchConfig(endpoint="http://x:1", workload="w", rate=(1.0,), requests=0).validated()


def test_parse_list_and_engine_params() -> None:
    assert parse_list("1, 8,32", flag="--concurrency", kind=int) == (1, 8, 32)
    assert parse_list(["1", "8, 32"], flag="--concurrency", kind=int) == (1, 8, 32)
    assert parse_list(["2.5", "4"], flag="--rate", kind=float) == (2.5, 4.0)
    assert normalise_engine_params(["--tensor-parallel-size=2", "Custom-Flag=abc"]) == {
        "tensor_parallel": 2,
        "custom_flag": "abc",
    }
    # llama.cpp's -c is the total context of its -np slots, not one request's limit
    assert normalise_engine_params(["-c=8192", "-np=4", "--max-model-len=4096"]) == {
        "ctx_size": 8192,
        "max_batch_size": 4,
        "max_model_len": 4096,
    }


def test_urls_and_bodies() -> None:
    assert base_url("http://h:8000/v1/") == "http://h:8000"
    assert base_url("http://h:8000/v1/chat/completions") == "http://h:8000"
    assert public_endpoint("http://user:secret@h:8000/v1?key=abc") == "http://h:8000"
    body, _ = build_body("chat", "m", TurnSpec("hi", 8), prefix="sys", ignore_eos=True)
    assert body.startswith(b'{"model":"m","messages":[{"role":"system","content":"sys"}')
    assert b'"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true' in body
    body, prompt = build_body("completions", "m", TurnSpec("hi", 8))
    assert prompt == "hi" and b'"max_tokens":8' in body and b"ignore_eos" not in body
    assert error_text(500, b'{"error":{"message":"bad"}}') == "HTTP 500: bad"


def test_client_bound_verdict() -> None:
    sched = [i * 0.1 for i in range(101)]
    on_time = client_bound(sched, sched, [0.5] * 101, open_loop=True)
    assert not on_time.bound and on_time.achieved_rate == pytest.approx(10.0)
    late = [s * 1.2 for s in sched]
    slow = client_bound(late, sched, [0.5] * 101, open_loop=True)
    assert slow.bound and "below 95%" in (slow.reason or "")
    laggy = client_bound(sched, sched, [0.5] * 98 + [30.0] * 3, open_loop=True)
    assert laggy.bound and "P99 client lag" in (laggy.reason or "")
    closed = client_bound(sched, sched, [1.0] * 101, open_loop=False, duration_s=10.0)
    assert not closed.bound and closed.achieved_rate == pytest.approx(10.1)
    # sends on time, but the measuring loop itself woke late: its timestamps cannot be trusted
    stalled = client_bound(
        sched, sched, [1.0] * 101, open_loop=False, duration_s=10.0, loop_lag_p99_ms=25.0
    )
    assert stalled.bound and "event loop woke 25.0 ms late" in (stalled.reason or "")
    assert not client_bound(
        sched, sched, [1.0] * 101, open_loop=False, duration_s=10.0, loop_lag_p99_ms=2.0
    ).bound


# --- streams: capped at --requests, at most MAX_CONCURRENCY (issue 10 item 6) -------------------


def test_streams_beyond_the_requests_are_capped_and_said_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = config_from_args(parse(*BASE, "--concurrency", "99999999", "--requests", "5"))
    assert cfg.concurrency == (5,)
    assert [lv.label for lv in cfg.levels()] == ["c=5"]
    assert cfg.capped_note(cfg.levels()[0]) == {
        "requested": [99999999],
        "streams": 5,
        "reason": "--requests 5: streams beyond the number of requests are never used",
    }
    assert capsys.readouterr().err == (
        "servescope bench: --concurrency 99,999,999 capped at 5 streams "
        "(--requests 5: more streams would never send a request)\n"
    )


def test_capped_levels_merge_and_survive_revalidation() -> None:
    cfg = BenchConfig(
        endpoint="http://x:1", workload="mixed", concurrency=(1, 8, 16, 32), requests=10
    ).validated()
    assert cfg.concurrency == (1, 8, 10)  # 16 and 32 are both 10 streams: one run
    assert cfg.concurrency_requested == {10: (16, 32)}
    assert cfg.validated() == cfg
    assert cfg.capped_note(LoadLevel("concurrency", 8.0)) is None
    assert cfg.capped_note(LoadLevel("rate", 10.0)) is None
    note = cfg.capped_note(LoadLevel("concurrency", 10.0))
    assert note is not None and note["requested"] == [16, 32]
    # with --duration nothing is capped
    timed = BenchConfig(
        endpoint="http://x:1", workload="mixed", concurrency=(64,), duration_s=5
    ).validated()
    assert timed.concurrency == (64,) and timed.concurrency_requested == {}


def test_streams_above_the_maximum_are_refused_naming_it() -> None:
    with pytest.raises(InputError) as info:
        config_from_args(parse(*BASE, "--concurrency", "99999999", "--duration", "10"))
    assert info.value.message == (
        f"--concurrency 99,999,999 is above the maximum of {MAX_CONCURRENCY:,} streams per "
        "servescope bench"
    )
    assert info.value.hint and "several bench processes" in info.value.hint
    ok = config_from_args(parse(*BASE, "--concurrency", str(MAX_CONCURRENCY), "--duration", "1"))
    assert ok.concurrency == (MAX_CONCURRENCY,)
    # capped at --requests first: a cap below the maximum is fine, one above it is not
    with pytest.raises(InputError, match="above the maximum"):
        BenchConfig(
            endpoint="http://x:1",
            workload="mixed",
            concurrency=(MAX_CONCURRENCY * 10,),
            requests=MAX_CONCURRENCY + 1,
        ).validated()
