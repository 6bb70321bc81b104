"""A /metrics URL with a password (``http://user:pw@host/metrics``): the watcher authenticates
with it, and the password never reaches the store, the status line or the run's summary."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from collectors import watch
from store.lifecycle import open_store

SECRET = "s3cret-PW-7f1d"
USER = "scraper"


@pytest.fixture
def protected_metrics(fixtures_dir: Path) -> Iterator[str]:
    """A loopback server answering a real vLLM capture only with the right Basic credentials."""
    page = (
        fixtures_dir / "vllm" / "metrics_v1_full_qwen2.5-0.5b_k8s-ai-conformance_kops.prom"
    ).read_bytes()
    expected = "Basic " + base64.b64encode(f"{USER}:{SECRET}".encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{USER}:{SECRET}@127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def test_split_credentials_keeps_the_rest_of_the_url() -> None:
    public, auth = watch.split_credentials("http://u%40x:p%3Aw@[::1]:9400/m?x=1")
    assert public == "http://[::1]:9400/m?x=1"
    assert auth is not None
    assert auth._auth_header == "Basic " + base64.b64encode(b"u@x:p:w").decode()
    assert watch.split_credentials("http://h:1/metrics") == ("http://h:1/metrics", None)


def test_a_password_in_the_metrics_url_authenticates_and_is_never_stored(
    protected_metrics: str, tmp_path: Path
) -> None:
    store = open_store(f"duckdb:///{tmp_path / 'w.duckdb'}")
    live = watch.LiveCollection.start(
        store, metrics_urls=[protected_metrics], gpu=False, interval_s=0.25, flush_interval_s=0.3
    )
    deadline = time.monotonic() + 20
    try:
        while live.watcher.states[0].scrapes < 2:
            assert time.monotonic() < deadline, live.watcher.states[0].last_error
            time.sleep(0.05)
        status = live.watcher.status_line()
    finally:
        summary = live.stop()
    (src,) = summary.sources
    assert src.errors == 0 and src.engine == "vllm"
    assert SECRET not in repr(summary) and SECRET not in status
    stored = [
        str(t)
        for table in ("engine_samples", "engine_raw_samples")
        for t in store.read_df(f"select distinct target from {table}").target
    ]
    assert stored and all(SECRET not in t and USER not in t for t in stored)
