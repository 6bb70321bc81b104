"""Nothing lost, nothing wrong under faults and hostile input (issue 10).

Every test runs a real ``servescope bench`` (the Python API, or the CLI) against the loopback
mock server in its own process, scripted to misbehave one way (``sim/mockserver.py``: non-SSE
200s, malformed events, streams cut without ``[DONE]``, resets, stalls, slow heads, servers
echoing the request's headers). The server counts what it received, so accounting is checked
against the truth: every request it got is one stored row, ``ok + error + timeout + cancelled =
sent``. Failed requests never reach the stored percentiles, and the API key and the URL's
password never reach the store (any table, any column), the logs (``-v``) or the exports.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from collectors.loadgen.client import HttpxEndpoint
from collectors.loadgen.config import BenchConfig
from collectors.loadgen.runner import run_benchmark
from collectors.loadgen.transport import LeanTransport
from errors import EndpointError
from sim.mockserver import MockServer
from store import run_figures
from store.db import Store
from store.lifecycle import open_store

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-servescope-FAKE-KEY-7f3a9c2e1b"
PASSWORD = "pw-FAKE-41d8e2c0"
QUERY = "api-version=2024-10"
SECRETS = (KEY, PASSWORD, base64.b64encode(f"tester:{PASSWORD}".encode()).decode())
REQUESTS = 6  # per test: the script alternates ok and the mode under test
STATUSES = ("ok", "error", "timeout", "cancelled")

# mode → (status, http_status, a phrase of the stored error, or None)
MODES: dict[str, tuple[str, int, str | None]] = {
    "500": ("error", 500, "mock server error"),
    "429": ("error", 429, "mock rate limit"),
    "reset:2": ("error", 200, None),
    "close:2": ("error", 200, "RemoteProtocolError"),
    "stall:1": ("timeout", 200, None),
    "end:2": ("error", 200, "truncated stream"),
    "error-event:2": ("error", 200, "mock error event"),
    "malformed:2": ("error", 200, "malformed SSE"),
    "json": ("error", 200, "non-streamed JSON completion"),
    "html": ("error", 200, "content-type text/html, expected text/event-stream"),
    "empty": ("error", 200, "no content"),
    "no-done": ("ok", 200, "without data: [DONE]"),
    "slow-headers:300": ("ok", 200, None),
    "echo": ("error", 401, "unauthorized"),
    "echo-event:2": ("error", 200, "request headers"),
}


@contextlib.contextmanager
def serving(**knobs: Any) -> Iterator[MockServer]:
    """The mock server in its own process (its ``stats()`` are the truth)."""
    server = MockServer(**knobs)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def server() -> Iterator[MockServer]:
    """One mock server for the module; each test sets its script (which resets its stats)."""
    with serving() as srv:
        yield srv


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    st = open_store(f"duckdb:///{tmp_path_factory.mktemp('faults') / 'f.duckdb'}")
    yield st
    st.dispose()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("faults") / "prompts.jsonl"
    path.write_text(
        "\n".join(json.dumps({"prompt": f"question {i}", "max_tokens": 4}) for i in range(8))
    )
    return path


def endpoint(url: str) -> str:
    """The mock's URL with a password and a query string: both must survive (or vanish) right."""
    return url.replace("http://", f"http://tester:{PASSWORD}@") + "/v1?" + QUERY


def assert_no_secret(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"a secret reached {where}"


def assert_no_secret_stored(store: Store) -> None:
    """No cell of any table of the store (every row cast to text) holds a secret."""
    tables = store.read_df(
        "select table_name from information_schema.tables where table_schema = 'main'"
    ).table_name
    assert "requests" in set(tables)
    pattern = "|".join(re.escape(secret) for secret in SECRETS)
    sql = " union all ".join(
        f"select '{name}' as tbl, count(*) as n from \"{name}\" t "
        "where regexp_matches(cast(t as varchar), :p)"
        for name in tables
    )
    hits = store.read_df(sql, {"p": pattern})
    assert hits.n.sum() == 0, f"a secret reached the store: {hits[hits.n > 0].tbl.tolist()}"


def check_accounting(store: Store, run_id: str, truth: dict[str, Any]) -> Any:
    reqs = store.read_df("select * from requests where run_id = :r", {"r": run_id})
    counts = reqs.status.value_counts().to_dict()
    assert set(counts) <= set(STATUSES), counts
    # every request the server received is one row, under one of the four statuses
    assert sum(counts.get(s, 0) for s in STATUSES) == truth["requests"] == len(reqs) == REQUESTS
    assert sorted(reqs.seq) == list(range(REQUESTS))
    # failed requests never reach the stored percentiles: the summary equals one computed
    # from the ok rows (and the gaps of ok rows) only
    summary = run_figures.get(store, [run_id]).iloc[0]
    ok = reqs[reqs.status == "ok"]
    assert summary.ok == len(ok) and summary.requests == len(reqs)
    for metric in ("ttft", "e2e"):
        values = ok[f"{metric}_ms"].dropna().to_numpy()
        assert summary[f"{metric}_n"] == len(values)
        if len(values):
            assert summary[f"{metric}_p50_ms"] == pytest.approx(np.percentile(values, 50))
            assert summary[f"{metric}_p99_ms"] == pytest.approx(np.percentile(values, 99))
    gaps = store.read_df(
        "select g.gap_ms from token_gaps g join requests q on q.run_id = g.run_id "
        "and q.seq = g.seq where g.run_id = :r and q.status = 'ok'",
        {"r": run_id},
    )
    assert summary.itl_n == len(gaps)
    assert summary.output_tokens == ok.output_tokens.sum()
    return reqs


@pytest.mark.parametrize("mode", list(MODES))
def test_every_request_is_accounted_for_and_no_secret_is_kept(
    mode: str, server: MockServer, store: Store, dataset: Path, caplog: pytest.LogCaptureFixture
) -> None:
    status, http_status, phrase = MODES[mode]
    caplog.set_level(logging.INFO)
    server.set_script(f"ok,{mode}")
    url = server.url
    cfg = BenchConfig(
        endpoint=endpoint(url),
        dataset=str(dataset),
        concurrency=(1,),
        requests=REQUESTS,
        timeout_s=1.0,
        api_key_env="FAULT_TEST_KEY",
        gpu=False,
        in_process=True,
        flush_interval_s=0.2,
    )
    (run_id,) = run_benchmark(cfg, store, progress=False, env={"FAULT_TEST_KEY": KEY})
    truth = server.stats()
    reqs = check_accounting(store, run_id, truth)
    assert truth["actions"] == {"ok": REQUESTS // 2, mode.split(":")[0]: REQUESTS // 2}
    # every request kept it (+ /v1/models twice: model discovery and the identity probe)
    assert truth["queries"] == {QUERY: REQUESTS + 2}
    good = reqs[reqs.seq % 2 == 0]  # the script's "ok" turns (one stream: in order)
    bad = reqs[reqs.seq % 2 == 1]
    assert set(good.status) == {"ok"} and set(good.chunks) == {4}
    assert list(bad.status) == [status] * len(bad), bad.error.tolist()
    assert set(bad.http_status) == {http_status}
    if phrase is not None:
        assert all(phrase in str(e) for e in bad.error), bad.error.tolist()
    if status == "ok":
        assert set(bad.chunks) == {4} and set(bad.output_tokens) == {4}
    else:
        # a response that was not a stream has no TTFT (a cut stream keeps its partial one,
        # which the summary check above shows never reaches the percentiles)
        if ":" not in mode:
            assert bad.ttft_ms.isna().all() and set(bad.chunks) == {0}
    if mode == "slow-headers:300":
        assert (bad.ttft_ms >= 290).all()
    if mode == "malformed:2":
        assert truth["malformed"] == REQUESTS // 2
        assert set(bad.chunks) == {4}  # the malformed event was not counted as a token
    if mode == "json":
        # the body's own usage is read (the row says what the server did), not counted as ok
        assert set(bad.output_tokens) == {4} and not bad.output_tokens_estimated.any()
    runs = store.read_df("select * from runs where run_id = :r", {"r": run_id})
    tool = json.loads(runs.tool_summary[0])
    assert tool["ok"] == (status == "ok") * len(bad) + len(good)
    assert tool["requests"] == REQUESTS
    assert runs.endpoint[0] == url  # no credentials, no query string
    assert_no_secret_stored(store)
    assert_no_secret(caplog.text, "the log")
    if mode.startswith("echo"):
        assert all("Bearer ***" in str(e) for e in bad.error), bad.error.tolist()


def test_a_rejected_key_is_named_by_its_variable_never_shown(
    server: MockServer, store: Store
) -> None:
    server.set_script("echo")
    cfg = BenchConfig(
        endpoint=endpoint(server.url),
        workload="short-in-short-out",  # calibration probes the endpoint first
        concurrency=(1,),
        requests=2,
        api_key_env="FAULT_TEST_KEY",
        gpu=False,
        in_process=True,
    )
    with pytest.raises(EndpointError) as err:
        run_benchmark(cfg, store, progress=False, env={"FAULT_TEST_KEY": KEY})
    text = f"{err.value.message} {err.value.hint}"
    assert_no_secret(text, "the calibration error")
    assert "HTTP 401" in err.value.message and "Bearer ***" in err.value.message
    assert err.value.hint is not None and "$FAULT_TEST_KEY" in err.value.hint
    assert "pass the key" not in err.value.hint  # it was passed: it was rejected


def test_https_to_a_plain_http_port_fails_fast_and_says_why(server: MockServer) -> None:
    async def main() -> None:
        ep = HttpxEndpoint(
            server.url.replace("http://", "https://"),
            transport=LeanTransport(tls_handshake_timeout_s=0.5),
        )
        try:
            await ep.get_json("/v1/models")
        finally:
            await ep.aclose()

    t0 = time.monotonic()
    with pytest.raises(httpx.ConnectError) as err:
        asyncio.run(main())
    assert time.monotonic() - t0 < 5  # not the 60 s connect timeout
    assert "TLS handshake" in str(err.value) and "try http://" in str(err.value)


def test_the_cli_keeps_secrets_out_of_logs_and_exports(
    server: MockServer, dataset: Path, tmp_path: Path
) -> None:
    db = f"duckdb:///{tmp_path / 'cli.duckdb'}"
    env = dict(os.environ, FAULT_TEST_KEY=KEY, SERVESCOPE_DB=db, PYTHONPATH=str(ROOT))
    server.set_script("ok,echo,echo-event:1,html,json,malformed:1,end:1,no-done")
    argv = ["-v", "bench", "--endpoint", endpoint(server.url), "--dataset", str(dataset)]
    argv += ["--concurrency", "2", "--requests", "8", "--api-key-env", "FAULT_TEST_KEY"]
    argv += ["--timeout", "5", "--no-gpu"]
    bench = subprocess.run(
        [sys.executable, "-m", "cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    truth = server.stats()
    assert bench.returncode == 0, bench.stderr[-2000:]
    assert "HTTP Request:" in bench.stderr  # -v logged the requests…
    assert_no_secret(bench.stdout + bench.stderr, "the CLI's output")  # …without credentials
    assert "tester:" not in bench.stderr
    store = open_store(db)
    try:
        (run_id,) = store.read_df("select run_id from runs").run_id
        reqs = store.read_df("select status from requests")
        assert len(reqs) == truth["requests"] == 8
        assert reqs.status.value_counts().to_dict() == {"ok": 2, "error": 6}
        assert_no_secret_stored(store)
    finally:
        store.dispose()
    # `servescope export` in every format (one interpreter: the command's own entry point)
    outs = {fmt: tmp_path / f"export.{fmt}" for fmt in ("csv", "parquet", "vllm-json")}
    calls = "; ".join(
        f"assert cli.main(['export', {run_id!r}, '--format', {fmt!r}, '--out', {str(out)!r}]) == 0"
        for fmt, out in outs.items()
    )
    export = subprocess.run(
        [sys.executable, "-c", f"import cli; {calls}"],
        capture_output=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert export.returncode == 0, export.stderr[-2000:]
    for fmt, out in outs.items():
        data = out.read_bytes()
        assert len(data) > 100
        for secret in SECRETS:
            assert secret.encode() not in data, f"a secret reached the {fmt} export"
