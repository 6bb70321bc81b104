"""The watcher on a real engine: llama.cpp's llama-server (SmolLM2-135M) under load.

Reuses the ``llama_server`` fixture of test_llamacpp.py (the binary that
``tools/build_llama_server.sh`` builds; skipped without it, failed under
SERVESCOPE_TEST_STRICT=1). While four long completions run, the watcher must see
``llamacpp:requests_processing`` above zero and the token counters rise by what the server
reported in ``usage``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from test_llamacpp import LlamaServer, llama_server  # noqa: F401  (the fixture)

from collectors import watch
from store import sample_series
from store.lifecycle import open_store

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]


def _wait(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_watch_sees_llama_server_work(
    llama_server: LlamaServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    store = open_store(f"duckdb:///{tmp_path / 'llama.duckdb'}")
    url = watch.resolve_metrics_url(f"{llama_server.url}/v1")
    assert url == f"{llama_server.url}/metrics"
    live = watch.LiveCollection.start(store, metrics_urls=[url], gpu=False, interval_s=0.25)
    usage: list[int] = []
    lock = threading.Lock()

    def one() -> None:
        with httpx.Client(timeout=120) as client:
            r = client.post(
                f"{llama_server.url}/v1/chat/completions",
                json={
                    "messages": [{"role": "user", "content": "Tell me a long story."}],
                    "max_tokens": 192,
                    "ignore_eos": True,
                },
            )
            r.raise_for_status()
            with lock:
                usage.append(int(r.json()["usage"]["completion_tokens"]))

    try:
        _wait(lambda: live.watcher.states[0].scrapes >= 2, 30, "the first scrapes")
        workers = [threading.Thread(target=one) for _ in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=120)
        n = live.watcher.states[0].scrapes
        _wait(lambda: live.watcher.states[0].scrapes >= n + 2, 30, "scrapes after the load")
    finally:
        summary = live.stop()
    assert len(usage) == 4
    (src,) = summary.sources
    assert src.engine == "llamacpp" and src.errors == 0
    series = sample_series.engine_series(
        store, since=0, metrics=["requests_running", "generation_tokens_total"]
    )
    running = series[series["metric"] == "requests_running"]["value"]
    assert running.max() >= 1, "never saw a request processing"
    tokens = series[series["metric"] == "generation_tokens_total"].sort_values("ts")["value"]
    assert tokens.iloc[-1] - tokens.iloc[0] == sum(usage)
    store.dispose()
