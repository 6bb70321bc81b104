"""A real Prometheus server (Debian's ``prometheus`` package) scraping the sim, read back through
``/api/v1/query_range`` into the same normalised rows as a direct scrape.

The test starts Prometheus itself on 127.0.0.1 (a free port, a temp TSDB, 1 s scrape interval)
and skips with a clear reason when the binary is absent (``apt-get install -y prometheus``).
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from collectors import prometheus, watch
from errors import CollectorError, InputError
from sim.engine import EngineConfig
from sim.server import SimHandle, start_in_thread

PROMETHEUS = shutil.which("prometheus") or (
    "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None
)
ABSENT = "the prometheus binary is absent (Debian: apt-get install -y prometheus)"
# make test-all (SERVESCOPE_TEST_STRICT=1) provisions it: there, absence is a failure
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None and os.environ.get("SERVESCOPE_TEST_STRICT") != "1", reason=ABSENT
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def sim() -> Iterator[SimHandle]:
    cfg = EngineConfig.from_names("H100-SXM-80GB", "llama-3.1-8b")
    handle = start_in_thread(cfg, port=0, time_scale=10.0)
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture(scope="module")
def prom(sim: SimHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    assert PROMETHEUS is not None, ABSENT
    tmp = tmp_path_factory.mktemp("prometheus")
    config = tmp / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n"
        "  - job_name: sim\n"
        "    metrics_path: /metrics\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{sim.port}']\n"
    )
    port = _free_port()
    log = (tmp / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(timeout=2) as client:

            def ready() -> bool:
                try:
                    return client.get(f"{url}/-/ready").status_code == 200
                except httpx.HTTPError:
                    return False

            _wait(ready, 60, "Prometheus to start")

            def scraped() -> bool:
                r = client.get(
                    f"{url}/api/v1/query",
                    params={"query": 'count_over_time(vllm:num_requests_running{job="sim"}[1m])'},
                )
                res = r.json()["data"]["result"]
                return bool(res) and float(res[0]["value"][1]) >= 3

            _wait(scraped, 60, "three scrapes of the sim")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


class ListSink:
    def __init__(self) -> None:
        self.rows: dict[str, list[dict[str, Any]]] = {}

    def add(self, table: str, rows: Any) -> None:
        self.rows.setdefault(table, []).extend(dict(r) for r in rows)


def _load(sim: SimHandle, n: int) -> None:
    with httpx.Client(timeout=30) as client:
        for _ in range(n):
            r = client.post(
                f"{sim.url}/v1/completions",
                json={"prompt": "hi " * 30, "max_tokens": 8, "ignore_eos": True},
            )
            assert r.status_code == 200


def test_range_query_gives_normalised_engine_and_gpu_rows(prom: str, sim: SimHandle) -> None:
    _load(sim, 5)
    # wait until Prometheus has scraped the finished requests
    with httpx.Client(timeout=5) as client:

        def seen() -> bool:
            r = client.get(
                f"{prom}/api/v1/query",
                params={"query": 'sum(vllm:request_success_total{job="sim"})'},
            )
            res = r.json()["data"]["result"]
            return bool(res) and float(res[0]["value"][1]) >= 5

        _wait(seen, 30, "the finished requests in Prometheus")
    end = time.time()
    sink = ListSink()
    # the step grid starts at `start`: end on `end` so the last step sees the last scrape
    got = prometheus.import_window(sink, prom, start=end - 20, end=end, step=1.0, match='job="sim"')
    target = f"127.0.0.1:{sim.port}"
    assert got.targets == {target: "sim"}
    engine = [r for r in sink.rows["engine_samples"] if r["target"] == target]
    finished = sorted(
        (r["ts"], r["value"]) for r in engine if r["metric"] == "requests_finished_total"
    )
    assert finished[-1][1] >= 5, finished[-5:]
    assert {r["engine"] for r in engine} == {"sim"}
    assert any(r["metric"].startswith("ttft_seconds_bucket:") for r in engine)
    # DCGM-style GPU memory through Prometheus: MiB → bytes, one GPU
    gpus = sink.rows["gpu_samples"]
    assert {r["gpu_index"] for r in gpus} == {0}
    assert all(r["source"] == "dcgm" and r["mem_used_bytes"] > 1e9 for r in gpus)
    assert got.hosts == {"servescope-sim"}
    # raw series kept with their labels (job and instance included)
    raw = sink.rows["engine_raw_samples"]
    assert any(
        r["name"] == "vllm:num_requests_running" and '"job":"sim"' in r["labels"] for r in raw
    )


def test_match_restricts_and_bad_input_is_explained(prom: str) -> None:
    sink = ListSink()
    now = time.time()
    got = prometheus.import_window(
        sink, prom, start=now - 10, end=now, step=1.0, match='{job="not-there"}'
    )
    assert got.targets == {} and sink.rows == {}
    with pytest.raises(InputError, match="label matchers"):
        prometheus.import_window(sink, prom, start=now - 10, end=now, match="job=sim")
    with (
        prometheus.PrometheusClient(prom) as client,
        pytest.raises(CollectorError, match="refused"),
    ):
        client.query_range("sum(", start=now - 10, end=now, step=1.0)
    with pytest.raises(CollectorError, match="did not answer"):
        prometheus.import_window(sink, f"http://127.0.0.1:{_free_port()}", start=now - 10, end=now)


def test_watcher_streams_from_prometheus(prom: str, sim: SimHandle) -> None:
    sink = ListSink()
    src = watch.PrometheusSource(prom, match='job="sim"', step_s=1.0, start=time.time() - 5)
    watcher = watch.Watcher(sink, [src], interval_s=1.0)
    live = watch.LiveCollection(watcher, _NullWriter(sink), [], own_writer=False)
    live._thread.start()
    try:
        _wait(lambda: src.state.scrapes >= 3, 30, "three polls of Prometheus")
    finally:
        summary = live.stop()
    assert summary.sources[0].kind == "prometheus" and summary.sources[0].errors == 0
    ts = sorted({r["ts"] for r in sink.rows["engine_samples"]})
    # consecutive polls continue the step grid: no step fetched twice
    assert len(ts) == len(sink.rows["engine_samples"]) / len(
        {r["metric"] for r in sink.rows["engine_samples"]}
    )
    assert all(abs((b - a) - 1.0) < 1e-6 for a, b in itertools.pairwise(ts))


class _NullWriter:
    rows_written = 0
    batches_spooled = 0

    def __init__(self, sink: ListSink) -> None:
        self.sink = sink

    def add(self, table: str, rows: Any) -> None:
        self.sink.add(table, rows)

    def close(self) -> None:
        return None
