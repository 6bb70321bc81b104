"""`servescope verify` over real loopback servers: the sim passes every check; a deliberately
broken server fails each one with its own message; an unreachable endpoint stores nothing."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

import cli
from collectors.endpoint_checks import CHECKS, CheckResult, run_checks
from errors import ExitCode
from sim.engine import EngineConfig
from sim.server import SimHandle, start_in_thread
from store.lifecycle import memory_store, open_store
from store.verifications import add_verification, latest_verifications, verification_checks

ALL_RESULTS = 2 * len(CHECKS) - 1  # multi_turn is chat-only


@pytest.fixture
def sim() -> Iterator[SimHandle]:
    handle = start_in_thread(
        EngineConfig.from_names("H100-SXM-80GB", "llama-3.1-8b"), time_scale=10.0
    )
    try:
        yield handle
    finally:
        handle.stop()


def checks(
    url: str,
    *,
    model: str = "m",
    timeout_s: float = 30.0,
    apis: tuple[str, ...] = ("chat", "completions"),
    max_model_len: int | None = None,
) -> list[CheckResult]:
    async def go() -> list[CheckResult]:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            return await run_checks(
                client,
                url,
                model=model,
                apis=apis,
                timeout_s=timeout_s,
                max_model_len=max_model_len,
            )

    return asyncio.run(go())


# --- a deliberately broken server --------------------------------------------------------------

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"]
MARKER = re.compile(r"QX\w+?K")
BROKEN_CONTEXT = 2048


class Broken(BaseHTTPRequestHandler):
    """Ignores stop and max_tokens, never ends a stream, 500s an over-long prompt, counts only
    the last message, echoes the previous request's marker, says 200 to anything, and answers
    without ``object`` and with a total_tokens that does not add up."""

    markers: list[str] = []  # noqa: RUF012 (shared across requests on purpose)
    lock = threading.Lock()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, obj: Any) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._send(
                200,
                {"data": [{"id": "m", "owned_by": "nobody", "max_model_len": BROKEN_CONTEXT}]},
            )
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            self._send(200, {"ok": True})  # 200 on a body that is not JSON
            return
        chat = self.path.endswith("/chat/completions")
        if chat and "messages" in body:
            prompt = str(body["messages"][-1]["content"])  # drops the history
        elif not chat and "prompt" in body:
            prompt = str(body["prompt"])
        else:
            self._send(200, {"ok": True})  # 200 without messages / prompt
            return
        if len(prompt) > 8000:
            self._send(500, {"error": {"message": "internal error"}})
            return
        text = " ".join(WORDS[i % len(WORDS)] for i in range(30))  # ignores max_tokens, stop
        found = MARKER.search(prompt)
        if found:
            with self.lock:
                previous = self.markers[-1] if self.markers else None
                self.markers.append(found.group())
            if previous:
                text += f" {previous}"  # another request's answer
        usage = {"prompt_tokens": len(prompt) // 4 + 1, "completion_tokens": 30}
        if body.get("stream"):
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            key = "delta" if chat else "text"
            for word in WORDS:
                piece = {"content": " " + word} if chat else " " + word
                self.wfile.write(f"data: {json.dumps({'choices': [{key: piece}]})}\n\n".encode())
            end = {"choices": [{key: {} if chat else "", "finish_reason": "length"}]}
            self.wfile.write(f"data: {json.dumps(end)}\n\n".encode())
            self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
            self.wfile.flush()
            time.sleep(6)  # no [DONE], and the stream stays open: it stalls
            return
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        # no "object", and a total that does not add up
        self._send(200, {"id": "x1", "choices": [choice], "usage": {**usage, "total_tokens": 7}})


@pytest.fixture
def broken() -> Iterator[str]:
    Broken.markers = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Broken)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def free_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


# --- the checks --------------------------------------------------------------------------------


def test_the_sim_passes_every_check(sim: SimHandle) -> None:
    results = checks(sim.url, model="llama-3.1-8b", max_model_len=131072)
    assert len(results) == ALL_RESULTS
    failed = [(r.name, r.api, r.message, r.received) for r in results if not r.passed]
    assert not failed
    for r in results:
        assert r.sent and r.received and r.why_it_matters and r.duration_ms >= 0
        assert len(r.sent) <= 300 and len(r.received) <= 300


FAILURES = {
    "response_format": "object is None, not",
    "stop_sequences": "ignored: the answer still contains",
    "max_tokens": "max_tokens 5 ignored: usage.completion_tokens is 30",
    "streaming": "the stream stalled: no end within 2 s",
    "overlong_input": "HTTP 500, a server error (5xx)",
    "multi_turn": "the server dropped the history",
    "concurrent_isolation": "answers crossed between concurrent requests: answer ",
    "malformed_request": "not JSON: HTTP 200: the server accepted it",
}


def test_a_broken_server_fails_each_check_with_its_own_message(broken: str) -> None:
    results = checks(broken, timeout_s=2.0, max_model_len=BROKEN_CONTEXT)
    assert len(results) == ALL_RESULTS
    assert set(FAILURES) == set(CHECKS)
    for r in results:
        assert not r.passed, (r.name, r.api, r.message)
        assert FAILURES[r.name] in r.message, (r.name, r.api, r.message)
    by = {(r.name, r.api): r for r in results}
    assert "total_tokens 7 ≠ prompt" in by["response_format", "chat"].message
    assert "no [DONE]" in by["streaming", "completions"].message
    assert "no messages: HTTP 200" in by["malformed_request", "chat"].message
    assert "no prompt: HTTP 200" in by["malformed_request", "completions"].message
    assert "prompt of" in by["overlong_input", "chat"].sent


def test_a_check_that_raises_is_a_fail_naming_the_error() -> None:
    class Reset(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self.connection.close()

        do_POST = do_GET

    server = ThreadingHTTPServer(("127.0.0.1", 0), Reset)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        results = checks(f"http://127.0.0.1:{server.server_address[1]}", timeout_s=2.0,
                         apis=("chat",))  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    assert len(results) == len(CHECKS)
    assert not any(r.passed for r in results)
    assert all("Error" in r.message or "no answer" in r.message for r in results), [
        r.message for r in results
    ]


def test_the_sim_is_deterministic_when_greedy_and_honours_stop(sim: SimHandle) -> None:
    body = {"model": "llama-3.1-8b", "prompt": "The ocean is", "max_tokens": 24, "temperature": 0}
    with httpx.Client(base_url=sim.url, timeout=30) as client:
        a = client.post("/v1/completions", json=body).json()
        b = client.post("/v1/completions", json=body).json()
        text = a["choices"][0]["text"]
        assert text == b["choices"][0]["text"]
        word = text.split()[len(text.split()) // 2].strip(".,")
        cut = client.post("/v1/completions", json={**body, "stop": [word]}).json()
        assert cut["choices"][0]["text"] == text[: text.find(word)]
        assert cut["choices"][0]["finish_reason"] == "stop"
        streamed = ""
        with client.stream(
            "POST", "/v1/completions", json={**body, "stop": word, "stream": True}
        ) as resp:
            for line in resp.iter_lines():
                if line.startswith("data: {"):
                    chunk = json.loads(line[6:])
                    streamed += "".join(c["text"] for c in chunk["choices"])
        assert streamed == text[: text.find(word)]
        bad = client.post("/v1/completions", json={**body, "stop": 3})
        assert bad.status_code == 400


# --- the store ---------------------------------------------------------------------------------


def _check_row(name: str, api: str, passed: bool) -> dict[str, Any]:
    return {"name": name, "api": api, "passed": passed, "sent": "s", "received": "r",
            "message": "m", "why_it_matters": "w", "duration_ms": 1.0}  # fmt: skip


def test_store_keeps_the_latest_verification_per_endpoint_and_model() -> None:
    store = memory_store()
    head = {"endpoint": "http://a", "model": "m", "framework": "sim", "api": "both"}
    add_verification(store, {**head, "verify_id": "v1", "started_at": 1.0},
                     [_check_row("max_tokens", "chat", False)])  # fmt: skip
    add_verification(
        store,
        {**head, "verify_id": "v2", "started_at": 2.0},
        [_check_row("max_tokens", "chat", True), _check_row("max_tokens", "completions", False),
         _check_row("streaming", "chat", False)],
    )  # fmt: skip
    add_verification(store, {**head, "model": "n", "verify_id": "v3", "started_at": 1.5}, [])
    latest = latest_verifications(store)
    assert list(latest["verify_id"]) == ["v2", "v3"]
    row = latest.iloc[0]
    assert (row["passed"], row["failed"]) == (1, 2)
    assert row["failed_checks"] == "max_tokens/completions, streaming/chat"
    assert latest.iloc[1]["failed_checks"] == ""
    rows = verification_checks(store, "v2")
    assert list(zip(rows["check_name"], rows["api"], strict=True)) == [
        ("max_tokens", "chat"), ("max_tokens", "completions"), ("streaming", "chat")
    ]  # fmt: skip
    assert verification_checks(store, "nope").empty


def test_store_writes_a_verification_whole_or_not_at_all() -> None:
    store = memory_store()
    bad = {**_check_row("streaming", "chat", True), "duration_ms": "not a number"}
    with pytest.raises(Exception):  # noqa: B017 (the driver's error type)
        add_verification(store, {"verify_id": "v1", "endpoint": "http://a", "started_at": 1.0},
                         [_check_row("max_tokens", "chat", True), bad])  # fmt: skip
    assert latest_verifications(store).empty
    assert store.read_df("SELECT * FROM verification_checks").empty


# --- the command -------------------------------------------------------------------------------


def test_cli_verifies_the_sim_and_stores_it_once(
    sim: SimHandle, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"duckdb:///{tmp_path / 's.duckdb'}"
    code = cli.main(["verify", "--endpoint", sim.url + "/v1", "--db", db])
    out = capsys.readouterr().out
    assert code == ExitCode.OK, out
    assert out.count("PASS  ") == ALL_RESULTS and "FAIL" not in out
    assert f"{ALL_RESULTS} passed, 0 failed" in out
    store = open_store(db)
    try:
        latest = latest_verifications(store)
        assert len(latest) == 1
        row = latest.iloc[0]
        assert row["framework"] == "sim" and row["model"] == "llama-3.1-8b"
        assert row["endpoint"] == sim.url
        assert (row["passed"], row["failed"], row["failed_checks"]) == (ALL_RESULTS, 0, "")
        assert len(verification_checks(store, row["verify_id"])) == ALL_RESULTS
        header = store.read_df("SELECT * FROM verifications").iloc[0]
        assert header["identity_source"] == "GET /v1/models (owned_by)"
        assert header["api"] == "both"
    finally:
        store.dispose()


def test_cli_exits_3_on_a_failed_check_and_prints_what_was_sent(
    broken: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    db = f"duckdb:///{tmp_path / 's.duckdb'}"
    monkeypatch.setenv("VERIFY_TEST_KEY", "sekrit-key-123")
    code = cli.main(["verify", "--endpoint", broken, "--api", "completions", "--timeout", "2",
                     "--framework", "mine", "--framework-version", "9", "--api-key-env",
                     "VERIFY_TEST_KEY", "--db", db])  # fmt: skip
    out = capsys.readouterr().out
    assert code == ExitCode.FAILED
    assert "FAIL  max_tokens" in out and "      sent:" in out and "      why:" in out
    assert "sekrit-key-123" not in out
    store = open_store(db)
    try:
        row = latest_verifications(store).iloc[0]
        assert (row["framework"], row["framework_version"]) == ("mine", "9")
        assert row["passed"] == 0 and row["failed"] == len(CHECKS) - 1
        dumped = store.read_df("SELECT * FROM verification_checks").to_json()
        assert "sekrit-key-123" not in dumped
    finally:
        store.dispose()


def test_cli_unreachable_endpoint_exits_2_and_stores_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.duckdb"
    code = cli.main(["verify", "--endpoint", free_url(), "--db", f"duckdb:///{path}"])
    captured = capsys.readouterr()
    assert code == ExitCode.ERROR
    errors = [line for line in captured.err.splitlines() if line.startswith("servescope: error")]
    assert len(errors) == 1 and "cannot reach" in errors[0]
    assert "Traceback" not in captured.err and captured.out == ""
    assert not path.exists()


def test_cli_no_store_prints_every_detail_with_v(
    sim: SimHandle, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.duckdb"
    code = cli.main(["verify", "--endpoint", sim.url, "--api", "chat", "-v", "--no-store",
                     "--db", f"duckdb:///{path}"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == ExitCode.OK
    assert out.count("      sent:") == len(CHECKS)
    assert "stored as" not in out and not path.exists()
