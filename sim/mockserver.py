"""A loopback OpenAI-compatible streaming server with exact timing knobs (tests and benchmarks).

Not the reference engine (``sim`` simulates one); this is a measuring instrument's test rig:
raw ``asyncio.Protocol`` HTTP/1.1, chat and completions with SSE streaming, usage, and
``/v1/models``. Every knob is exact:

- ``ttft_ms`` / ``itl_ms``: the first content chunk is written ``ttft_ms`` after the request
  has been read, then one chunk every ``itl_ms`` (deadlines from the receipt instant, so delays
  do not accumulate). With both 0 the server streams **as fast as it can** (``burst`` chunks
  per event-loop turn, with back-pressure), for load-generator capacity runs.
- ``output_tokens``: chunks per response (default: the request's ``max_tokens``).
- ``script``: behaviours cycled per completion request: ``ok``, ``500``, ``429``, ``reset:N``
  (TCP reset after N chunks), ``stall:N`` (stop sending after N chunks, keep the connection),
  ``close:N`` (close cleanly mid-stream), ``error-event:N`` (an SSE error event after N
  chunks); ``ok*8`` repeats.
- ``record``: keep what was actually sent (TTFT and gaps, by the server's clock), served at
  ``GET /mock/stats`` — the truth a measurement-error benchmark compares against.

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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

_perf = time.perf_counter

ACTIONS = ("ok", "500", "429", "reset", "stall", "close", "error-event")


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
    ttft_ms: list[float] = field(default_factory=list)
    itl_ms: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "completed": self.completed,
            "tokens": self.tokens,
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

    def __init__(self, conn: _Conn, body: dict[str, Any], chat: bool, t0_loop: float) -> None:
        cfg = conn.server.cfg
        self.conn = conn
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
        if self.include_usage:
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
        parts.append("data: [DONE]\n\n")
        chunked = cfg.chunked
        out = b"".join(_frame(p.encode(), chunked) for p in parts)
        return out + (b"0\r\n\r\n" if chunked else b"")

    # --- sending ------------------------------------------------------------------------

    def start(self) -> None:
        conn = self.conn
        cfg = conn.server.cfg
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
        if action == "ok" or self.i < self.arg:
            return False
        conn = self.conn
        if action == "reset":
            conn.reset()
        elif action == "close":
            conn.close()
        elif action == "error-event":
            err = (
                b'data: {"error":{"message":"mock error event","type":"server_error",'
                b'"code":500}}\n\n'
            )
            tail = _frame(err, True) + _frame(b"data: [DONE]\n\n", True) + b"0\r\n\r\n"
            conn.write(tail)
            conn.stream_done()
        # stall: simply stop sending
        return True

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
            try:
                method, target, _ = lines[0].decode("latin-1").split(" ", 2)
            except ValueError:
                self._respond(400, {"error": {"message": "bad request line"}})
                self.close()
                return
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            self._handle(method, target.split("?", 1), body)

    def _respond(self, status: int, obj: Any, reason: str = "") -> None:
        data = json.dumps(obj).encode()
        reason = reason or {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(status, "Error")
        head = (
            f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(data)}\r\n\r\n"
        )
        self.write(head.encode() + data)

    def _handle(self, method: str, target: list[str], raw: bytes) -> None:
        path = target[0]
        server = self.server
        cfg = server.cfg
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
        stream = _Stream(self, body, chat, t0_loop)
        if stream.action in ("500", "429"):
            status = int(stream.action)
            msg = "mock server error" if status == 500 else "mock rate limit"
            self._respond(status, {"error": {"message": msg, "code": status}})
            return
        self.busy = True
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

    def next_action(self) -> tuple[str, int]:
        action = self.cfg.script[self._n % len(self.cfg.script)]
        self._n += 1
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
