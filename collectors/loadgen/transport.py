"""A lean httpx transport for streaming benchmarks: raw asyncio sockets, timestamped reads.

``httpx.AsyncClient(transport=LeanTransport())`` is the load generator's HTTP client. The
transport speaks HTTP/1.1 itself over ``asyncio.Protocol`` connections (keep-alive pooled per
origin, TLS for https) instead of going through httpcore's connection pool, whose per-chunk
overhead limits one client to ~17k SSE events/s at 256 streams.

Timing: the instant a request's bytes are handed to the socket is written into the request's
``SendTiming`` extension (``TIMING_EXT``). Every body read is stamped, on the
``time.perf_counter()`` timeline, with the instant the *kernel* received its data where it can
(``timestamps="auto"`` or ``"kernel"``, plain ``http://`` on Linux: the connection is a
``_KernelSocket``, read with ``recvmsg`` from ``loop.add_reader`` so that each read carries its
``SO_TIMESTAMPNS`` stamp, see ``rx_stamps``), else with the instant the event loop read the
socket (``data_received``: https, other systems, ``timestamps="loop"``). ``LeanTransport.source``
says which, and why not the kernel. One read that drains several queued segments carries the
last one's stamp — Linux merges segments waiting in a socket's receive queue and keeps the
newest stamp, so even a ``MSG_PEEK`` cannot recover the first one's (measured; docs/timing.md):
events that share a read get one instant, which the client-bound verdict counts. A response
carries its ``LeanStream`` under
``FAST_STREAM_EXT``: ``await stream.consume(sink)`` hands every de-chunked body piece and its
read instant to ``sink`` straight from the protocol callback (no coroutine switch per chunk).
``aiter_raw()`` and friends work as with any transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx

from collectors.loadgen.http1 import (
    MAX_HEAD,
    ChunkedDecoder,
    ProtocolViolation,
    ResponseHead,
    parse_head,
    request_head,
)
from collectors.loadgen.rx_stamps import (
    CMSG_SIZE,
    ReadDelays,
    RealtimeMap,
    enable,
    kernel_unavailable_reason,
    stamp_of,
)

TIMING_EXT = "servescope.timing"
#: seconds a TLS handshake may take once TCP is connected: a handshake takes milliseconds (a
#: few round trips), so waiting longer only delays the diagnosis of ``https://`` sent to a
#: plain-HTTP port, where the server waits for a request line that never comes
TLS_HANDSHAKE_TIMEOUT_S = 5.0
FAST_STREAM_EXT = "servescope.stream"

ChunkSink = Callable[[bytes, float], None]
_perf = time.perf_counter
#: bytes asked of one ``recvmsg`` (each call allocates this much before trimming)
READ_SIZE = 65_536
TIMESTAMPS = ("auto", "kernel", "loop")


class KernelStampsUnavailable(httpx.ConnectError):
    """``timestamps="kernel"`` asked for where the kernel cannot stamp reads."""


class SendTiming:
    """Filled by the transport: ``sent`` = perf-counter instant the request was written."""

    __slots__ = ("connected", "reused", "sent", "status")

    def __init__(self) -> None:
        self.sent: float | None = None
        self.status: int | None = None  # HTTP status, once the head arrived (set by the caller)
        self.connected: float | None = None
        self.reused = False


class _Stale(Exception):
    """A reused keep-alive connection was closed by the server before it answered."""


_IDLE, _HEAD, _BODY, _DONE, _CLOSED = range(5)


class _Connection(asyncio.Protocol):
    def __init__(self, key: tuple[str, str, int]) -> None:
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.state = _IDLE
        self.served = 0
        self.got_bytes = False
        self.method = "POST"
        self._head_buf = b""
        self.head: ResponseHead | None = None
        self._head_waiter: asyncio.Future[ResponseHead] | None = None
        self._chunked: ChunkedDecoder | None = None
        self._left: int | None = None
        self.sink: ChunkSink | None = None
        self.pending: deque[tuple[bytes, float]] = deque()
        self.waiter: asyncio.Future[None] | None = None
        self.body_done = False
        self.error: Exception | None = None

    # --- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.received(data, _perf())

    def received(self, data: bytes, t: float) -> None:
        """``data``, received at ``t`` (the kernel's stamp or the loop's read instant)."""
        if self.state == _BODY:
            self._body(data, t)
            return
        if self.state == _CLOSED:
            return
        if self.state != _HEAD:
            self._fail(httpx.RemoteProtocolError("unexpected data from server while idle"))
            return
        self.got_bytes = True
        buf = self._head_buf + data if self._head_buf else data
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    self._fail(httpx.RemoteProtocolError("response head too large"))
                    return
                self._head_buf = buf
                return
            try:
                head = parse_head(buf[:end], method=self.method)
            except ProtocolViolation as exc:
                self._fail(httpx.RemoteProtocolError(str(exc)))
                return
            buf = buf[end + 4 :]
            if 100 <= head.status < 200 and head.status != 101:
                continue  # interim response (100 Continue): the real head follows
            break
        self._head_buf = b""
        self.head = head
        self.state = _BODY
        self._chunked = ChunkedDecoder() if head.chunked else None
        self._left = head.content_length
        waiter = self._head_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(head)
        if head.content_length == 0:
            self._end_body()
        elif buf:
            self._body(buf, t)

    def eof_received(self) -> bool | None:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        state = self.state
        self.state = _CLOSED
        if state == _BODY and self._chunked is None and self._left is None and exc is None:
            self._end_body()  # body delimited by the connection's end
            return
        if state in (_HEAD, _BODY):
            if exc is None:
                err: Exception = httpx.RemoteProtocolError(
                    "server closed the connection before the response was complete"
                    if state == _BODY
                    else "server closed the connection without sending a response"
                )
            else:
                err = httpx.ReadError(f"connection lost: {exc!r}")
            self._fail(err, close=False)

    # --- body ---------------------------------------------------------------------------

    def _body(self, data: bytes, t: float) -> None:
        dec = self._chunked
        done = False
        if dec is not None:
            try:
                out = dec.feed(data)
            except ProtocolViolation as exc:
                self._fail(httpx.RemoteProtocolError(str(exc)))
                return
            done = dec.done
        elif self._left is not None:
            if len(data) >= self._left:
                out = data[: self._left]
                self._left = 0
                done = True
            else:
                out = data
                self._left -= len(data)
        else:
            out = data
        if out:
            sink = self.sink
            if sink is not None:
                sink(out, t)
            else:
                self.pending.append((out, t))
                self._wake()
        if done:
            self._end_body()

    def _end_body(self) -> None:
        if self.state == _BODY:
            self.state = _DONE
        self.body_done = True
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, err: Exception, *, close: bool = True) -> None:
        self.error = err
        waiter = self._head_waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(_Stale() if self._stale_candidate() else err)
        self._wake()
        if close and self.transport is not None:
            self.state = _CLOSED
            self.transport.abort()

    def _stale_candidate(self) -> bool:
        return (
            self.served > 0
            and not self.got_bytes
            and isinstance(self.error, httpx.RemoteProtocolError | httpx.ReadError)
        )

    # --- use ----------------------------------------------------------------------------

    def start(self, data: bytes, method: str) -> asyncio.Future[ResponseHead]:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self.state = _HEAD
        self.method = method
        self.got_bytes = False
        self.head = None
        self.sink = None
        self.pending.clear()
        self.body_done = False
        self.error = None
        self._head_waiter = loop.create_future()
        self.transport.write(data)
        return self._head_waiter

    @property
    def reusable(self) -> bool:
        return (
            self.state == _DONE
            and self.head is not None
            and self.head.keep_alive
            and self.transport is not None
            and not self.transport.is_closing()
            and not (self._chunked is not None and self._chunked.extra)
        )

    def abort(self) -> None:
        self.state = _CLOSED
        if self.transport is not None:
            self.transport.abort()


class _KernelSocket(asyncio.Transport):
    """A plain TCP connection whose reads carry the kernel's receive stamps.

    asyncio's own socket transport reads with ``recv`` (no ancillary data), so this one owns
    the socket: ``loop.add_reader`` calls ``_read_ready``, which reads with ``recvmsg`` and
    hands ``_Connection.received`` the data with its stamp on the perf_counter timeline.
    Writes go straight to the socket (``send``), the rest, if any, from ``loop.add_writer``.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        protocol: _Connection,
        rx: RxStats,
    ) -> None:
        super().__init__()
        self._loop = loop
        self._sock: socket.socket | None = sock
        self._fd = sock.fileno()
        self._protocol = protocol
        self._rx = rx
        self._wbuf = bytearray()
        self._closing = False
        protocol.connection_made(self)
        loop.add_reader(self._fd, self._read_ready)

    def _read_ready(self) -> None:
        sock = self._sock
        if sock is None:
            return
        conn = self._protocol
        try:
            data, anc, _f, _a = sock.recvmsg(READ_SIZE, CMSG_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(exc)
            return
        if not data:
            self._close(None)  # end of stream: as asyncio's eof_received returning False
            return
        now = _perf()
        rx = self._rx
        real = stamp_of(anc)
        if real is None:
            rx.unstamped += 1
            conn.received(data, now)
            return
        t = real - rx.clock.offset
        if t > now:  # a clock step since the last offset check: never later than the read
            t = now
        rx.delays.add(now - t)
        conn.received(data, t)

    def _write_ready(self) -> None:
        sock = self._sock
        if sock is None:
            return
        try:
            n = sock.send(self._wbuf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(exc)
            return
        del self._wbuf[:n]
        if not self._wbuf:
            self._loop.remove_writer(self._fd)

    def _close(self, exc: Exception | None) -> None:
        sock = self._sock
        if sock is None:
            return
        self._sock = None
        self._closing = True
        self._loop.remove_reader(self._fd)
        if self._wbuf:
            self._loop.remove_writer(self._fd)
            self._wbuf.clear()
        sock.close()
        self._loop.call_soon(self._protocol.connection_lost, exc)

    # --- asyncio.Transport (what _Connection uses) ---------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        sock = self._sock
        if sock is None:
            return
        if not self._wbuf:
            try:
                n = sock.send(data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError as exc:
                self._close(exc)
                return
            if n == len(data):
                return
            data = memoryview(data)[n:]
            self._loop.add_writer(self._fd, self._write_ready)
        self._wbuf += data

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._close(None)

    def abort(self) -> None:
        self._close(None)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "socket":
            return self._sock
        return default


class RxStats:
    """One transport's receive-stamp state: the clock map and what its reads saw."""

    __slots__ = ("clock", "delays", "kernel_conns", "loop_conns", "notes", "unstamped")

    def __init__(self) -> None:
        self.clock = RealtimeMap(_perf)
        self.delays = ReadDelays()  # loop read instant minus kernel stamp, every stamped read
        self.unstamped = 0  # kernel-path reads that came without a stamp (loop's instant used)
        self.kernel_conns = 0
        self.loop_conns = 0
        self.notes: set[str] = set()


class LeanStream(httpx.AsyncByteStream):
    """The body of one response; ``consume`` is the zero-switch fast path."""

    def __init__(self, conn: _Connection, pool: LeanTransport, read_timeout: float | None) -> None:
        self._conn = conn
        self._pool = pool
        self._read_timeout = read_timeout
        self._closed = False

    async def consume(self, sink: ChunkSink) -> None:
        """Feed every body piece with its read instant to ``sink``; return at the body's end.

        Pieces that arrived before this call are replayed with their own instants. Raises the
        httpx error that ended the body early (reset, truncated stream).
        """
        conn = self._conn
        while conn.pending:
            data, t = conn.pending.popleft()
            sink(data, t)
        conn.sink = sink
        try:
            while not conn.body_done:
                if conn.error is not None:
                    raise conn.error
                waiter = asyncio.get_running_loop().create_future()
                conn.waiter = waiter
                try:
                    await waiter
                finally:
                    conn.waiter = None
        finally:
            conn.sink = None
        if conn.error is not None and not conn.body_done:
            raise conn.error

    async def aiter_timed(self) -> AsyncIterator[tuple[bytes, float]]:
        conn = self._conn
        while True:
            if conn.pending:
                yield conn.pending.popleft()
                continue
            if conn.body_done:
                return
            if conn.error is not None:
                raise conn.error
            waiter = asyncio.get_running_loop().create_future()
            conn.waiter = waiter
            try:
                if self._read_timeout is None:
                    await waiter
                else:
                    try:
                        async with asyncio.timeout(self._read_timeout):
                            await waiter
                    except TimeoutError as exc:
                        raise httpx.ReadTimeout("timed out reading the response body") from exc
            finally:
                conn.waiter = None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for data, _t in self.aiter_timed():
            yield data

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        conn = self._conn
        if conn.body_done and conn.reusable:
            self._pool._release(conn)
        else:
            conn.abort()
            self._pool._forget(conn)


class LeanTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 over raw asyncio connections, pooled per origin; see the module docstring."""

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        tls_handshake_timeout_s: float = TLS_HANDSHAKE_TIMEOUT_S,
        timestamps: str = "auto",
    ) -> None:
        if timestamps not in TIMESTAMPS:
            raise ValueError(
                f"timestamps must be one of {', '.join(TIMESTAMPS)}, not {timestamps!r}"
            )
        self._ssl_context = ssl_context
        self._tls_timeout = tls_handshake_timeout_s
        self.timestamps = timestamps
        self.rx = RxStats()
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._all: set[_Connection] = set()

    @property
    def source(self) -> tuple[str | None, str | None]:
        """("kernel" | "loop", why not the kernel) over the connections opened so far; (None,
        None) before the first."""
        rx = self.rx
        if rx.loop_conns:
            return "loop", "; ".join(sorted(rx.notes)) or None
        if rx.kernel_conns:
            notes = [n for n in (rx.clock.note(),) if n]
            if rx.unstamped:
                notes.append(f"{rx.unstamped} read(s) came without a kernel stamp (loop's used)")
            return "kernel", "; ".join(notes) or None
        return None, None

    # --- pool ---------------------------------------------------------------------------

    def _release(self, conn: _Connection) -> None:
        conn.state = _IDLE
        conn.served += 1
        self._idle.setdefault(conn.key, []).append(conn)

    def _forget(self, conn: _Connection) -> None:
        self._all.discard(conn)

    def kernel_reason(self, scheme: str) -> str | None:
        """Why a ``scheme`` connection will not carry kernel stamps, or None when it will."""
        if self.timestamps == "loop":
            return "--timestamps loop asked for the event loop's read instants"
        return kernel_unavailable_reason(scheme)

    def _loop_stamped(self, note: str) -> None:
        if self.timestamps == "kernel":
            raise KernelStampsUnavailable(
                f"--timestamps kernel cannot be honoured: {note} (use --timestamps auto to fall "
                "back to the event loop's read instants, recorded as such)"
            )
        self.rx.loop_conns += 1
        self.rx.notes.add(note)

    async def _open_kernel(self, key: tuple[str, str, int]) -> _Connection:
        """A plain TCP connection with receive stamps (or, when the kernel refuses them, an
        ordinary asyncio one, recorded)."""
        _scheme, host, port = key
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        if not infos:
            raise OSError(f"cannot resolve {host}")
        last: OSError | None = None
        for family, kind, proto, _name, addr in infos:
            sock = socket.socket(family, kind, proto)
            try:
                sock.setblocking(False)
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await loop.sock_connect(sock, addr)
            except OSError as exc:
                sock.close()
                last = exc
                continue
            except BaseException:
                sock.close()
                raise
            refused = enable(sock)
            if refused is not None:
                self._loop_stamped(refused)
                _transport, conn = await loop.create_connection(lambda: _Connection(key), sock=sock)
                return conn
            conn = _Connection(key)
            _KernelSocket(loop, sock, conn, self.rx)
            self.rx.kernel_conns += 1
            return conn
        assert last is not None
        raise last

    async def _connect(self, key: tuple[str, str, int], timeout: float | None) -> _Connection:
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        ctx: ssl.SSLContext | None = None
        extra: dict[str, Any] = {}
        if scheme == "https":
            ctx = self._ssl_context or ssl.create_default_context()
            extra["ssl_handshake_timeout"] = self._tls_timeout
        why_not = self.kernel_reason(scheme)
        try:
            async with asyncio.timeout(timeout):
                if why_not is None:
                    conn = await self._open_kernel(key)
                else:
                    self._loop_stamped(why_not)
                    _transport, conn = await loop.create_connection(
                        lambda: _Connection(key), host, port, ssl=ctx, **extra
                    )
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(f"timed out connecting to {host}:{port}") from exc
        except ssl.SSLCertVerificationError as exc:
            raise httpx.ConnectError(
                f"TLS handshake with {host}:{port} failed: {exc.verify_message or exc}"
            ) from exc
        except (ssl.SSLError, ConnectionAbortedError, ConnectionResetError) as exc:
            if ctx is None:
                raise httpx.ConnectError(f"cannot connect to {host}:{port}: {exc}") from exc
            # no handshake in time (the server waits for a plain request line), or a reply
            # that is not TLS ("wrong version number"), or the peer hung up on the hello
            raise httpx.ConnectError(
                f"TLS handshake with {host}:{port} failed ({exc}): the server may speak "
                "plain HTTP; try http://"
            ) from exc
        except OSError as exc:
            raise httpx.ConnectError(f"cannot connect to {host}:{port}: {exc}") from exc
        self._all.add(conn)
        return conn

    def _idle_conn(self, key: tuple[str, str, int]) -> _Connection | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if (
                conn.state == _IDLE
                and conn.transport is not None
                and not conn.transport.is_closing()
            ):
                return conn
            self._all.discard(conn)
        return None

    async def prewarm(self, url: str, count: int, *, timeout: float | None = 10.0) -> int:
        """Open up to ``count`` idle connections to ``url``'s origin; returns how many opened."""
        u = httpx.URL(url)
        key = (u.scheme, u.host, u.port or (443 if u.scheme == "https" else 80))
        have = len(self._idle.get(key, []))
        need = max(0, count - have)
        conns = await asyncio.gather(
            *(self._connect(key, timeout) for _ in range(need)), return_exceptions=True
        )
        opened = 0
        for conn in conns:
            if isinstance(conn, _Connection):
                self._idle.setdefault(key, []).append(conn)
                opened += 1
        return opened

    # --- httpx.AsyncBaseTransport --------------------------------------------------------

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        scheme = url.scheme
        if scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {scheme!r}")
        key = (scheme, url.host, url.port or (443 if scheme == "https" else 80))
        timeouts: dict[str, Any] = request.extensions.get("timeout") or {}
        timing = request.extensions.get(TIMING_EXT)
        body = await request.aread()
        target = url.raw_path.decode("ascii")
        headers = [(k, v) for k, v in request.headers.raw]
        data = request_head(request.method, target, headers, len(body)) + body
        head, stream = await self.send(
            key, data, request.method, timing if isinstance(timing, SendTiming) else None, timeouts
        )
        return httpx.Response(
            status_code=head.status,
            headers=head.headers,
            stream=stream,
            extensions={
                "http_version": b"HTTP/" + head.http_version.encode("ascii"),
                "reason_phrase": head.reason.encode("latin-1"),
                FAST_STREAM_EXT: stream,
            },
        )

    async def send(
        self,
        key: tuple[str, str, int],
        data: bytes,
        method: str,
        timing: SendTiming | None,
        timeouts: dict[str, Any],
    ) -> tuple[ResponseHead, LeanStream]:
        """Write the ready request bytes ``data`` on a pooled connection to ``key`` (scheme,
        host, port); the response head and its body stream. The load generator's hot path
        (no ``httpx.Request``/``Response`` objects); ``timing.sent`` is stamped just before the
        bytes go to the socket."""
        for attempt in (0, 1):
            conn = self._idle_conn(key)
            reused = conn is not None
            if conn is None:
                conn = await self._connect(key, timeouts.get("connect"))
            sent = _perf()
            if timing is not None:
                timing.reused = reused
                timing.sent = sent
            self.rx.clock.maybe_refresh(sent)
            waiter = conn.start(data, method)
            try:
                read_timeout = timeouts.get("read")
                try:
                    async with asyncio.timeout(read_timeout):
                        head = await waiter
                except TimeoutError as exc:
                    conn.abort()
                    self._forget(conn)
                    raise httpx.ReadTimeout("timed out waiting for the response head") from exc
            except _Stale:
                self._forget(conn)
                if attempt == 0:
                    continue
                raise httpx.RemoteProtocolError(
                    "server closed a kept-alive connection without answering"
                ) from None
            except asyncio.CancelledError:
                conn.abort()
                self._forget(conn)
                raise
            except httpx.HTTPError:
                conn.abort()
                self._forget(conn)
                raise
            return head, LeanStream(conn, self, read_timeout)
        raise AssertionError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        for conn in list(self._all):
            with contextlib.suppress(Exception):
                if conn.transport is not None:
                    conn.transport.close()
        self._all.clear()
        self._idle.clear()
