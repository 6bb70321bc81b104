"""The reference engine's OpenAI-compatible HTTP server (raw asyncio, HTTP/1.1 keep-alive).

Endpoints: ``POST /v1/chat/completions``, ``POST /v1/completions`` (SSE streaming with chunked
transfer encoding, or one JSON body), ``GET /v1/models``, ``GET /health``, ``GET /metrics``.

The engine loop (:meth:`SimServer._run`) drives ``sim.engine.Scheduler`` in virtual time paced by
the wall clock: an iteration of virtual duration d takes d / time_scale wall seconds. Tokens are
written straight from the loop into each connection's transport (no task per token); when the
loop falls behind the wall clock (tiny steps at a large time scale) it runs the late iterations
back to back, so a client sees those tokens in a burst rather than a slower engine.

Prompt tokens are counted without a tokenizer as ceil(UTF-8 bytes / 4) of the rendered prompt
(chat: ``<|role|>\\n{content}\\n`` per message plus ``<|assistant|>\\n``); a prompt given as a
list of token ids counts one token per id. Prefix caching hashes block-aligned prefixes of those
bytes, so prompts that share a leading text share cached blocks.

Answers: a greedy (``temperature: 0``) or seeded request is deterministic — its length and text
are drawn from a generator seeded by the prompt (and the seed) — and ``stop`` (a string or up to
four) cuts the text right before the first stop string, with finish_reason ``stop``.

Python API for tests and the demo: :func:`start_in_thread` (a handle with ``.url`` and
``.stop()``, also a context manager) and :func:`serve` (an async context manager).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import random
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from errors import ConfigError
from sim import metrics as sim_metrics
from sim.engine import (
    EngineConfig,
    Scheduler,
    SimRequest,
    count_tokens,
    draw_output_len,
    prefix_block_hashes,
)
from sim.text import token_stream

SERVER_NAME = "servescope-sim"
OWNED_BY = "servescope-sim"
MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_LAG_WALL_S = 0.05  # past this lag behind the wall clock, virtual time jumps forward

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Payload Too Large",
    431: "Request Header Fields Too Large",
    501: "Not Implemented",
}


class _HttpError(Exception):
    def __init__(self, status: int, message: str, err_type: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type


def _error_body(status: int, message: str, err_type: str) -> bytes:
    return json.dumps(
        {"error": {"message": message, "type": err_type, "param": None, "code": status}}
    ).encode()


class _Stream:
    """The token sink of one completion request: formats chunks into its connection's buffer."""

    __slots__ = (
        "chat",
        "conn",
        "created",
        "done",
        "include_usage",
        "offset",
        "pieces",
        "prefix",
        "req",
        "rid",
        "role_chunk",
        "server",
        "stream",
        "tail",
        "tail_last",
    )

    def __init__(
        self,
        server: SimServer,
        conn: _Conn,
        *,
        chat: bool,
        stream: bool,
        include_usage: bool,
        offset: int,
        rid: str,
        pieces: list[str] | None = None,
    ) -> None:
        self.server = server
        self.conn = conn
        self.chat = chat
        self.stream = stream
        self.include_usage = include_usage
        self.offset = offset
        self.rid = rid
        #: this request's own token texts (an answer cut at a stop string), else None: the
        #: server's token stream from ``offset``
        self.pieces = pieces
        self.created = int(time.time())
        self.done = False
        self.req: SimRequest | None = None
        model = json.dumps(server.config.model_name)
        if chat:
            head = (
                f'data: {{"id":"{rid}","object":"chat.completion.chunk","created":{self.created},'
                f'"model":{model},"choices":[{{"index":0,"delta":'
            )
            self.role_chunk = (
                head + '{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}'
                "\n\n"
            ).encode()
            self.prefix = (head + '{"content":"').encode()
            self.tail = b'"},"logprobs":null,"finish_reason":null}]}\n\n'
            self.tail_last = b'"},"logprobs":null,"finish_reason":"%s"}]}\n\n'
        else:
            head = (
                f'data: {{"id":"{rid}","object":"text_completion","created":{self.created},'
                f'"model":{model},"choices":[{{"index":0,"text":"'
            )
            self.role_chunk = b""
            self.prefix = head.encode()
            self.tail = b'","logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'
            self.tail_last = b'","logprobs":null,"finish_reason":"%s","stop_reason":null}]}\n\n'

    def on_token(self, req: SimRequest, now: float) -> None:
        conn = self.conn
        if not self.stream or conn.closed:
            return
        k = req.num_generated - 1
        if self.pieces is not None:
            tok = json.dumps(self.pieces[k])[1:-1].encode()
        else:
            toks = self.server.tokens_json
            tok = toks[(self.offset + k) % len(toks)]
        out = conn.out
        if k == 0 and self.role_chunk:
            out.append(self.role_chunk)
        if req.num_generated >= req.max_output:
            out.append(self.prefix + tok + self.tail_last % req.finish_reason.encode())
        else:
            out.append(self.prefix + tok + self.tail)
        self.server.mark_dirty(conn)

    def usage(self, req: SimRequest) -> dict[str, Any]:
        return {
            "prompt_tokens": req.prompt_len,
            "total_tokens": req.prompt_len + req.num_generated,
            "completion_tokens": req.num_generated,
            "prompt_tokens_details": {"cached_tokens": req.cached_tokens},
        }

    def on_finish(self, req: SimRequest, now: float) -> None:
        self.done = True
        conn = self.conn
        if conn.closed:
            return
        if self.stream:
            if self.include_usage:
                obj = "chat.completion.chunk" if self.chat else "text_completion"
                chunk = {
                    "id": self.rid,
                    "object": obj,
                    "created": self.created,
                    "model": self.server.config.model_name,
                    "choices": [],
                    "usage": self.usage(req),
                }
                data = json.dumps(chunk, separators=(",", ":")).encode()
                conn.out.append(b"data: " + data + b"\n\n")
            conn.out.append(b"data: [DONE]\n\n")
        else:
            toks = self.pieces or self.server.tokens
            offset = 0 if self.pieces is not None else self.offset
            text = "".join(toks[(offset + k) % len(toks)] for k in range(req.num_generated))
            choice: dict[str, Any]
            if self.chat:
                choice = {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": None,
                    "finish_reason": req.finish_reason,
                }
            else:
                choice = {
                    "index": 0,
                    "text": text,
                    "logprobs": None,
                    "finish_reason": req.finish_reason,
                    "stop_reason": None,
                }
            body = {
                "id": self.rid,
                "object": "chat.completion" if self.chat else "text_completion",
                "created": self.created,
                "model": self.server.config.model_name,
                "choices": [choice],
                "usage": self.usage(req),
                "system_fingerprint": SERVER_NAME,
            }
            conn.out.append(json.dumps(body, separators=(",", ":")).encode())
        self.server.mark_dirty(conn)


class _Conn(asyncio.Protocol):
    """One client connection: parses HTTP/1.1 requests, one at a time (pipelining is queued)."""

    def __init__(self, server: SimServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.out: list[bytes] = []
        self.active: _Stream | None = None
        self.keep_alive = True
        self.closed = False
        self.dirty = False
        self.eof = False

    # asyncio.Protocol -------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server.conns.add(self)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.active is None:
            self._process()

    def eof_received(self) -> bool | None:
        self.eof = True
        if self.active is None:
            self.close()
        return True  # keep the write side open until the response is finished

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.conns.discard(self)
        active = self.active
        if active is not None and active.req is not None and not active.done:
            self.server.abort(active.req)
        self.active = None

    # helpers ----------------------------------------------------------------------------------
    def close(self) -> None:
        if not self.closed and self.transport is not None:
            self.transport.close()
        self.closed = True

    def write(self, data: bytes) -> None:
        if not self.closed and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def respond(
        self,
        status: int,
        body: bytes,
        content_type: str = "application/json",
    ) -> None:
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
            f"Content-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"Server: {SERVER_NAME}\r\n"
            f"Connection: {'keep-alive' if self.keep_alive else 'close'}\r\n\r\n"
        ).encode()
        self.write(head + body)
        if not self.keep_alive:
            self.close()

    def start_stream(self) -> None:
        self.write(
            b"HTTP/1.1 200 OK\r\n"
            b"Content-Type: text/event-stream; charset=utf-8\r\n"
            b"Cache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\n"
            b"Server: " + SERVER_NAME.encode() + b"\r\n"
            b"Connection: " + (b"keep-alive" if self.keep_alive else b"close") + b"\r\n\r\n"
        )

    def flush(self) -> None:
        """Write what the engine produced since the last flush; finish the response if done."""
        self.dirty = False
        stream = self.active
        if self.closed or stream is None:
            self.out.clear()
            return
        data = b"".join(self.out)
        self.out.clear()
        if stream.stream:
            if data:
                self.write(b"%x\r\n%b\r\n" % (len(data), data))
            if stream.done:
                self.write(b"0\r\n\r\n")
        elif stream.done:
            self.respond(200, data)
        if stream.done:
            self.active = None
            if not self.keep_alive or self.eof:
                self.close()
            elif self.buf:
                self._process()

    def _process(self) -> None:
        while self.active is None and not self.closed:
            idx = self.buf.find(b"\r\n\r\n")
            if idx < 0:
                if len(self.buf) > MAX_HEADER_BYTES:
                    self.keep_alive = False
                    self.respond(431, _error_body(431, "headers too large", "BadRequestError"))
                return
            try:
                head = bytes(self.buf[:idx]).decode("latin-1")
                lines = head.split("\r\n")
                method, target, version = lines[0].split(" ", 2)
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    k, _, v = line.partition(":")
                    headers[k.strip().lower()] = v.strip()
                length = int(headers.get("content-length", "0") or 0)
            except ValueError:
                self.keep_alive = False
                self.respond(400, _error_body(400, "malformed HTTP request", "BadRequestError"))
                return
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self.keep_alive = False
                self.respond(411, _error_body(411, "send a Content-Length", "BadRequestError"))
                return
            if length > MAX_BODY_BYTES:
                self.keep_alive = False
                self.respond(413, _error_body(413, "request body too large", "BadRequestError"))
                return
            end = idx + 4 + length
            if len(self.buf) < end:
                return
            body = bytes(self.buf[idx + 4 : end])
            del self.buf[:end]
            conn_hdr = headers.get("connection", "").lower()
            if version == "HTTP/1.0":
                self.keep_alive = conn_hdr == "keep-alive"
            else:
                self.keep_alive = conn_hdr != "close"
            self.server.dispatch(self, method.upper(), target, body)


class SimServer:
    """A simulated engine and its HTTP front end, living on one asyncio loop."""

    def __init__(self, config: EngineConfig, *, time_scale: float = 1.0) -> None:
        if time_scale <= 0:
            raise ConfigError(f"time_scale must be > 0, got {time_scale}")
        self.config = config
        self.time_scale = float(time_scale)
        self.sched = Scheduler(config)
        self.rng = random.Random(config.seed)
        self.tokens = token_stream(config.seed)
        self.tokens_json = [json.dumps(t)[1:-1].encode() for t in self.tokens]
        self.conns: set[_Conn] = set()
        self.host = "127.0.0.1"
        self.port = 0
        self._dirty: list[_Conn] = []
        self._busy: deque[tuple[float, float]] = deque()
        self._counter = 0
        self._server: asyncio.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wall0 = 0.0
        self._gpus: list[sim_metrics.GpuIdentity] = []
        self.created = int(time.time())

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    # lifecycle --------------------------------------------------------------------------------
    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._wake = asyncio.Event()
        self._wall0 = loop.time()
        self._server = await loop.create_server(lambda: _Conn(self), host, port)
        sock = self._server.sockets[0]
        self.host = host
        self.port = int(sock.getsockname()[1])
        self._gpus = sim_metrics.gpu_identities(
            self.config.gpu.name, self.config.tp, self.config.seed, self.port
        )
        self._task = loop.create_task(self._run(), name="servescope-sim-engine")

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.conns):
            if conn.transport is not None:
                conn.transport.abort()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._server is not None:
            await self._server.wait_closed()

    # clock ------------------------------------------------------------------------------------
    def vnow(self) -> float:
        assert self._loop is not None
        return (self._loop.time() - self._wall0) * self.time_scale

    # engine loop ------------------------------------------------------------------------------
    async def _run(self) -> None:
        assert self._loop is not None and self._wake is not None
        loop = self._loop
        sched = self.sched
        scale = self.time_scale
        wake = self._wake
        vt = 0.0
        max_lag = MAX_LAG_WALL_S * scale
        while True:
            if not sched.has_work():
                wake.clear()
                await wake.wait()
                vt = max(vt, self.vnow())
                continue
            now_v = self.vnow()
            if now_v - vt > max_lag:
                vt = now_v
            batch = sched.schedule(vt)
            if not batch.items:
                wake.clear()
                await wake.wait()
                continue
            vt += batch.duration
            delay = self._wall0 + vt / scale - loop.time()
            await asyncio.sleep(delay if delay > 0 else 0)
            sched.commit(batch, vt)
            self._busy.append((vt, batch.duration))
            self.flush()

    def mark_dirty(self, conn: _Conn) -> None:
        if not conn.dirty:
            conn.dirty = True
            self._dirty.append(conn)

    def flush(self) -> None:
        dirty = self._dirty
        self._dirty = []
        for conn in dirty:
            conn.flush()

    def abort(self, req: SimRequest) -> None:
        self.sched.abort(req, self.vnow())

    def gpu_util(self) -> float:
        """Busy fraction of the last virtual second (DCGM_FI_DEV_GPU_UTIL)."""
        now = self.vnow()
        busy = self._busy
        while busy and busy[0][0] < now - 1.0:
            busy.popleft()
        return min(1.0, sum(d for _, d in busy))

    # HTTP dispatch ----------------------------------------------------------------------------
    def dispatch(self, conn: _Conn, method: str, target: str, body: bytes) -> None:
        path = target.split("?", 1)[0]
        try:
            if path in ("/v1/chat/completions", "/v1/completions"):
                if method != "POST":
                    raise _HttpError(405, f"use POST for {path}", "MethodNotAllowed")
                self._completion(conn, body, chat=path == "/v1/chat/completions")
            elif path in ("/health", "/metrics", "/v1/models", "/ping"):
                if method not in ("GET", "HEAD"):
                    raise _HttpError(405, f"use GET for {path}", "MethodNotAllowed")
                if path in ("/health", "/ping"):
                    conn.respond(200, b"", "text/plain")
                elif path == "/metrics":
                    text = sim_metrics.render(
                        self.sched,
                        gpus=self._gpus,
                        gpu_util=self.gpu_util(),
                        time_scale=self.time_scale,
                    )
                    conn.respond(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")
                else:
                    conn.respond(200, json.dumps(self._models()).encode())
            else:
                raise _HttpError(404, f"no route {path}", "NotFoundError")
        except _HttpError as e:
            conn.respond(e.status, _error_body(e.status, e.message, e.err_type))

    def _models(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "object": "list",
            "data": [
                {
                    "id": cfg.model_name,
                    "object": "model",
                    "created": self.created,
                    "owned_by": OWNED_BY,
                    "root": cfg.model.hf_repo or cfg.model.name,
                    "parent": None,
                    "max_model_len": cfg.model.context or None,
                    "permission": [],
                }
            ],
        }

    def _completion(self, conn: _Conn, body: bytes, *, chat: bool) -> None:
        try:
            payload = json.loads(body or b"{}")
        except ValueError as e:
            raise _HttpError(400, f"request body is not valid JSON: {e}") from e
        if not isinstance(payload, dict):
            raise _HttpError(400, "request body must be a JSON object")
        cfg = self.config
        model = payload.get("model")
        if model not in (None, "", cfg.model_name, cfg.model.name, cfg.model.hf_repo):
            raise _HttpError(404, f"The model `{model}` does not exist.", "NotFoundError")
        prompt_bytes, prompt_len = self._prompt(payload, chat)
        if int(payload.get("n") or 1) != 1:
            raise _HttpError(400, "the sim supports n = 1 only")
        max_tokens = payload.get("max_completion_tokens", payload.get("max_tokens"))
        ctx = cfg.model.context
        if max_tokens is None:
            max_tokens = max(1, (ctx or 4096 + prompt_len) - prompt_len)
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise _HttpError(400, f"max_tokens must be a positive integer, got {max_tokens!r}")
        ignore_eos = bool(payload.get("ignore_eos", False))
        stops = _stop_strings(payload.get("stop"))
        why = self.sched.check_fits(prompt_len, max_tokens)
        if why:
            raise _HttpError(400, why)
        rng = self._request_rng(payload, prompt_bytes, chat)
        out_len, reason = draw_output_len(rng, max_tokens, ignore_eos)
        min_tokens = payload.get("min_tokens")
        if isinstance(min_tokens, int) and out_len < min(min_tokens, max_tokens):
            out_len, reason = min(min_tokens, max_tokens), "length"
            if out_len < max_tokens:
                reason = "stop"
        offset = rng.randrange(len(self.tokens))
        pieces = None
        if stops:
            pieces, out_len, reason = self._cut_at_stop(offset, out_len, reason, stops)
        stream = bool(payload.get("stream", False))
        opts = payload.get("stream_options") or {}
        include_usage = bool(isinstance(opts, dict) and opts.get("include_usage"))
        self._counter += 1
        rid = f"{'chatcmpl' if chat else 'cmpl'}-sim{self._counter:08x}"
        sink = _Stream(
            self,
            conn,
            chat=chat,
            stream=stream,
            include_usage=include_usage,
            offset=offset,
            rid=rid,
            pieces=pieces,
        )
        hashes = (
            prefix_block_hashes(prompt_bytes, cfg.block_size)
            if cfg.prefix_caching and prompt_bytes
            else None
        )
        req = SimRequest(
            rid,
            prompt_len,
            out_len,
            self.vnow(),
            block_hashes=hashes,
            sink=sink,
            finish_reason=reason,
        )
        sink.req = req
        conn.active = sink
        if stream:
            conn.start_stream()
        delay = cfg.calibration.request_overhead_s / self.time_scale
        if delay > 0:
            assert self._loop is not None
            self._loop.call_later(delay, self._enqueue, req)
        else:
            self._enqueue(req)

    def _request_rng(self, payload: dict[str, Any], prompt: bytes, chat: bool) -> random.Random:
        """The randomness of one answer (its length and text): greedy (temperature 0) or seeded
        requests draw from a generator seeded by the prompt (and the seed), so the same request
        gives the same answer; the others from the server's own stream."""
        seed = payload.get("seed")
        seeded = isinstance(seed, int) and not isinstance(seed, bool)
        if payload.get("temperature") != 0 and not seeded:
            return self.rng
        digest = hashlib.blake2b(prompt, digest_size=16)
        digest.update(f"|{int(chat)}|{seed if seeded else ''}|{self.config.seed}".encode())
        return random.Random(digest.digest())

    def _cut_at_stop(
        self, offset: int, out_len: int, reason: str, stops: list[str]
    ) -> tuple[list[str] | None, int, str]:
        """The answer cut right before its first stop string: (its token texts, the tokens
        generated — up to the one where the stop string begins —, "stop"); unchanged (None, …)
        when no stop string occurs."""
        toks = self.tokens
        pieces = [toks[(offset + k) % len(toks)] for k in range(out_len)]
        text = "".join(pieces)
        found = [i for i in (text.find(s) for s in stops) if i >= 0]
        if not found:
            return None, out_len, reason
        cut = min(found)
        kept: list[str] = []
        at = 0
        for piece in pieces:
            if at + len(piece) > cut:
                kept.append(piece[: cut - at])  # the token where the stop begins, cut there
                break
            kept.append(piece)
            at += len(piece)
        return kept, len(kept), "stop"

    def _enqueue(self, req: SimRequest) -> None:
        self.sched.add(req)
        assert self._wake is not None
        self._wake.set()

    @staticmethod
    def _prompt(payload: dict[str, Any], chat: bool) -> tuple[bytes, int]:
        """The prompt's bytes (for prefix hashing) and its token count."""
        if chat:
            messages = payload.get("messages")
            if not isinstance(messages, list) or not messages:
                raise _HttpError(400, "'messages' must be a non-empty list")
            parts: list[str] = []
            for m in messages:
                if not isinstance(m, dict):
                    raise _HttpError(400, "each message must be an object")
                content = m.get("content")
                if isinstance(content, list):
                    content = "".join(
                        str(p.get("text", "")) for p in content if isinstance(p, dict)
                    )
                parts.append(f"<|{m.get('role', 'user')}|>\n{content or ''}\n")
            parts.append("<|assistant|>\n")
            data = "".join(parts).encode("utf-8")
            return data, count_tokens(data)
        prompt = payload.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]
        if isinstance(prompt, str):
            data = prompt.encode("utf-8")
            return data, count_tokens(data)
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            data = b"".join(int(t).to_bytes(4, "little", signed=True) for t in prompt)
            return data, len(prompt)
        raise _HttpError(400, "'prompt' must be a string, a list of one string or token ids")


def _stop_strings(stop: Any) -> list[str]:
    """``stop`` (a string, a list of strings, or null) as a list of its non-empty strings."""
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise _HttpError(400, "'stop' must be a string or a list of strings")
    if len(stop) > 4:
        raise _HttpError(400, "'stop' takes at most 4 strings")
    return [s for s in stop if s]


@contextlib.asynccontextmanager
async def serve(
    config: EngineConfig, *, host: str = "127.0.0.1", port: int = 0, time_scale: float = 1.0
) -> AsyncIterator[SimServer]:
    """Run a sim on the current loop for the duration of the block (port 0: a free port)."""
    server = SimServer(config, time_scale=time_scale)
    await server.start(host, port)
    try:
        yield server
    finally:
        await server.close()


class SimHandle:
    """A sim running on its own thread and event loop (see :func:`start_in_thread`)."""

    def __init__(self, config: EngineConfig, host: str, port: int, time_scale: float) -> None:
        self.config = config
        self.time_scale = time_scale
        self._host = host
        self._port = port
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self.server: SimServer | None = None
        self._thread = threading.Thread(target=self._main, name="servescope-sim", daemon=True)

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port

    def _main(self) -> None:
        asyncio.run(self._amain())

    async def _amain(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            server = SimServer(self.config, time_scale=self.time_scale)
            await server.start(self._host, self._port)
        except BaseException as e:  # reported to the starting thread
            self._error = e
            self._ready.set()
            return
        self.server = server
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await server.close()

    def start(self, timeout: float = 30.0) -> SimHandle:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("the sim did not start in time")
        if self._error is not None:
            if isinstance(self._error, OSError):
                raise ConfigError(
                    f"cannot listen on {self._host}:{self._port}: {self._error}",
                    hint="choose another --port (0 picks a free one)",
                ) from self._error
            raise self._error
        return self

    def stop(self, timeout: float = 10.0) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        self._thread.join(timeout)

    def __enter__(self) -> SimHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_in_thread(
    config: EngineConfig, *, host: str = "127.0.0.1", port: int = 0, time_scale: float = 1.0
) -> SimHandle:
    """Start a sim on a background thread; returns once it listens (``handle.url``)."""
    return SimHandle(config, host, port, time_scale).start()
