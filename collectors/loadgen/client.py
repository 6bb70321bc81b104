"""The HTTP side of the load generator: request bodies and the httpx-based endpoint.

``HttpxEndpoint`` implements ``engine.Endpoint`` with one ``httpx.AsyncClient``. By default
its transport is ``LeanTransport`` (raw asyncio, timestamped reads, zero-switch streaming); any
other httpx transport (``httpx.AsyncHTTPTransport``, ``httpx.MockTransport``) also works, through
the generic ``aiter_raw`` path — with coarser timing, since reads are then stamped when the
coroutine sees them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from collectors.loadgen.sse import StreamAccumulator
from collectors.loadgen.transport import (
    FAST_STREAM_EXT,
    TIMING_EXT,
    LeanStream,
    LeanTransport,
    SendTiming,
)
from collectors.loadgen.workloads import TurnSpec

_perf = time.perf_counter

API_PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


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


def error_text(status: int, raw: bytes) -> str:
    """A short error message from an error response body (OpenAI-style JSON or text)."""
    msg = ""
    try:
        obj = json.loads(raw)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        if isinstance(err, dict):
            msg = str(err.get("message") or err.get("detail") or err)
        else:
            msg = str(err)
    except ValueError:
        msg = raw.decode("utf-8", "replace")
    msg = " ".join(msg.split())[:300]
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
    ) -> None:
        if api not in API_PATHS:
            raise ValueError(f"unknown api {api!r}")
        self.base = base_url(endpoint)
        self.url = self.base + API_PATHS[api]
        self.api = api
        self.transport = transport if transport is not None else LeanTransport()
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self.client = httpx.AsyncClient(
            transport=self.transport,
            timeout=httpx.Timeout(timeout_s),
            headers=headers,
            follow_redirects=False,
        )
        # The measured POSTs skip the client's per-request machinery (URL merging, cookies,
        # auth and redirect flows: ~0.3 ms a request, which at 256 synchronized streams piled
        # up into tens of ms of event-loop delay) and go to the transport as ready requests.
        self._post_url = httpx.URL(self.url)
        self._post_headers = httpx.Headers({**headers, "host": self._post_url.netloc.decode()})
        self._timeout = httpx.Timeout(timeout_s).as_dict()

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
        try:
            if response.status_code >= 300:
                raw = await response.aread()
                acc.last_byte_t = _perf()
                return response.status_code, error_text(response.status_code, raw)
            fast = response.extensions.get(FAST_STREAM_EXT)
            if isinstance(fast, LeanStream):
                await fast.consume(acc.feed)
            else:
                async for data in response.aiter_raw():
                    acc.feed(data, _perf())
            acc.finish()
            return response.status_code, None
        finally:
            await response.aclose()

    async def get_json(self, path: str) -> Any:
        response = await self.client.get(self.base + path)
        response.raise_for_status()
        return response.json()

    async def aclose(self) -> None:
        await self.client.aclose()
