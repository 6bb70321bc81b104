"""A loopback OpenAI-compatible streaming server with exact timing knobs (tests and benchmarks).

Not the reference engine (``sim`` simulates one); this is a measuring instrument's test rig:
raw ``asyncio.Protocol`` HTTP/1.1, chat and completions with SSE streaming, usage, and
``/v1/models``. Every knob is exact:

- ``ttft_ms`` / ``itl_ms``: the first content chunk is written ``ttft_ms`` after the request
  has been read, then one chunk every ``itl_ms`` (deadlines from the receipt instant, so delays
  do not accumulate). With both 0 the server streams **as fast as it can** (``burst`` chunks
  per event-loop turn, with back-pressure), for load-generator capacity runs.
- ``output_tokens``: chunks per response (default: the request's ``max_tokens``).
- ``script``: behaviours cycled per streamed completion request (``ok*8`` repeats):

  - ``ok``; ``500``, ``429`` (an error status with an OpenAI-style JSON error body);
  - mid-stream faults after N content chunks: ``reset:N`` (TCP reset), ``stall:N`` (stop
    sending, keep the connection; ``stall:1`` stalls after the first token), ``close:N``
    (close the connection mid-body), ``end:N`` (end the body cleanly: no finish reason, no
    usage, no ``[DONE]``), ``error-event:N`` (an SSE error event), ``malformed:N`` (one
    invalid-JSON ``data:`` line holding ``"content":``, then the rest of a normal stream),
    ``echo-event:N`` (an SSE error event quoting the request's headers);
  - whole-response modes: ``json`` (200 with a non-streamed JSON completion and its usage,
    ``stream: true`` ignored), ``html`` (200 ``text/html``), ``empty`` (200 SSE with no content
    and no usage, just ``[DONE]``), ``no-done`` (a complete stream without ``data: [DONE]``),
    ``slow-headers:MS`` (the response head only after MS ms, then a normal stream), ``echo``
    (401 with the request's headers, ``Authorization`` included, in the error body).
- ``POST /mock/script?set=SCRIPT`` (``MockServer.set_script``) replaces the script and starts
  over with fresh stats, so one server process serves many scripted runs.
- ``record``: keep what was actually sent (TTFT and gaps, by the server's clock), served at
  ``GET /mock/stats`` — the truth a measurement-error benchmark compares against. Counted
  always: completion requests received (``requests``, and ``actions``: per script action),
  content chunks written (``tokens``), streams finished (``completed``), malformed events
  written (``malformed``) and ``/v1/`` requests per query string (``queries``).

Prompt tokens are counted as ``ceil(characters / 4)`` (plus 4 per chat message and 3 for the
chat template), a stable stand-in for a tokenizer. Chat responses start with an empty
``{"role":"assistant","content":""}`` chunk at receipt, as vLLM does; it is not content.

Run it in its own process so it never competes with the client for the event loop:
``python -m sim.mockserver --port 0 --ttft-ms 50 --itl-ms 10`` prints
``MOCKSERVER READY http://127.0.0.1:PORT``; ``MockServer(...)`` does that from Python.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

_perf = time.perf_counter

ACTIONS = (
    "ok",
    "500",
    "429",
    "reset",
    "stall",
    "close",
    "end",
    "error-event",
    "malformed",
    "echo-event",
    "json",
    "html",
    "empty",
    "no-done",
    "slow-headers",
    "echo",
)
#: actions applied mid-stream, after their N content chunks
MID_STREAM = frozenset({"reset", "stall", "close", "end", "error-event", "malformed", "echo-event"})


@dataclass
class MockConfig:
    model: str = "mock-model"
    owned_by: str = "servescope-mock"
    ttft_ms: float = 0.0
    itl_ms: float = 0.0
    output_tokens: int | None = None
    default_max_tokens: int = 16
    script: tuple[tuple[str, int], ...] = (("ok", 0),)
    record: bool = False
    burst: int = 1
    chunked: bool = True

    @property
    def fast(self) -> bool:
        return self.ttft_ms <= 0 and self.itl_ms <= 0


def parse_script(text: str) -> tuple[tuple[str, int], ...]:
    """``"ok*3,500,reset:2"`` → ((ok,0),(ok,0),(ok,0),(500,0),(reset,2))."""
    out: list[tuple[str, int]] = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        item, _, times = item.partition("*")
        name, _, arg = item.partition(":")
        if name not in ACTIONS:
            raise ValueError(f"unknown script action {name!r}; known: {', '.join(ACTIONS)}")
        n = int(arg) if arg else 0
        out.extend([(name, n)] * (int(times) if times else 1))
    if not out:
        raise ValueError("empty script")
    return tuple(out)


def count_prompt_tokens(body: dict[str, Any]) -> int:
    if "messages" in body:
        total = 3
        for msg in body.get("messages") or ():
            content = msg.get("content") if isinstance(msg, dict) else None
            if isinstance(content, list):
                content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            total += 4 + math.ceil(len(str(content or "")) / 4)
        return total
    prompt = body.get("prompt", "")
    if isinstance(prompt, list):
        prompt = " ".join(str(p) for p in prompt)
    return max(1, math.ceil(len(str(prompt)) / 4))


@dataclass
class Stats:
    requests: int = 0
    completed: int = 0
    tokens: int = 0  # content chunks written, always counted (record or not)
    actions: dict[str, int] = field(default_factory=dict)  # completion requests per action
    malformed: int = 0  # malformed events written
    queries: dict[str, int] = field(default_factory=dict)  # /v1/ requests per query string
    ttft_ms: list[float] = field(default_factory=list)
    itl_ms: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "completed": self.completed,
            "tokens": self.tokens,
            "actions": self.actions,
            "malformed": self.malformed,
            "queries": self.queries,
            "ttft_ms": self.ttft_ms,
            "itl_ms": self.itl_ms,
            "cpu_s": time.process_time(),
        }


def _frame(data: bytes, chunked: bool) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data) if chunked else data


class _Stream:
    """One streaming response in progress."""

    __slots__ = (
        "action",
        "arg",
        "chat",
        "conn",
        "done_payload",
        "headers",
        "i",
        "include_usage",
        "last_write",
        "max_tokens",
        "n",
        "prompt_tokens",
        "t0_loop",
        "t0_perf",
        "token",
        "ttft_recorded",
    )

    def __init__(
        self,
        conn: _Conn,
        body: dict[str, Any],
        chat: bool,
        t0_loop: float,
        headers: Sequence[tuple[str, str]] = (),
    ) -> None:
        cfg = conn.server.cfg
        self.conn = conn
        self.headers = list(headers)
        self.chat = chat
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
        max_tokens = int(max_tokens) if max_tokens else cfg.default_max_tokens
        self.max_tokens = max_tokens
        self.n = min(cfg.output_tokens, max_tokens) if cfg.output_tokens else max_tokens
        self.i = 0
        opts = body.get("stream_options") or {}
        self.include_usage = bool(opts.get("include_usage"))
        self.prompt_tokens = count_prompt_tokens(body)
        self.t0_loop = t0_loop
        self.t0_perf = _perf()
        self.last_write = 0.0
        self.ttft_recorded = False
        self.action, self.arg = conn.server.next_action()
        model = json.dumps(cfg.model)
        if chat:
            event = (
                b'data: {"id":"chatcmpl-mock","object":"chat.completion.chunk","created":0,'
                b'"model":' + model.encode() + b',"choices":[{"index":0,"delta":'
                b'{"content":" tok"},"logprobs":null,"finish_reason":null}]}\n\n'
            )
        else:
            event = (
                b'data: {"id":"cmpl-mock","object":"text_completion","created":0,"model":'
                + model.encode()
                + b',"choices":[{"index":0,"text":" tok","logprobs":null,'
                b'"finish_reason":null}]}\n\n'
            )
        self.token = _frame(event, cfg.chunked)
        self.done_payload = b""

    def _final(self) -> bytes:
        cfg = self.conn.server.cfg
        reason = "length" if self.n >= self.max_tokens else "stop"
        model = json.dumps(cfg.model)
        parts = []
        if self.chat:
            parts.append(
                'data: {"id":"chatcmpl-mock","object":"chat.completion.chunk","created":0,'
                f'"model":{model},"choices":[{{"index":0,"delta":{{}},"logprobs":null,'
                f'"finish_reason":"{reason}"}}]}}\n\n'
            )
        else:
            parts.append(
                f'data: {{"id":"cmpl-mock","object":"text_completion","created":0,"model":{model},'
                f'"choices":[{{"index":0,"text":"","logprobs":null,"finish_reason":"{reason}"}}]}}\n\n'
            )
        if self.include_usage and self.action != "empty":
            usage = {
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.i,
                "total_tokens": self.prompt_tokens + self.i,
            }
            obj = "chat.completion.chunk" if self.chat else "text_completion"
            parts.append(
                f'data: {{"id":"mock","object":"{obj}","created":0,"model":{model},'
                f'"choices":[],"usage":{json.dumps(usage, separators=(",", ":"))}}}\n\n'
            )
        if self.action == "empty":
            parts = []
        if self.action != "no-done":
            parts.append("data: [DONE]\n\n")
        chunked = cfg.chunked
        out = b"".join(_frame(p.encode(), chunked) for p in parts)
        return out + (b"0\r\n\r\n" if chunked else b"")

    # --- sending ------------------------------------------------------------------------

    def start(self) -> None:
        conn = self.conn
        if conn.closed:
            return
        cfg = conn.server.cfg
        if self.action == "slow-headers":  # the deadlines count from the delayed head
            self.t0_loop = conn.loop.time()
            self.t0_perf = _perf()
        if self.action == "empty":
            self.n = 0
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
        head += (
            b"transfer-encoding: chunked\r\n\r\n" if cfg.chunked else b"connection: close\r\n\r\n"
        )
        first = b""
        if self.chat:
            model = json.dumps(cfg.model)
            first = _frame(
                b'data: {"id":"chatcmpl-mock","object":"chat.completion.chunk","created":0,'
                b'"model":' + model.encode() + b',"choices":[{"index":0,"delta":{"role":'
                b'"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n',
                cfg.chunked,
            )
        conn.write(head + first)
        if cfg.fast:
            conn.loop.call_soon(self.step_fast)
        else:
            conn.loop.call_at(self.t0_loop + cfg.ttft_ms / 1000.0, self.step_timed)

    def _interrupt(self) -> bool:
        """Apply a mid-stream script action at the current chunk; True when it ended output."""
        action = self.action
        if action not in MID_STREAM or self.i < self.arg:
            return False
        conn = self.conn
        chunked = conn.server.cfg.chunked
        end = b"0\r\n\r\n" if chunked else b""
        if action == "reset":
            conn.reset()
        elif action == "close":
            conn.close()
        elif action == "end":
            conn.write(end)
            self._ended()
        elif action == "malformed":
            bad = b'data: {"choices":[{"index":0,"delta":{"content":" tok"}}\n\n'  # cut short
            conn.write(_frame(bad, chunked))
            conn.server.stats.malformed += 1
            self.action = "ok"  # once; the stream then goes on normally
            return False
        elif action in ("error-event", "echo-event"):
            msg = "mock error event"
            if action == "echo-event":
                msg = "request headers: " + "; ".join(f"{k}: {v}" for k, v in self.headers)
            err = json.dumps({"error": {"message": msg, "type": "server_error", "code": 500}})
            tail = _frame(b"data: " + err.encode() + b"\n\n", chunked)
            conn.write(tail + _frame(b"data: [DONE]\n\n", chunked) + end)
            self._ended()
        # stall: simply stop sending
        return True

    def _ended(self) -> None:
        if not self.conn.server.cfg.chunked:
            self.conn.close()
        self.conn.stream_done()

    def _record_write(self, now: float) -> None:
        stats = self.conn.server.stats
        if not self.ttft_recorded:
            stats.ttft_ms.append((now - self.t0_perf) * 1000.0)
            self.ttft_recorded = True
        else:
            stats.itl_ms.append((now - self.last_write) * 1000.0)
        self.last_write = now

    def step_timed(self) -> None:
        conn = self.conn
        if conn.closed or self._interrupt():
            return
        conn.write(self.token)
        conn.server.stats.tokens += 1
        if conn.server.cfg.record:
            self._record_write(_perf())
        self.i += 1
        if self.i >= self.n:
            self.finish()
            return
        cfg = conn.server.cfg
        deadline = self.t0_loop + (cfg.ttft_ms + self.i * cfg.itl_ms) / 1000.0
        conn.loop.call_at(deadline, self.step_timed)

    def step_fast(self) -> None:
        conn = self.conn
        if conn.closed:
            return
        if conn.paused:
            conn.resume_cb = self.step_fast
            return
        burst = conn.server.cfg.burst
        k = min(burst, self.n - self.i)
        stats = conn.server.stats
        for _ in range(k):
            if self._interrupt():
                return
            conn.write(self.token)
            stats.tokens += 1
            self.i += 1
        if self.i >= self.n:
            self.finish()
        else:
            conn.loop.call_soon(self.step_fast)

    def finish(self) -> None:
        self.conn.write(self._final())
        self.conn.server.stats.completed += 1
        if not self.conn.server.cfg.chunked:
            self.conn.close()
        self.conn.stream_done()


class _Conn(asyncio.Protocol):
    def __init__(self, server: MockServerCore) -> None:
        self.server = server
        self.loop = server.loop
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.busy = False
        self.closed = False
        self.paused = False
        self.resume_cb: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        cb, self.resume_cb = self.resume_cb, None
        if cb is not None:
            self.loop.call_soon(cb)

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self.closed = True

    def reset(self) -> None:
        if self.transport is not None:
            sock = self.transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.transport.abort()
        self.closed = True

    def stream_done(self) -> None:
        self.busy = False
        if self.buf and not self.closed:
            self._parse()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._parse()

    def _parse(self) -> None:
        while not self.busy and not self.closed:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = self.buf[:end].split(b"\r\n")
            headers: list[tuple[str, str]] = []
            try:
                method, target, _ = lines[0].decode("latin-1").split(" ", 2)
            except ValueError:
                self._respond(400, {"error": {"message": "bad request line"}})
                self.close()
                return
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                headers.append((name.strip().decode("latin-1"), value.strip().decode("latin-1")))
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            self._handle(method, target.split("?", 1), body, headers)

    def _respond(
        self, status: int, obj: Any, reason: str = "", ctype: str = "application/json"
    ) -> None:
        data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        reason = reason or {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(status, "Error")
        head = (
            f"HTTP/1.1 {status} {reason}\r\ncontent-type: {ctype}\r\n"
            f"content-length: {len(data)}\r\n\r\n"
        )
        self.write(head.encode() + data)

    def _handle(
        self, method: str, target: list[str], raw: bytes, headers: list[tuple[str, str]]
    ) -> None:
        path = target[0]
        server = self.server
        cfg = server.cfg
        if path.startswith("/v1/"):
            query = target[1] if len(target) > 1 else ""
            server.stats.queries[query] = server.stats.queries.get(query, 0) + 1
        if method == "GET" and path == "/v1/models":
            self._respond(
                200,
                {
                    "object": "list",
                    "data": [
                        {"id": cfg.model, "object": "model", "created": 0, "owned_by": cfg.owned_by}
                    ],
                },
            )
            return
        if method == "GET" and path == "/health":
            self._respond(200, {"status": "ok"})
            return
        if path == "/mock/script":
            # ?set=ok,500: a new script, from its first action, with fresh stats
            asked = urllib.parse.parse_qs(target[1] if len(target) > 1 else "")
            try:
                cfg.script = parse_script((asked.get("set") or [""])[0])
            except ValueError as exc:
                self._respond(400, {"error": {"message": str(exc)}})
                return
            server.restart_script()
            self._respond(200, {"script": [f"{a}:{n}" for a, n in cfg.script]})
            return
        if path == "/mock/stats":
            self._respond(200, server.stats.as_dict())
            if method == "POST" or (len(target) > 1 and "reset=1" in target[1]):
                server.stats = Stats()
            return
        if method != "POST" or path not in ("/v1/chat/completions", "/v1/completions"):
            self._respond(404, {"error": {"message": f"no route {method} {path}"}})
            return
        t0_loop = self.loop.time()
        try:
            body = json.loads(raw)
        except ValueError:
            self._respond(400, {"error": {"message": "body is not JSON"}})
            return
        chat = path == "/v1/chat/completions"
        if chat and not isinstance(body.get("messages"), list):
            self._respond(400, {"error": {"message": "messages is required"}})
            return
        server.stats.requests += 1
        if not body.get("stream"):
            self._respond_plain(body, chat)
            return
        stream = _Stream(self, body, chat, t0_loop, headers)
        action = stream.action
        if action in ("500", "429"):
            status = int(action)
            msg = "mock server error" if status == 500 else "mock rate limit"
            self._respond(status, {"error": {"message": msg, "code": status}})
            return
        if action == "echo":
            echoed = "; ".join(f"{k}: {v}" for k, v in headers)
            self._respond(401, {"error": {"message": f"unauthorized; you sent {echoed}"}})
            return
        if action == "json":
            self._respond_plain(body, chat)
            return
        if action == "html":
            page = b"<!doctype html><html><body><h1>Welcome</h1></body></html>"
            self._respond(200, page, ctype="text/html; charset=utf-8")
            return
        self.busy = True
        if action == "slow-headers":
            self.loop.call_later(stream.arg / 1000.0, stream.start)
        else:
            stream.start()

    def _respond_plain(self, body: dict[str, Any], chat: bool) -> None:
        cfg = self.server.cfg
        n = int(body.get("max_tokens") or cfg.default_max_tokens)
        n = min(n, cfg.output_tokens) if cfg.output_tokens else n
        text = " tok" * n
        prompt = count_prompt_tokens(body)
        usage = {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        self._respond(200, {"id": "mock", "model": cfg.model, "choices": [choice], "usage": usage})


class MockServerCore:
    def __init__(self, cfg: MockConfig, loop: asyncio.AbstractEventLoop) -> None:
        self.cfg = cfg
        self.loop = loop
        self.stats = Stats()
        self._n = 0

    def restart_script(self) -> None:
        self._n = 0
        self.stats = Stats()

    def next_action(self) -> tuple[str, int]:
        action = self.cfg.script[self._n % len(self.cfg.script)]
        self._n += 1
        self.stats.actions[action[0]] = self.stats.actions.get(action[0], 0) + 1
        return action

    async def serve(self, host: str, port: int) -> asyncio.Server:
        return await self.loop.create_server(
            lambda: _Conn(self), host, port, backlog=4096, reuse_address=True
        )


def _raise_nofile() -> None:
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass


async def _main(cfg: MockConfig, host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    core = MockServerCore(cfg, loop)
    server = await core.serve(host, port)
    bound = server.sockets[0].getsockname()[1]
    print(f"MOCKSERVER READY http://{host}:{bound}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sim.mockserver", description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--model", default="mock-model")
    p.add_argument("--owned-by", default="servescope-mock")
    p.add_argument("--ttft-ms", type=float, default=0.0)
    p.add_argument("--itl-ms", type=float, default=0.0)
    p.add_argument("--output-tokens", type=int, default=None)
    p.add_argument("--script", default="ok")
    p.add_argument("--record", action="store_true")
    p.add_argument("--burst", type=int, default=1)
    p.add_argument("--no-chunked", action="store_true", help="end bodies by closing instead")
    p.add_argument("--uvloop", action="store_true", help="use uvloop when it is installed")
    a = p.parse_args(argv)
    cfg = MockConfig(
        model=a.model,
        owned_by=a.owned_by,
        ttft_ms=a.ttft_ms,
        itl_ms=a.itl_ms,
        output_tokens=a.output_tokens,
        script=parse_script(a.script),
        record=a.record,
        burst=max(1, a.burst),
        chunked=not a.no_chunked,
    )
    _raise_nofile()
    if a.uvloop:
        try:
            import uvloop

            uvloop.install()
        except ImportError:
            pass
    asyncio.run(_main(cfg, a.host, a.port))
    return 0


class MockServer:
    """Runs the mock server in its own process: ``with MockServer(ttft_ms=50) as url: ...``.

    Keyword arguments are the command-line options (``ttft_ms=50`` → ``--ttft-ms 50``; True
    flags are passed bare). ``cpu`` pins the process to one CPU (benchmarks).
    """

    def __init__(self, *, cpu: int | None = None, ready_timeout_s: float = 20.0, **knobs: Any):
        self.knobs = knobs
        self.cpu = cpu
        self.ready_timeout_s = ready_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> str:
        args = [sys.executable, "-m", "sim.mockserver"]
        for key, value in self.knobs.items():
            flag = "--" + key.replace("_", "-")
            if value is True:
                args.append(flag)
            elif value is not None and value is not False:
                args += [flag, str(value)]
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ)
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, env=env)
        if self.cpu is not None and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(self.proc.pid, {self.cpu})
        assert self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + self.ready_timeout_s
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                self.stop()
                raise RuntimeError("mock server did not start in time")
            chunk = os.read(self.proc.stdout.fileno(), 1)
            if not chunk:
                self.stop()
                raise RuntimeError("mock server exited before it was ready")
            line += chunk
        sel.close()
        self.url = line.decode().strip().rsplit(" ", 1)[-1]
        return self.url

    def stats(self, *, reset: bool = False) -> dict[str, Any]:
        import urllib.request

        url = self.url + "/mock/stats" + ("?reset=1" if reset else "")
        with urllib.request.urlopen(url, timeout=30) as resp:
            data: dict[str, Any] = json.loads(resp.read())
        return data

    def set_script(self, script: str) -> None:
        """Replace the server's script (``"ok,500"``), starting over with fresh stats."""
        import urllib.request

        url = self.url + "/mock/script?" + urllib.parse.urlencode({"set": script})
        with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=30):
            pass

    def stop(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        self.proc = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    raise SystemExit(main())
