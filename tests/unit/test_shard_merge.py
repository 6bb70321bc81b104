"""The pure side of one run from many hosts (analysis/shards.py): the clock offset arithmetic and
the run row merged over the hosts' shares."""

from __future__ import annotations

import json

import pytest

from analysis.shards import (
    ClockSample,
    ShardShare,
    clock_offset,
    clock_warning,
    load_definition,
    load_mismatches,
    merge_shares,
    merged_status,
)
from errors import InputError
from store.run_shards import require_postgres_url


def test_offset_is_the_database_clock_minus_the_midpoint_of_the_tightest_sample() -> None:
    # the host's clock is 2.5 s behind the database's; round trips of 40, 4 and 10 ms, the
    # database read at various points inside each
    samples = [
        ClockSample(before=100.000, db=102.530, after=100.040),  # read late in a slow trip
        ClockSample(before=101.000, db=103.501, after=101.004),
        ClockSample(before=102.000, db=104.502, after=102.010),
    ]
    off = clock_offset(samples)
    assert off.rtt_s == pytest.approx(0.004)
    assert off.offset_s == pytest.approx(103.501 - 101.002)
    assert off.uncertainty_s == pytest.approx(0.002)
    # a start fixed on the database's clock, on this host's: 2.499 s earlier
    assert off.to_local(200.0) == pytest.approx(200.0 - 2.499)
    assert off.to_db(off.to_local(200.0)) == pytest.approx(200.0)


def test_a_skewed_host_starts_with_the_others() -> None:
    """Two hosts, clocks 0.3 s apart, each measuring its offset: the start each computes on its
    own clock is the same true instant."""
    true_start = 1_000.0  # on the database's clock (the reference)
    for skew in (-0.3, 0.0, 0.3):  # host clock = db clock + skew
        samples = [ClockSample(500.0 + skew, 500.001, 500.002 + skew)]
        local = clock_offset(samples).to_local(true_start)
        assert local - skew == pytest.approx(true_start, abs=1e-9)


def test_no_usable_sample_is_an_error() -> None:
    with pytest.raises(ValueError, match="no clock sample"):
        clock_offset([ClockSample(before=2.0, db=1.0, after=1.0)])


def test_clock_warning_only_beyond_the_limit() -> None:
    assert clock_warning("h", 49.0) is None
    assert clock_warning("h", None) is None
    ahead = clock_warning("h", -120.0)
    assert ahead is not None and "120 ms ahead of" in ahead
    behind = clock_warning("h", 80.0)
    assert behind is not None and "80 ms behind" in behind


def share(shard: int, **kw: object) -> ShardShare:
    base: dict[str, object] = {
        "shard": shard,
        "shards": 3,
        "host": f"h{shard + 1}",
        "status": "completed",
        "started_at": 100.0 + shard,
        "ended_at": 110.0 + shard,
        "requests": 10,
        "ok": 9,
        "errors": 1,
        "client_bound": False,
        "clock_offset_ms": 0.0,
        "summary": {
            "requests": 10,
            "ok": 9,
            "errors": 1,
            "cancelled": 0,
            "output_tokens": 90,
            "achieved_rate": 1.0,
            "scheduled_rate": 1.0,
            "p99_lag_ms": 1.0 + shard,
            "workers": 2,
            "timestamps": ["kernel"],
        },
    }
    base.update(kw)
    return ShardShare(**base)  # type: ignore[arg-type]


def test_merge_spans_every_host_and_adds_their_counts() -> None:
    merged = merge_shares([share(2), share(0), share(1)], shards=3)
    assert merged["status"] == "completed"
    assert merged["started_at"] == 100.0 and merged["ended_at"] == 112.0
    assert merged["duration_s"] == pytest.approx(12.0)
    assert merged["achieved_rate"] == pytest.approx(3.0)
    summary = merged["tool_summary"]
    assert (summary["requests"], summary["ok"], summary["errors"]) == (30, 27, 3)
    assert summary["output_tokens"] == 270 and summary["workers"] == 6
    assert summary["p99_lag_ms"] == 3.0  # the worst host's
    assert summary["error_rate"] == pytest.approx(0.1)
    assert [h["host"] for h in summary["hosts"]] == ["h1", "h2", "h3"]
    assert merged["host"] == "h1, h2, h3"
    assert merged["client_bound"] is False and merged["notes_lines"] == []


def test_merge_moves_each_hosts_span_onto_the_database_clock() -> None:
    # h2's clock runs 2 s behind: its instants + 2 s are the database's
    merged = merge_shares(
        [share(0), share(1, started_at=97.5, ended_at=108.0, clock_offset_ms=2000.0), share(2)],
        shards=3,
    )
    assert merged["started_at"] == pytest.approx(99.5)  # h2's 97.5 on its clock
    assert merged["ended_at"] == 112.0
    assert any("h2's clock is 2000 ms behind" in n for n in merged["notes_lines"])
    assert merged["tool_summary"]["clock_warnings"]


def test_a_failed_or_stopped_host_makes_the_run_interrupted_and_is_named() -> None:
    lost = share(2, status="failed", error="no heartbeat since X", summary={}, requests=4, ok=4)
    merged = merge_shares([share(0), share(1), lost], shards=3)
    assert merged["status"] == "interrupted"
    assert merged["tool_summary"]["failed_hosts"] == ["h3"]
    assert merged["tool_summary"]["requests"] == 24  # the lost host's as of its last beat
    assert any("h3 (shard 3/3) failed: no heartbeat since X" in n for n in merged["notes_lines"])

    stopped = merge_shares([share(0), share(1, status="interrupted"), share(2)], shards=3)
    assert stopped["status"] == "interrupted"
    assert any("h2 (shard 2/3) was stopped" in n for n in stopped["notes_lines"])

    missing = merge_shares([share(0), share(1)], shards=3)
    assert missing["status"] == "interrupted"
    assert "shard 3/3 never joined" in missing["notes_lines"]


def test_client_bound_when_any_host_was_with_each_reason_named() -> None:
    merged = merge_shares(
        [share(0), share(1, client_bound=True, reason="P99 client lag 12 ms"), share(2)], shards=3
    )
    assert merged["client_bound"] is True
    assert merged["client_bound_reason"] == "h2: P99 client lag 12 ms"


def test_status_over_totals_when_every_share_arrived() -> None:
    ok = [share(i) for i in range(3)]
    assert merged_status(ok, max_error_rate=0.2) == "completed"
    assert merged_status(ok, max_error_rate=0.05) == "failed"  # 10 % failed > 5 %
    none_ok = [share(i, ok=0, errors=10) for i in range(3)]
    assert merged_status(none_ok) == "failed"


def test_shard_store_urls() -> None:
    require_postgres_url("postgresql+psycopg://bench:secret@pg/servescope")
    with pytest.raises(InputError) as refused:
        require_postgres_url("duckdb:///x.duckdb")
    assert "needs a PostgreSQL store; duckdb:///x.duckdb is duckdb" in str(refused.value)
    with pytest.raises(InputError) as err:
        require_postgres_url("sqlite://user:secret@/x.db")
    assert "secret" not in str(err.value)


def test_only_the_first_host_scrapes_the_server() -> None:
    from collectors.loadgen.config import BenchConfig
    from collectors.loadgen.runner import _live_metrics_urls

    def urls(shard: tuple[int, int] | None) -> tuple[str, ...]:
        cfg = BenchConfig(
            endpoint="http://llm:8000",
            metrics_url="http://llm:8000/metrics",
            shard=shard,
            group="g" if shard else None,
        )
        return _live_metrics_urls(cfg, None)

    assert urls(None) == ("http://llm:8000/metrics",)
    assert urls((0, 3)) == ("http://llm:8000/metrics",)
    assert urls((1, 3)) == urls((2, 3)) == ()


def _host_run(workload: str, requests: int, max_tokens: int, **extra: object) -> dict[str, object]:
    """A --shard host's run row as bench builds it (client_params a dict)."""
    params: dict[str, object] = {
        "workload": workload,
        "requests": requests,
        "duration_s": None,
        "max_tokens": max_tokens,
        "load": {"kind": "concurrency", "value": 4.0},
        "arrival": "concurrency",
        "api": "chat",
        "seed": 0,
        "trace": None,
    }
    params.update(extra)
    return {"run_id": "g-c4", "model": "m", "workload": workload, "client_params": params}


def test_hosts_with_another_load_are_told_apart_field_by_field() -> None:
    # the case: host 1 short-in-short-out --requests 20 --max-tokens 8, host 2
    # long-in-long-out --requests 400 --max-tokens 64 merged silently into one run
    first = _host_run("short-in-short-out", 20, 8)
    other = _host_run("long-in-long-out", 400, 64)
    assert load_mismatches(first, other) == [
        "--workload long-in-long-out here, short-in-short-out on the first host",
        "--requests 400 here, 20 on the first host",
        "--max-tokens 64 here, 8 on the first host",
    ]
    # the same load agrees, whether client_params is a dict or the stored JSON
    stored = dict(first, client_params=json.dumps(first["client_params"]))
    assert load_mismatches(stored, _host_run("short-in-short-out", 20, 8)) == []
    assert load_definition(stored) == load_definition(first)


@pytest.mark.parametrize(
    ("extra", "phrase"),
    [
        ({"load": {"kind": "rate", "value": 5.0}}, "the load (--concurrency/--rate) rate 5.0 here"),
        ({"arrival": "poisson"}, "--arrival poisson here, concurrency"),
        ({"api": "completions"}, "--api completions here, chat"),
        ({"seed": 7}, "--seed 7 here, 0"),
        ({"workload_sha256": "ab" * 32}, "the workload file's content"),
        ({"trace": {"sha256": "f" * 64, "file": "t.csv"}}, "--trace (its sha256) ffffffffffff"),
        ({"duration_s": 30.0}, "--duration 30.0 here, none"),
    ],
)
def test_each_load_field_must_match_the_first_host(extra: dict[str, object], phrase: str) -> None:
    first = _host_run("chat", 20, 8)
    (found,) = load_mismatches(first, _host_run("chat", 20, 8, **extra))
    assert found.startswith(phrase), found


def test_the_endpoint_model_must_match() -> None:
    first = _host_run("chat", 20, 8)
    (found,) = load_mismatches(first, dict(_host_run("chat", 20, 8), model="other"))
    assert found == "the endpoint's model other here, m on the first host"
