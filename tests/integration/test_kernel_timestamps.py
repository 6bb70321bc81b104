"""Kernel receive timestamps with real loopback sockets: a blocked event loop delays the
processing of a read but not its stamp; the loop's stamps where asked or unavailable, recorded."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from collectors.loadgen.client import HttpxEndpoint
from collectors.loadgen.config import BenchConfig
from collectors.loadgen.runner import run_benchmark
from collectors.loadgen.rx_stamps import CMSG_SIZE, SO_TIMESTAMPNS, stamp_of
from collectors.loadgen.sse import StreamAccumulator
from collectors.loadgen.transport import LeanTransport, SendTiming
from errors import ConfigError
from sim.mockserver import MockServer
from store.lifecycle import open_store

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_TIMESTAMPNS: Linux")

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _chunk(payload: bytes) -> bytes:
    return f"{len(payload):x}\r\n".encode() + payload + b"\r\n"


def _event(text: str) -> bytes:
    body = {"choices": [{"index": 0, "delta": {"content": text}}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class ScriptedServer:
    """One-connection HTTP/1.1 server in a thread: answers the request with a chunked SSE
    head, then, each time ``go`` is set, writes the next event of ``script`` — (delay before
    it in s, bytes) — and records the perf_counter instant of each write in ``sent``."""

    def __init__(self, script: list[tuple[float, bytes]]) -> None:
        self.script = script
        self.sent: list[float] = []
        self.go = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += conn.recv(65536)
            conn.sendall(HEAD)
            self.go.wait(10)
            for delay, data in self.script:
                if delay:
                    time.sleep(delay)
                self.sent.append(time.perf_counter())
                conn.sendall(data)
            conn.sendall(b"0\r\n\r\n")
            time.sleep(0.2)

    def close(self) -> None:
        self.listener.close()
        self.thread.join(5)


def _read_blocked(
    server: ScriptedServer, timestamps: str, block_s: float = 0.05
) -> tuple[list[tuple[bytes, float]], StreamAccumulator, LeanTransport]:
    """Send a request; once the head is in, block the client's loop for ``block_s`` while the
    server writes its script; the body pieces with their stamps."""
    pieces: list[tuple[bytes, float]] = []
    acc = StreamAccumulator()

    def sink(data: bytes, t: float) -> None:
        pieces.append((data, t))
        acc.feed(data, t)

    async def go() -> LeanTransport:
        transport = LeanTransport(timestamps=timestamps)
        request = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n"
        head, stream = await transport.send(
            ("http", "127.0.0.1", server.port), request, "POST", SendTiming(), {"read": 10}
        )
        assert head.status == 200

        def block() -> None:
            server.go.set()
            # the loop is busy from before the server's first write until block_s after it,
            # however late the OS runs the server's thread: nothing is read meanwhile
            until = time.monotonic() + 10
            while not server.sent and time.monotonic() < until:
                time.sleep(0.001)
            time.sleep(block_s)

        asyncio.get_running_loop().call_soon(block)
        await stream.consume(sink)
        await stream.aclose()
        await transport.aclose()
        return transport

    transport = asyncio.run(go())
    return pieces, acc, transport


@pytest.fixture
def one_event() -> Iterator[ScriptedServer]:
    server = ScriptedServer([(0.0, _chunk(_event("hi")))])
    yield server
    server.close()


@linux
def test_a_blocked_loop_delays_the_read_but_not_the_kernel_stamp(
    one_event: ScriptedServer,
) -> None:
    _pieces, acc, transport = _read_blocked(one_event, "auto")
    assert transport.source == ("kernel", None)
    [sent] = one_event.sent
    assert acc.first_t is not None
    assert abs(acc.first_t - sent) < 0.005  # the instant the data reached this host
    delays = transport.rx.delays.counts
    assert sum(delays) >= 1  # and the loop's read was counted as late


@linux
def test_the_loop_stamp_is_as_late_as_the_loop() -> None:
    server = ScriptedServer([(0.0, _chunk(_event("hi")))])
    try:
        _pieces, acc, transport = _read_blocked(server, "loop")
    finally:
        server.close()
    source, note = transport.source
    assert source == "loop"
    assert note is not None and "--timestamps loop" in note
    [sent] = server.sent
    assert acc.first_t is not None
    assert acc.first_t - sent >= 0.045  # stamped when the loop got round to it


@linux
def test_events_that_share_a_read_share_the_last_segments_instant() -> None:
    # two events 20 ms apart both wait in the socket while the loop is blocked for 80 ms: the
    # read that drains them carries the second one's instant, and the gap is stored as 0 ms
    script = [(0.0, _chunk(_event("a"))), (0.02, _chunk(_event("b")))]
    server = ScriptedServer(script)
    try:
        _pieces, acc, transport = _read_blocked(server, "auto", block_s=0.08)
    finally:
        server.close()
    _first, second = server.sent
    assert transport.source[0] == "kernel"
    assert acc.first_t is not None and abs(acc.first_t - second) < 0.005
    assert list(acc.gaps_ms) == [0.0]  # counted as a coalesced event (ResultBatch.same_read)


@linux
def test_the_kernel_merges_queued_segments_so_a_peek_sees_the_last_stamp() -> None:
    # Why the transport does not MSG_PEEK for the first segment's stamp (docs/timing.md):
    # Linux coalesces segments waiting in the receive queue, keeping the newest stamp.
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    with listener, client, server:
        server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sent = []
        for _ in range(3):
            sent.append(time.time())
            server.send(b"x" * 100)
            time.sleep(0.01)
        _d, anc, _f, _a = client.recvmsg(1, CMSG_SIZE, socket.MSG_PEEK)
        peeked = stamp_of(anc)
        data, anc, _f, _a = client.recvmsg(65536, CMSG_SIZE)
        read = stamp_of(anc)
    assert len(data) == 300
    assert peeked is not None and read is not None
    assert abs(read - sent[-1]) < 0.005
    assert peeked == read


def test_kernel_stamps_where_unavailable_are_an_error_naming_why() -> None:
    with pytest.raises(ConfigError, match="https"):
        HttpxEndpoint("https://127.0.0.1:1", timestamps="kernel")
    reason = LeanTransport().kernel_reason("https")
    assert reason is not None and "TLS" in reason
    assert LeanTransport(timestamps="loop").kernel_reason("http") is not None
    with pytest.raises(ValueError, match="timestamps"):
        LeanTransport(timestamps="nic")


def _run(tmp_path: Path, url: str, timestamps: str) -> dict[str, object]:
    store = open_store(f"duckdb:///{tmp_path / (timestamps + '.duckdb')}")
    cfg = BenchConfig(
        endpoint=url,
        workload_spec={"name": "fixed", "input_tokens": 16, "output_tokens": 8},
        concurrency=(4,),
        requests=12,
        warmup=0,
        calibrate=False,
        max_tokens=8,
        timestamps=timestamps,
    )
    [run_id] = run_benchmark(cfg, store, progress=False)
    run = store.read_df("select tool_summary from runs where run_id = :r", {"r": run_id})
    ok = store.read_df(
        "select count(*) as n from requests where run_id = :r and status = 'ok'", {"r": run_id}
    )
    assert int(ok.n[0]) == 12
    summary: dict[str, object] = json.loads(run.tool_summary[0])
    return summary


@linux
def test_a_run_records_its_timestamp_source(tmp_path: Path) -> None:
    with MockServer(ttft_ms=5, itl_ms=2) as url:
        kernel = _run(tmp_path, url, "auto")
        loop = _run(tmp_path, url, "loop")
    assert kernel["timestamps"] == ["kernel"]
    assert kernel["timestamps_notes"] == []
    assert loop["timestamps"] == ["loop"]
    notes = loop["timestamps_notes"]
    assert isinstance(notes, list) and "--timestamps loop" in notes[0]


class KeepAliveServer:
    """Answers one request per connection with a keep-alive response, then reads the next
    request on that connection and hangs up without answering (a server that closed an idle
    connection just as it was reused); counts connections and request bytes."""

    def __init__(self) -> None:
        self.connections = 0
        self.received: list[int] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _request(self, conn: socket.socket) -> int:
        buf = b""
        while b"\r\n\r\n" not in buf:
            data = conn.recv(1 << 20)
            if not data:
                return -1
            buf += data
        head, _, body = buf.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        while len(body) < length:
            body += conn.recv(1 << 20)
        return len(body)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                self.received.append(self._request(conn))
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                self._request(conn)  # the reused connection's request: never answered

    def close(self) -> None:
        self.listener.close()


def _collect(into: bytearray) -> Callable[[bytes, float], None]:
    def sink(data: bytes, _t: float) -> None:
        into.extend(data)

    return sink


def test_a_reused_connection_closed_by_the_server_is_retried_and_large_bodies_go_out() -> None:
    server = KeepAliveServer()

    async def go() -> list[tuple[int, bool]]:
        transport = LeanTransport()
        key = ("http", "127.0.0.1", server.port)
        out = []
        for size in (10, 4 << 20):  # the second does not fit in one send: written in parts
            body = b"x" * size
            request = (
                b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: "
                + str(size).encode()
                + b"\r\n\r\n"
                + body
            )
            timing = SendTiming()
            head, stream = await transport.send(key, request, "POST", timing, {"read": 10})
            body_read = bytearray()
            await stream.consume(_collect(body_read))
            await stream.aclose()
            assert bytes(body_read) == b"ok"
            out.append((head.status, timing.reused))
        await transport.aclose()
        return out

    try:
        results = asyncio.run(go())
    finally:
        server.close()
    assert [status for status, _ in results] == [200, 200]
    assert server.connections == 2  # the second request was sent again on a new connection
    assert server.received == [10, 4 << 20]
