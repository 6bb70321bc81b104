"""The load generator against the loopback mock server, on real sockets (separate process).

Timing is compared with what the server itself recorded sending; failures (HTTP errors,
connection resets, stalls, truncated streams, error events) must become rows, not crashes.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Iterator

import pytest

from collectors.loadgen.client import HttpxEndpoint
from collectors.loadgen.engine import Driver, ResultBatch, WorkerPlan, rows_as_dicts
from collectors.loadgen.prompts import Calibration
from collectors.loadgen.workloads import parse_workload
from sim.mockserver import MockServer

WORKLOAD = parse_workload({"name": "t", "input_tokens": 32, "output_tokens": 20})


@pytest.fixture(scope="module")
def timed_server() -> Iterator[MockServer]:
    server = MockServer(ttft_ms=50, itl_ms=10, record=True)
    server.start()
    yield server
    server.stop()


def drive(
    url: str, **plan_args: object
) -> tuple[list[dict[str, object]], list[list[float]], Driver]:
    defaults: dict[str, object] = {
        "endpoint": url,
        "api": "chat",
        "model": "mock-model",
        "kind": "concurrency",
        "value": 1.0,
        "requests": 4,
        "workload": WORKLOAD,
        "calibration": Calibration(),
        "timeout_s": 10.0,
        "prewarm": True,
    }
    plan = WorkerPlan(**(defaults | plan_args))  # type: ignore[arg-type]
    batches: list[ResultBatch] = []

    async def main() -> Driver:
        endpoint = HttpxEndpoint(url, api=plan.api, timeout_s=plan.timeout_s)
        driver = Driver(plan, endpoint, batches.append)
        try:
            await driver.warmup()
            await driver.run()
        finally:
            await endpoint.aclose()
        return driver

    driver = asyncio.run(main())
    rows = [r for b in batches for r in rows_as_dicts(b)]
    gaps = [list(g) for b in batches for g in b.gaps]
    return rows, gaps, driver


def test_measured_ttft_and_itl_match_what_the_server_sent(timed_server: MockServer) -> None:
    timed_server.stats(reset=True)
    rows, gaps, _ = drive(timed_server.url, value=4.0, requests=16)
    truth = timed_server.stats()
    assert [r["status"] for r in rows] == ["ok"] * 16
    assert {r["output_tokens"] for r in rows} == {20}
    assert not any(r["output_tokens_estimated"] for r in rows)
    ttft = [float(r["ttft_ms"]) for r in rows]  # type: ignore[arg-type]
    itl = [g for gs in gaps for g in gs]
    assert len(itl) == 16 * 19
    # medians: robust to the scheduling noise of a shared machine
    assert statistics.median(ttft) == pytest.approx(statistics.median(truth["ttft_ms"]), abs=3.0)
    assert statistics.median(itl) == pytest.approx(statistics.median(truth["itl_ms"]), abs=1.0)
    assert statistics.median(itl) == pytest.approx(10.0, abs=1.5)
    for r in rows:
        assert r["sent_at"] <= r["first_token_at"] <= r["done_at"]  # type: ignore[operator]
        assert r["e2e_ms"] > r["ttft_ms"] >= 45.0  # type: ignore[operator]
        assert r["input_tokens"] and r["finish_reason"] == "length"


def test_completions_api_and_open_loop(timed_server: MockServer) -> None:
    rows, _, driver = drive(
        timed_server.url,
        api="completions",
        kind="rate",
        value=50.0,
        arrival="constant",
        requests=10,
    )
    assert [r["status"] for r in rows] == ["ok"] * 10
    sched = sorted(float(r["scheduled_at"]) for r in rows)  # type: ignore[arg-type]
    assert sched[-1] - sched[0] == pytest.approx(9 / 50.0, abs=1e-6)  # constant arrivals
    assert all(float(r["lag_ms"]) >= 0 for r in rows)  # type: ignore[arg-type]
    assert driver.summary.sent == 10


def test_failures_become_rows_with_statuses() -> None:
    script = "ok,500,reset:3,stall:2,close:2,error-event:2,429"
    with MockServer(itl_ms=2, ttft_ms=2, script=script) as url:
        rows, _, _ = drive(url, requests=7, timeout_s=1.0, warmup=0, prewarm=False)
    rows.sort(key=lambda r: int(r["seq"]))  # type: ignore[arg-type]
    got = [(r["status"], r["http_status"]) for r in rows]
    assert got == [
        ("ok", 200),
        ("error", 500),
        ("error", 200),
        ("timeout", 200),
        ("error", 200),
        ("error", 200),
        ("error", 429),
    ]
    errors = [str(r["error"]) for r in rows]
    assert "mock server error" in errors[1]
    assert "ReadError" in errors[2] or "reset" in errors[2].lower()
    assert "RemoteProtocolError" in errors[4]
    assert "mock error event" in errors[5]
    assert rows[2]["ttft_ms"] is not None and rows[2]["chunks"] == 3  # partial data kept
    assert rows[3]["chunks"] == 2


def test_unreachable_endpoint_rows_not_crash() -> None:
    with MockServer() as url:
        pass  # the port is now closed
    rows, _, _ = drive(url, requests=2, prewarm=False, warmup=0)
    assert [r["status"] for r in rows] == ["error", "error"]
    assert all("ConnectError" in str(r["error"]) for r in rows)


def test_multi_turn_carries_the_history() -> None:
    wl = parse_workload(
        {
            "name": "mt",
            "input_tokens": 8,
            "output_tokens": 3,
            "turns": {"dist": "fixed", "value": 3},
            "history": "full",
        }
    )
    with MockServer() as url:
        rows, _, _ = drive(url, requests=6, workload=wl, value=1.0)
    rows.sort(key=lambda r: int(r["seq"]))  # type: ignore[arg-type]
    assert [r["turn"] for r in rows] == [0, 1, 2, 0, 1, 2]
    assert len({r["conversation_id"] for r in rows}) == 2
    inputs = [int(r["input_tokens"]) for r in rows[:3]]  # type: ignore[arg-type]
    assert inputs[0] < inputs[1] < inputs[2]  # each turn resends the growing history


def test_url_credentials_go_in_a_header_and_never_into_rows() -> None:
    """``http://user:pass@host/v1?q``: the password is sent as a Basic header (never in a URL),
    the query string is kept on every request, and a server echoing the headers back cannot
    get the password into a row."""
    with MockServer(script="echo,echo-event:1") as url:
        endpoint = url.replace("http://", "http://tester:pw-FAKE-9e1c@") + "/v1?tenant=7"
        rows, _, _ = drive(endpoint, requests=2, prewarm=False, warmup=0)
    rows.sort(key=lambda r: int(r["seq"]))  # type: ignore[arg-type]
    assert [(r["status"], r["http_status"]) for r in rows] == [("error", 401), ("error", 200)]
    for row in rows:
        error = str(row["error"])
        assert "authorization: Basic ***" in error
        assert "pw-FAKE-9e1c" not in error and "dGVzdGVy" not in error  # base64 of "tester"
