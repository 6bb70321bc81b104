"""The one place HTTP clients are made: every request has an overall deadline and a size cap.

Every ``httpx`` client the project opens — identification, discovery, verify's checks, the
quality probe, ``/metrics`` scrapes and the ``--metrics-url auto`` probe, Prometheus, the GitHub
API, the engine launcher's health wait, the demo — comes from :func:`async_client` or
:func:`sync_client`. The load generator's measured POSTs do not pass through a client at all
(``collectors.loadgen.client.HttpxEndpoint.stream`` hands ready bytes to its transport), so
their hot path is untouched; its discovery requests (``/v1/models``, identification) go through
a client made here, on the same transport.

A client made here bounds each request three ways (docs/reliability.md, *Identification and
discovery are bounded*):

- **an overall deadline** of ``timeout_s`` from the moment the request is sent to its last
  byte — httpx's own timeouts bound each read, so a server dripping one byte every 0.5 s would
  otherwise never time out. Past it the request raises :class:`DeadlineExceeded` (an
  ``httpx.ReadTimeout``). An async client bounds the response head too; a sync one bounds the
  head by its read timeout and the body by the deadline, checked at every chunk;
- **a size cap** (``max_bytes``, :data:`MAX_RESPONSE_BYTES` unless the caller names a larger
  one such as :data:`MAX_METRICS_BYTES`): a ``Content-Length`` above it is refused before the
  body is read, a body that grows past it is refused at the chunk that crosses it
  (:class:`ResponseTooLarge`, an ``httpx.TransportError``). ``Accept-Encoding: identity`` is
  asked for, so the cap counts what is kept in memory;
- **JSON nested too deep** to decode (``RecursionError`` in the standard library's decoder,
  about 1,000 levels) is :class:`JSONTooDeep`, a ``json.JSONDecodeError`` — a ``ValueError`` —
  through :func:`json_of` and :func:`loads`, so every "not JSON" path already in place takes it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import httpx

#: The default cap on one response's body: a ``/v1/models`` list, a ``/version``, a chat
#: completion, a GitHub API answer are all far below it.
MAX_RESPONSE_BYTES = 8 * 1024 * 1024
#: The cap for a ``/metrics`` page or a Prometheus range answer, which grow with the series.
MAX_METRICS_BYTES = 64 * 1024 * 1024
#: The longest any connect may take, whatever the deadline.
MAX_CONNECT_S = 10.0


class DeadlineExceeded(httpx.ReadTimeout):
    """A response did not arrive in full within the client's overall deadline."""


class ResponseTooLarge(httpx.TransportError):
    """A response's body is larger than the client's size cap (it was not read past the cap)."""


class JSONTooDeep(json.JSONDecodeError):
    """A JSON text nested too deep for the decoder (a ``ValueError``, like any bad JSON)."""


def _mib(n: int) -> str:
    return f"{n / 1024 / 1024:g} MiB"


def loads(text: str | bytes) -> Any:
    """``json.loads``, with nesting too deep to decode raised as :class:`JSONTooDeep`."""
    try:
        return json.loads(text)
    except RecursionError:
        doc = text if isinstance(text, str) else text[:200].decode("utf-8", "replace")
        raise JSONTooDeep(
            "JSON nested too deep to decode (about 1,000 levels or more)", doc, 0
        ) from None


def json_of(response: httpx.Response) -> Any:
    """The response's body as JSON (``response.json()``), deep nesting a :class:`JSONTooDeep`."""
    try:
        return response.json()
    except RecursionError:
        raise JSONTooDeep(
            f"{response.request.url} answered JSON nested too deep to decode "
            "(about 1,000 levels or more)",
            "",
            0,
        ) from None


def _declared_too_large(response: httpx.Response, max_bytes: int) -> None:
    length = response.headers.get("content-length", "")
    if length.strip().isdigit() and int(length) > max_bytes:
        raise ResponseTooLarge(
            f"{response.request.url} answered {int(length):,} bytes, more than the "
            f"{_mib(max_bytes)} a response may have",
            request=response.request,
        )


def _over(request: httpx.Request, max_bytes: int) -> ResponseTooLarge:
    return ResponseTooLarge(
        f"{request.url} answered more than the {_mib(max_bytes)} a response may have",
        request=request,
    )


def _late(request: httpx.Request, deadline_s: float) -> DeadlineExceeded:
    return DeadlineExceeded(
        f"{request.url} did not answer in full within {deadline_s:g} s", request=request
    )


class _Bounds:
    """What a bounded body stream checks: the request it answers, the overall deadline (a
    ``time.monotonic()`` instant, and its length for the message) and the size cap."""

    def __init__(
        self, request: httpx.Request, *, deadline: float, deadline_s: float, max_bytes: int
    ) -> None:
        self._request = request
        self._deadline = deadline
        self._deadline_s = deadline_s
        self._max_bytes = max_bytes


class _BoundedAsyncStream(_Bounds, httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, request: httpx.Request, **bounds: Any) -> None:
        super().__init__(request, **bounds)
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = self._inner.__aiter__()
        seen = 0
        while True:
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise _late(self._request, self._deadline_s)
            try:
                async with asyncio.timeout(left):
                    chunk = await chunks.__anext__()
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise _late(self._request, self._deadline_s) from None
            seen += len(chunk)
            if seen > self._max_bytes:
                raise _over(self._request, self._max_bytes)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _BoundedSyncStream(_Bounds, httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, request: httpx.Request, **bounds: Any) -> None:
        super().__init__(request, **bounds)
        self._inner = inner

    def __iter__(self) -> Iterator[bytes]:
        seen = 0
        for chunk in self._inner:
            seen += len(chunk)
            if seen > self._max_bytes:
                raise _over(self._request, self._max_bytes)
            if time.monotonic() > self._deadline:
                raise _late(self._request, self._deadline_s)
            yield chunk

    def close(self) -> None:
        self._inner.close()


class BoundedAsyncClient(httpx.AsyncClient):
    """An ``httpx.AsyncClient`` whose every request has an overall deadline and a size cap
    (made by :func:`async_client`)."""

    def __init__(self, *, deadline_s: float, max_bytes: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.deadline_s = deadline_s
        self.max_bytes = max_bytes

    async def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        stream = bool(kwargs.pop("stream", False))
        deadline = time.monotonic() + self.deadline_s
        try:
            async with asyncio.timeout(self.deadline_s):
                response = await super().send(request, stream=True, **kwargs)
        except TimeoutError:
            raise _late(request, self.deadline_s) from None
        try:
            _declared_too_large(response, self.max_bytes)
            assert isinstance(response.stream, httpx.AsyncByteStream)
            response.stream = _BoundedAsyncStream(
                response.stream,
                request,
                deadline=deadline,
                deadline_s=self.deadline_s,
                max_bytes=self.max_bytes,
            )
            if not stream:
                await response.aread()
        except BaseException:
            await response.aclose()
            raise
        return response


class BoundedClient(httpx.Client):
    """An ``httpx.Client`` whose every request has an overall deadline (for the body; the head
    within its read timeout) and a size cap (made by :func:`sync_client`)."""

    def __init__(self, *, deadline_s: float, max_bytes: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.deadline_s = deadline_s
        self.max_bytes = max_bytes

    def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        stream = bool(kwargs.pop("stream", False))
        deadline = time.monotonic() + self.deadline_s
        response = super().send(request, stream=True, **kwargs)
        try:
            _declared_too_large(response, self.max_bytes)
            assert isinstance(response.stream, httpx.SyncByteStream)
            response.stream = _BoundedSyncStream(
                response.stream,
                request,
                deadline=deadline,
                deadline_s=self.deadline_s,
                max_bytes=self.max_bytes,
            )
            if not stream:
                response.read()
        except BaseException:
            response.close()
            raise
        return response


def _timeout(timeout_s: float) -> httpx.Timeout:
    if not timeout_s > 0:
        raise ValueError(f"an HTTP client's timeout must be > 0 seconds, got {timeout_s}")
    return httpx.Timeout(timeout_s, connect=min(timeout_s, MAX_CONNECT_S))


def _headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    return {"accept-encoding": "identity", **(headers or {})}


def async_client(
    timeout_s: float,
    *,
    max_bytes: int = MAX_RESPONSE_BYTES,
    headers: Mapping[str, str] | None = None,
    auth: httpx.Auth | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    max_connections: int | None = None,
) -> BoundedAsyncClient:
    """An async client: each request ends within ``timeout_s`` (connect within at most
    :data:`MAX_CONNECT_S`) and reads at most ``max_bytes``; redirects are not followed."""
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=20)
    return BoundedAsyncClient(
        deadline_s=timeout_s,
        max_bytes=max_bytes,
        timeout=_timeout(timeout_s),
        headers=_headers(headers),
        auth=auth,
        transport=transport,
        limits=limits,
        follow_redirects=False,
    )


def sync_client(
    timeout_s: float,
    *,
    max_bytes: int = MAX_RESPONSE_BYTES,
    headers: Mapping[str, str] | None = None,
    auth: httpx.Auth | None = None,
    transport: httpx.BaseTransport | None = None,
    base_url: str = "",
    follow_redirects: bool = False,
) -> BoundedClient:
    """A sync client: each request's body ends within ``timeout_s`` of its sending (every read
    within it) and reads at most ``max_bytes``; redirects are followed only when asked."""
    return BoundedClient(
        deadline_s=timeout_s,
        max_bytes=max_bytes,
        timeout=_timeout(timeout_s),
        headers=_headers(headers),
        auth=auth,
        transport=transport,
        base_url=base_url,
        follow_redirects=follow_redirects,
    )
