"""Hostile endpoints against the one HTTP client factory (issue 24, cases 5 and 6).

A real loopback server answers each route one way: ``drip`` (a JSON head, then one byte every
0.3 s, never ending), ``endless`` (a ``/metrics`` page that never ends), ``big`` (20 MB with no
Content-Length), ``big-declared`` (a Content-Length of 20 MB), ``deep`` (JSON nested 5,000
levels, about 10 KB), or a plain good answer. Every command that meets one ends within its
deadline with one ``servescope: error:`` line (exit 2, nothing stored) or goes on without what
the route would have said; none hangs, grows without bound or prints a traceback.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import tracemalloc
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

import cli
from collectors import http_client
from collectors.endpoint_identity import identify
from collectors.watch import resolve_metrics_url
from errors import EndpointError, ExitCode

DEEP = b"[" * 5000 + b"]" * 5000
MODELS = {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "someone"}]}


class Hostile(BaseHTTPRequestHandler):
    """Each path answers as ``routes`` says (``drip``, ``endless``, ``big``, ``big-declared``,
    ``deep``; ``"*"``: every path not named); any other path a small good answer."""

    routes: ClassVar[dict[str, str]] = {}
    bodies: ClassVar[dict[str, bytes]] = {}  # a path's raw JSON answer
    protocol_version = "HTTP/1.0"  # the body ends when the connection closes

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _head(self, ctype: str, length: int | None = None) -> None:
        self.send_response(200)
        self.send_header("content-type", ctype)
        if length is not None:
            self.send_header("content-length", str(length))
        self.end_headers()
        self.wfile.flush()

    def _answer(self) -> None:
        path = self.path.split("?", 1)[0]
        how = self.routes.get(path, self.routes.get("*"))
        try:
            if how == "drip":
                self._head("application/json")
                self.wfile.write(b'{"data": [')
                for _ in range(400):  # 2 minutes at most
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.3)
            elif how == "endless":
                self._head("text/plain; version=0.0.4")
                line = b"# HELP vllm:num_requests_running x\n" * 64
                for _ in range(100_000):
                    self.wfile.write(line)
                    self.wfile.flush()
                    time.sleep(0.01)
            elif how in ("big", "big-declared"):
                mib = b" " * (1024 * 1024)  # written a MiB at a time: the server keeps 1 MiB
                length = 20 * len(mib) + len(b'{"data": []}')
                self._head("application/json", length if how == "big-declared" else None)
                self.wfile.write(b'{"data": [')
                for _ in range(20):
                    self.wfile.write(mib)
                self.wfile.write(b"]}")
            elif path in self.bodies:
                self._head("application/json", len(self.bodies[path]))
                self.wfile.write(self.bodies[path])
            elif how == "deep":
                self._head("application/json", len(DEEP))
                self.wfile.write(DEEP)
            elif path.endswith("/v1/models"):
                body = json.dumps(MODELS).encode()
                self._head("application/json", len(body))
                self.wfile.write(body)
            else:
                self.send_response(404)
                self.send_header("content-length", "0")
                self.end_headers()
        except (BrokenPipeError, ConnectionResetError):
            pass

    do_GET = _answer
    do_POST = _answer


@pytest.fixture
def hostile() -> Iterator[str]:
    Hostile.routes = {}
    Hostile.bodies = {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _one_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("servescope: error")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# --- the factory ---------------------------------------------------------------------------------


def test_a_dripping_answer_ends_at_the_clients_deadline(hostile: str) -> None:
    Hostile.routes = {"/v1/models": "drip"}

    async def get() -> None:
        async with http_client.async_client(1.0) as client:
            await client.get(hostile + "/v1/models")

    t0 = time.monotonic()
    with pytest.raises(http_client.DeadlineExceeded, match="within 1 s"):
        asyncio.run(get())
    assert time.monotonic() - t0 < 2.0
    with http_client.sync_client(1.0) as client, pytest.raises(http_client.DeadlineExceeded):
        client.get(hostile + "/v1/models")
    assert time.monotonic() - t0 < 4.5  # the sync body: the deadline plus at most one read


@pytest.mark.parametrize("how", ["big", "big-declared"])
def test_a_20_mb_answer_is_refused_at_the_cap_without_keeping_it(hostile: str, how: str) -> None:
    Hostile.routes = {"/v1/models": how}

    async def get() -> None:
        async with http_client.async_client(5.0) as client:
            await client.get(hostile + "/v1/models")

    tracemalloc.start()
    try:
        with pytest.raises(http_client.ResponseTooLarge, match="8 MiB"):
            asyncio.run(get())
        with http_client.sync_client(5.0) as client, pytest.raises(http_client.ResponseTooLarge):
            client.get(hostile + "/v1/models")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * http_client.MAX_RESPONSE_BYTES  # never the 20 MB


def test_deep_json_is_a_value_error_not_a_recursion_error(hostile: str) -> None:
    Hostile.routes = {"/deep": "deep"}
    with http_client.sync_client(2.0) as client:
        response = client.get(hostile + "/deep")
    with pytest.raises(ValueError, match="nested too deep"):
        http_client.json_of(response)
    with pytest.raises(ValueError, match="nested too deep"):
        http_client.loads(DEEP)


# --- identification and discovery ---------------------------------------------------------------


@pytest.mark.parametrize("route", ["/version", "/metrics"])
def test_identification_ends_when_a_probe_never_ends(hostile: str, route: str) -> None:
    Hostile.routes = {route: "endless" if route == "/metrics" else "drip"}

    async def who() -> Any:
        async with http_client.async_client(1.0) as client:
            return await identify(client, hostile)

    t0 = time.monotonic()
    identity = asyncio.run(who())
    assert time.monotonic() - t0 < 3.0
    assert identity.model == "m"  # what /v1/models said is kept


@pytest.mark.parametrize("how", ["big", "deep"])
def test_identification_refuses_a_hostile_models_list(hostile: str, how: str) -> None:
    Hostile.routes = {"/v1/models": how}

    async def who() -> Any:
        async with http_client.async_client(5.0) as client:
            return await identify(client, hostile)

    with pytest.raises(EndpointError, match="8 MiB" if how == "big" else "nested too deep"):
        asyncio.run(who())


def test_the_metrics_url_auto_probe_ends_on_an_endless_page(hostile: str) -> None:
    Hostile.routes = {"/metrics": "endless"}
    t0 = time.monotonic()
    assert resolve_metrics_url(hostile + "/v1", timeout_s=1.0) is None
    assert time.monotonic() - t0 < 3.0


# --- the commands ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("routes", "says"),
    [
        ({"/v1/models": "drip"}, "cannot pick a model"),
        ({"/v1/models": "big"}, "more than the 8 MiB"),
        ({"/v1/models": "big-declared"}, "20,971,532 bytes"),
        ({"/v1/models": "deep"}, "nested too deep"),
    ],
)
def test_verify_ends_with_one_line_on_a_hostile_models_list(
    hostile: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    routes: dict[str, str],
    says: str,
) -> None:
    Hostile.routes = routes
    path = tmp_path / "s.duckdb"
    t0 = time.monotonic()
    code = cli.main(
        ["verify", "--endpoint", hostile, "--timeout", "1", "--db", f"duckdb:///{path}"]
    )
    assert time.monotonic() - t0 < 4.0
    assert code == ExitCode.ERROR
    assert says in _one_error(capsys.readouterr().err)
    assert not path.exists()


@pytest.mark.parametrize("how", ["drip", "deep"])
def test_quality_ends_with_one_line_on_a_hostile_models_list(
    hostile: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    Hostile.routes = {"/v1/models": how}
    path = tmp_path / "s.duckdb"
    t0 = time.monotonic()
    code = cli.main(
        [
            "quality",
            "--reference",
            hostile,
            "--candidate",
            hostile,
            "--timeout",
            "1",
            "--db",
            f"duckdb:///{path}",
        ]
    )
    assert time.monotonic() - t0 < 4.0
    assert code == ExitCode.ERROR
    _one_error(capsys.readouterr().err)
    assert not path.exists()


@pytest.mark.parametrize(
    ("how", "says"), [("drip", "did not answer in full within 1 s"), ("deep", "nested too deep")]
)
def test_bench_discovery_ends_with_one_line_on_a_hostile_models_list(
    hostile: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str, says: str
) -> None:
    Hostile.routes = {"/v1/models": how}
    path = tmp_path / "s.duckdb"
    t0 = time.monotonic()
    code = cli.main(
        [
            "bench",
            "--endpoint",
            hostile,
            "--concurrency",
            "1",
            "--workload",
            "short-in-short-out",
            "--requests",
            "1",
            "--timeout",
            "1",
            "--metrics-url",
            "off",
            "--db",
            f"duckdb:///{path}",
        ]
    )
    assert time.monotonic() - t0 < 4.0
    assert code == ExitCode.ERROR
    line = _one_error(capsys.readouterr().err)
    assert "cannot pick a model" in line and says in line


# --- Prometheus answers and the GitHub API (case 6) ---------------------------------------------

PROM_OK = {"status": "success", "data": {"resultType": "matrix", "result": []}}


def _matrix(*points: Any, metric: Any = None) -> bytes:
    series = {"metric": metric or {"__name__": "vllm:num_requests_running"}, "values": list(points)}
    return json.dumps(
        {"status": "success", "data": {"resultType": "matrix", "result": [series]}}
    ).encode()


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"[1, 2, 3]", "the answer is a JSON list, not an object"),
        (json.dumps([PROM_OK]).encode(), "the answer is a JSON list"),
        (_matrix(["soon", "1"]), "values[0] has the timestamp soon; expected Unix seconds"),
        (_matrix([1e308, "1"]), "values[0] has the timestamp 1e+308"),
        (_matrix([1700000000, "1", "extra"]), "values[0] is [1700000000, '1', 'extra']"),
        (_matrix(1700000000), "values[0] is 1700000000; expected [timestamp"),
        (_matrix([1700000000, "1"], metric=["x"]), "metric is not a table of label = text"),
        (b'{"status": "success", "data": {"resultType": "matrix", "result": 5}}', "not a list"),
        (b'{"status": "success", "data": []}', "unexpected Prometheus result type"),
        (b'{"status": "error", "errorType": [1], "error": {"a": 1}}', "refused the query"),
        (b'{"a":' * 3000 + b"1" + b"}" * 3000, "JSON nested too deep to decode"),
    ],
)
def test_a_malformed_prometheus_answer_is_one_collector_error(
    hostile: str, body: bytes, says: str
) -> None:
    from collectors.prometheus import PrometheusClient
    from errors import CollectorError

    Hostile.bodies = {"/api/v1/query_range": body}
    with PrometheusClient(hostile) as prom, pytest.raises(CollectorError) as exc:
        prom.query_range("up", start=1700000000, end=1700000010, step=5)
    assert says in str(exc.value)


def test_watch_since_on_a_hostile_prometheus_is_one_line(
    hostile: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Hostile.bodies = {"/api/v1/query_range": b"[" * 5000 + b"]" * 5000}
    path = tmp_path / "s.duckdb"
    code = cli.main(
        [
            "watch",
            "--prometheus",
            hostile,
            "--since",
            "10m",
            "--duration",
            "1s",
            "--db",
            f"duckdb:///{path}",
        ]
    )
    assert code == ExitCode.ERROR
    assert "nested too deep" in _one_error(capsys.readouterr().err)


def test_health_on_a_deeply_nested_github_answer_is_one_line(
    hostile: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Hostile.routes = {"*": "deep"}
    path = tmp_path / "h.duckdb"
    code = cli.main(["health", "vllm", "--db", f"duckdb:///{path}", "--api-url", hostile + "/api"])
    out, err = capsys.readouterr()
    assert code == ExitCode.PARTIAL  # health's own rule: a framework it could not fetch
    assert "vllm: unexpected answer" in err and "JSON nested too deep" in err
    assert "Traceback" not in err and "RecursionError" not in err
    assert "stored 0 of 1" in out


def test_httpx_is_made_in_one_place() -> None:
    """No module but the factory constructs an ``httpx`` client (the load generator's measured
    POSTs go to its transport directly; its discovery client comes from the factory)."""
    root = Path(__file__).resolve().parents[2]
    made = re.compile(r"(?<![`\w.])httpx\.(Async)?Client\(")
    makers = [
        str(path.relative_to(root))
        for folder in ("collectors", "services", "store", "analysis", "sim", "ui")
        for path in (root / folder).rglob("*.py")
        if made.search(path.read_text(encoding="utf-8"))
    ]
    assert makers == []
    assert httpx.AsyncClient in http_client.BoundedAsyncClient.__mro__
