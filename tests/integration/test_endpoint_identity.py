"""``collectors.endpoint_identity``: each engine named by its own route, over real sockets.

A small loopback server plays each engine's routes (the shapes their docs and sources give:
vLLM ``/version``, SGLang ``/get_server_info``, TGI ``/info``, llama.cpp ``/props``, Ollama
``/api/version``, trtllm-serve ``/version`` + its ``/v1/models`` owner); the sim is the real one.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from collectors.endpoint_identity import EndpointIdentity, identify_sync
from errors import EndpointError
from sim.engine import EngineConfig
from sim.server import start_in_thread

VLLM_METRICS = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"


def _server(routes: dict[str, Any]) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = routes.get(self.path)
            if body is None:
                self.send_response(404)
                self.end_headers()
                return
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def engine() -> Iterator[Any]:
    servers: list[ThreadingHTTPServer] = []

    def make(routes: dict[str, Any]) -> str:
        server, url = _server(routes)
        servers.append(server)
        return url

    yield make
    for s in servers:
        s.shutdown()
        s.server_close()


def _models(owner: str, model: str = "m") -> dict[str, Any]:
    return {"object": "list", "data": [{"id": model, "object": "model", "owned_by": owner}]}


@pytest.mark.parametrize(
    ("routes", "expected"),
    [
        (
            {"/v1/models": _models("vllm"), "/version": {"version": "0.11.0"}},
            ("vllm", "0.11.0", "GET /version"),
        ),
        (
            {"/v1/models": _models("sglang"), "/get_server_info": {"version": "0.5.4"}},
            ("sglang", "0.5.4", "GET /get_server_info"),
        ),
        (
            {"/v1/models": _models("tgi"), "/info": {"model_id": "m", "version": "3.3.6"}},
            ("tgi", "3.3.6", "GET /info"),
        ),
        (
            {"/v1/models": _models("llamacpp"), "/props": {"build_info": "b6123-a1b2c3d"}},
            ("llama.cpp", "b6123-a1b2c3d", "GET /props"),
        ),
        (
            {"/v1/models": _models("library"), "/api/version": {"version": "0.12.3"}},
            ("ollama", "0.12.3", "GET /api/version"),
        ),
        (
            {"/v1/models": _models("tensorrt_llm"), "/version": {"version": "1.1.0"}},
            ("tensorrt-llm", "1.1.0", "GET /version"),
        ),
        (  # no owner: /version alone is ambiguous, the /metrics names decide
            {
                "/v1/models": _models(""),
                "/version": {"version": "0.10.2"},
                "/metrics": VLLM_METRICS,
            },
            ("vllm", "0.10.2", "GET /version + /metrics"),
        ),
        ({"/v1/models": _models("someone")}, (None, None, None)),
    ],
)
def test_each_engine_is_named_by_its_own_route(
    engine: Any, routes: dict[str, Any], expected: tuple[str | None, str | None, str | None]
) -> None:
    who = identify_sync(engine(routes))
    assert (who.framework, who.version, who.source) == expected
    assert who.model == "m"


def test_the_sim_names_itself_and_never_poses_as_an_engine() -> None:
    handle = start_in_thread(EngineConfig.from_names("H100-SXM-80GB", "llama-3.1-8b"))
    try:
        who = identify_sync(handle.url + "/v1")
    finally:
        handle.stop()
    assert who == EndpointIdentity(
        "sim", None, "GET /v1/models (owned_by)", "llama-3.1-8b", "servescope-sim", 131072
    )
    assert who.describe() == "sim (GET /v1/models (owned_by))"


def test_an_unreachable_endpoint_is_one_clear_error(free_port: Any) -> None:
    with pytest.raises(EndpointError, match=r"cannot reach http://127\.0\.0\.1:\d+: Connect"):
        identify_sync(f"http://127.0.0.1:{free_port()}")
