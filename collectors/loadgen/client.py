"""The HTTP side of the load generator: request bodies and the httpx-based endpoint.

``HttpxEndpoint`` implements ``engine.Endpoint`` with one ``httpx.AsyncClient``. By default
its transport is ``LeanTransport`` (raw asyncio, timestamped reads, zero-switch streaming); any
other httpx transport (``httpx.AsyncHTTPTransport``, ``httpx.MockTransport``) also works, through
the generic ``aiter_raw`` path — with coarser timing, since reads are then stamped when the
coroutine sees them.

Secrets stop here: the endpoint URL's userinfo is taken out of every request URL and sent as a
header, and every text that leaves this module for a row, a log or an exception (error bodies,
error events, protocol errors) goes through ``HttpxEndpoint.redact`` first: the API key, the
URL's password, ``Bearer``/``Basic`` credentials and ``api_key=``-style values become ``***``.
The ``httpx`` logger (``-v``) gets a filter doing the same to the URLs it logs.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import httpx

from collectors import http_client
from collectors.loadgen.http1 import request_prefix
from collectors.loadgen.sse import StreamAccumulator
from collectors.loadgen.transport import (
    FAST_STREAM_EXT,
    TIMING_EXT,
    LeanStream,
    LeanTransport,
    SendTiming,
)
from collectors.loadgen.workloads import TurnSpec
from collectors.redact import redact
from errors import ConfigError

_perf = time.perf_counter

API_PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


#: what a response must declare to be read as a stream
SSE_TYPE = "text/event-stream"


class _RedactingFilter(logging.Filter):
    """Masks credentials in the ``httpx`` logger's records (it logs every request's URL)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.args:
            args = record.args if isinstance(record.args, tuple) else (record.args,)
            record.args = tuple(
                redact(str(a)) if isinstance(a, httpx.URL | str) else a for a in args
            )
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        return True


_LOG_FILTER = _RedactingFilter()
for _name in ("httpx", "httpcore"):
    if _LOG_FILTER not in logging.getLogger(_name).filters:
        logging.getLogger(_name).addFilter(_LOG_FILTER)


def auth_hint(api_key_env: str | None) -> str:
    """The hint of a 401/403: name the variable whose key was rejected (never the key), or say
    how to pass one."""
    if api_key_env:
        return (
            f"the server rejected the key from ${api_key_env} (sent as a Bearer token): check "
            "that variable's value and the key's permissions"
        )
    return "the server wants a key: pass it with --api-key-env NAME (the variable holding it)"


def connect_hint(exc: Exception) -> str:
    """The hint of a failed connection."""
    if "TLS handshake" in str(exc):
        return "is the server plain HTTP? try --endpoint http://… instead of https://"
    return "is the server running, and is --endpoint its base URL?"


def split_endpoint(endpoint: str) -> tuple[str, str, tuple[str, str] | None]:
    """``--endpoint`` → (base URL without credentials, query and fragment; ``?query`` to append
    to every request URL, or ""; (user, password) from the URL, or None).

    ``http://u:p@h:8000/v1?api-version=2`` → (``http://h:8000``, ``?api-version=2``, (u, p)).
    """
    u = httpx.URL(endpoint.strip())
    creds = (u.username, u.password) if (u.username or u.password) else None
    query = u.query.decode("ascii", "replace")
    clean = u.copy_with(username=None, password=None, query=None, fragment=None)
    return base_url(str(clean)), ("?" + query) if query else "", creds


def base_url(endpoint: str) -> str:
    """``http://h:8000``, ``http://h:8000/`` and ``http://h:8000/v1`` → ``http://h:8000``."""
    url = endpoint.strip().rstrip("/")
    for suffix in ("/chat/completions", "/completions", "/models"):
        if url.endswith("/v1" + suffix):
            url = url[: -len(suffix)]
    if url.endswith("/v1"):
        url = url[:-3]
    return url


def build_body(
    api: str,
    model: str,
    turn: TurnSpec,
    *,
    history: Sequence[Mapping[str, str]] = (),
    prefix: str | None = None,
    ignore_eos: bool = False,
) -> tuple[bytes, list[dict[str, Any]] | str]:
    """The JSON body of one streamed request, and the messages (chat) or prompt it carries."""
    body: dict[str, Any] = {"model": model}
    sent: list[dict[str, Any]] | str
    if api == "chat":
        if turn.messages is not None:
            messages = [dict(m) for m in turn.messages]
        else:
            messages = []
            if prefix:
                messages.append({"role": "system", "content": prefix})
            messages.extend(dict(m) for m in history)
            messages.append({"role": "user", "content": turn.text})
        body["messages"] = messages
        sent = messages
    else:
        if turn.messages is not None:
            prompt = "\n".join(f"{m.get('role')}: {m.get('content')}" for m in turn.messages)
        else:
            parts = [prefix] if prefix else []
            parts.extend(f"{m['role']}: {m['content']}" for m in history)
            parts.append(("user: " + turn.text) if history else turn.text)
            prompt = "\n\n".join(parts)
        body["prompt"] = prompt
        sent = prompt
    body["max_tokens"] = turn.max_tokens
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    if ignore_eos:
        body["ignore_eos"] = True
    return json.dumps(body, separators=(",", ":")).encode(), sent


def _is_sse(headers: list[tuple[bytes, bytes]]) -> bool:
    """Does a response head declare an SSE body (or no content type, read as one)?"""
    for name, value in headers:
        if name.lower() == b"content-type":
            mime = value.split(b";", 1)[0].strip().lower()
            return not mime or mime == SSE_TYPE.encode()
    return True


def error_text(status: int, raw: bytes, secrets: Iterable[str] = ()) -> str:
    """A short error message from an error response body (OpenAI-style JSON or text), with
    credentials masked (``redact``) before it is cut to length."""
    msg = ""
    try:
        obj = json.loads(raw)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        if isinstance(err, dict):
            msg = str(err.get("message") or err.get("detail") or err)
        else:
            msg = str(err)
    except (ValueError, RecursionError):
        msg = raw.decode("utf-8", "replace")
    msg = " ".join(redact(msg, secrets).split())[:300]
    return f"HTTP {status}: {msg}" if msg else f"HTTP {status}"


class HttpxEndpoint:
    """One OpenAI-compatible endpoint reached through httpx (see the module docstring)."""

    def __init__(
        self,
        endpoint: str,
        *,
        api: str = "chat",
        api_key: str | None = None,
        timeout_s: float = 600.0,
        transport: httpx.AsyncBaseTransport | None = None,
        timestamps: str = "auto",
    ) -> None:
        if api not in API_PATHS:
            raise ValueError(f"unknown api {api!r}")
        self.base, self.query, creds = split_endpoint(endpoint)
        self.url = self.base + API_PATHS[api] + self.query
        self.api = api
        self.secrets = tuple(s for s in (api_key, creds[1] if creds else None) if s)
        self.transport = (
            transport if transport is not None else LeanTransport(timestamps=timestamps)
        )
        scheme = httpx.URL(self.url).scheme
        if timestamps == "kernel":
            why = (
                self.transport.kernel_reason(scheme)
                if isinstance(self.transport, LeanTransport)
                else "the httpx transport (--transport httpx) stamps reads when its coroutine "
                "sees them"
            )
            if why is not None:
                raise ConfigError(
                    f"--timestamps kernel is not available for {self.base}: {why}",
                    hint="use --timestamps auto (kernel stamps where available, the event "
                    "loop's read instants elsewhere, recorded per run) or --timestamps loop",
                )
        headers = {"content-type": "application/json", "accept": SSE_TYPE}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        elif creds is not None:  # the URL's user:password, sent as a header, never in a URL
            token = base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode("ascii")
            headers["authorization"] = f"Basic {token}"
        # Discovery and identification (``get_json``, ``endpoint_identity.identify``) go
        # through a bounded client on the same transport: each answer within ``timeout_s`` in
        # all and at most ``http_client.MAX_RESPONSE_BYTES`` (docs/reliability.md).
        self.client = http_client.async_client(timeout_s, transport=self.transport, headers=headers)
        # The measured POSTs skip the client's per-request machinery (URL merging, cookies,
        # auth and redirect flows: ~0.3 ms a request, which at 256 synchronized streams piled
        # up into tens of ms of event-loop delay) and go to the transport as ready requests.
        self._post_url = httpx.URL(self.url)
        self._post_headers = httpx.Headers({**headers, "host": self._post_url.netloc.decode()})
        self._timeout = httpx.Timeout(timeout_s).as_dict()
        # With the lean transport even the httpx.Request/Response objects are skipped: every
        # request is this prefix + its Content-Length + its body, handed to the pool as bytes.
        self._lean = self.transport if isinstance(self.transport, LeanTransport) else None
        u = self._post_url
        self._key = (u.scheme, u.host, u.port or (443 if u.scheme == "https" else 80))
        self._prefix = (
            request_prefix("POST", u.raw_path.decode("ascii"), list(self._post_headers.raw))
            + b"Content-Length: "
        )

    def take_read_delays(self) -> list[int] | None:
        """How late the loop read the socket after the kernel got the data, since the last
        call (``rx_stamps.DELAY_EDGES_MS`` histogram), or None without kernel stamps."""
        if self._lean is None or not self._lean.rx.kernel_conns:
            return None
        return self._lean.rx.delays.take()

    def timestamp_source(self) -> tuple[str | None, str | None]:
        """("kernel" | "loop", why not the kernel) of the reads so far (None before any)."""
        if self._lean is not None:
            return self._lean.source
        return "loop", (
            "the httpx transport (--transport httpx) stamps reads when its coroutine sees them"
        )

    def redact(self, text: str) -> str:
        """``text`` with this endpoint's credentials (and any credential-looking value) masked."""
        return redact(text, self.secrets)

    async def prewarm(self, connections: int) -> int:
        if isinstance(self.transport, LeanTransport) and connections > 0:
            return await self.transport.prewarm(self.url, connections)
        return 0

    async def stream(
        self, body: bytes, acc: StreamAccumulator, timing: SendTiming
    ) -> tuple[int, str | None]:
        """POST ``body`` and feed the streamed response into ``acc``.

        Returns (HTTP status, error text or None). Transport failures raise httpx errors;
        ``timing.sent`` is the instant the request was written (or just before ``send`` when
        the transport does not report it).
        """
        lean = self._lean
        if lean is not None:
            data = self._prefix + str(len(body)).encode("ascii") + b"\r\n\r\n" + body
            head, stream = await lean.send(self._key, data, "POST", timing, self._timeout)
            status = head.status
            timing.status = status
            if status < 300 and _is_sse(head.headers):
                try:
                    await stream.consume(acc.feed)
                    acc.finish()
                    problem = acc.problem()
                    return status, self.redact(problem) if problem is not None else None
                finally:
                    await stream.aclose()
            response = httpx.Response(status_code=status, headers=head.headers, stream=stream)
            return await self._read(response, acc)
        request = httpx.Request(
            "POST",
            self._post_url,
            headers=self._post_headers,
            content=body,
            extensions={TIMING_EXT: timing, "timeout": self._timeout},
        )
        t0 = _perf()
        response = await self.transport.handle_async_request(request)
        if timing.sent is None:
            timing.sent = t0
        timing.status = response.status_code
        return await self._read(response, acc)

    async def _read(
        self, response: httpx.Response, acc: StreamAccumulator
    ) -> tuple[int, str | None]:
        try:
            status = response.status_code
            if status >= 300:
                raw = await response.aread()
                acc.last_byte_t = _perf()
                return status, error_text(status, raw, self.secrets)
            ctype = response.headers.get("content-type", "")
            mime = ctype.split(";", 1)[0].strip().lower()
            if mime and mime != SSE_TYPE:
                raw = await response.aread()
                acc.last_byte_t = _perf()
                return status, self._not_a_stream(status, mime, raw, acc)
            fast = response.extensions.get(FAST_STREAM_EXT, response.stream)
            if isinstance(fast, LeanStream):
                await fast.consume(acc.feed)
            else:
                async for data in response.aiter_raw():
                    acc.feed(data, _perf())
            acc.finish()
            problem = acc.problem()
            return status, self.redact(problem) if problem is not None else None
        finally:
            await response.aclose()

    def _not_a_stream(self, status: int, mime: str, raw: bytes, acc: StreamAccumulator) -> str:
        """The error of a success status whose body is not an SSE stream (docs/metrics.md)."""
        if mime == "application/json" or mime.endswith("+json"):
            try:
                obj = json.loads(raw)
            except (ValueError, RecursionError):
                obj = None
            if isinstance(obj, dict) and isinstance(obj.get("choices"), list):
                acc.non_streamed(raw)  # its usage and finish reason are kept on the row
                return f"HTTP {status} with {acc.problem()}"
            if isinstance(obj, dict) and "error" in obj:
                return self.redact(error_text(status, raw, self.secrets))
        return (
            f"HTTP {status} with content-type {mime}, expected {SSE_TYPE} "
            "(is --endpoint the API's base URL?)"
        )

    async def get_json(self, path: str) -> Any:
        response = await self.client.get(self.base + path + self.query)
        response.raise_for_status()
        return http_client.json_of(response)

    async def aclose(self) -> None:
        await self.client.aclose()
