"""The watcher against the sim's real /metrics over loopback sockets, into a real DuckDB file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest

from collectors import watch
from sim.engine import EngineConfig
from sim.server import SimHandle, start_in_thread
from store import sample_series
from store.lifecycle import open_store

ROOT = Path(__file__).resolve().parents[2]


def wait_for(predicate: Callable[[], bool], timeout_s: float = 20.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        time.sleep(0.05)


@pytest.fixture
def sim() -> Iterator[SimHandle]:
    cfg = EngineConfig.from_names("H100-SXM-80GB", "llama-3.1-8b")
    handle = start_in_thread(cfg, port=0, time_scale=10.0)
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture
def live_db(tmp_path: Path) -> str:
    return f"duckdb:///{tmp_path / 'live.duckdb'}"


def _load(url: str, n: int = 6) -> None:
    """A few completions so that the sim's counters move."""
    with httpx.Client(timeout=30) as client:
        for _ in range(n):
            r = client.post(
                f"{url}/v1/completions",
                json={"prompt": "hello " * 50, "max_tokens": 16, "ignore_eos": True},
            )
            assert r.status_code == 200


def test_live_collection_stores_every_sample_of_the_sim(sim: SimHandle, live_db: str) -> None:
    store = open_store(live_db)
    live = watch.LiveCollection.start(
        store, metrics_urls=[sim.url], gpu=False, interval_s=0.25, flush_interval_s=0.5
    )
    try:
        wait_for(lambda: live.watcher.states[0].scrapes >= 2, what="two scrapes")
        _load(sim.url)
        target = f"{sim.url}/metrics"
        wait_for(
            lambda: (
                live.watcher.states[0].latest.get("requests_running") is not None
                and live.watcher.states[0].scrapes >= 6
            ),
            what="scrapes after the load",
        )
    finally:
        summary = live.stop()
    assert summary.targets == [target]
    assert summary.hosts == [f"sim@127.0.0.1:{sim.port}"]
    (src,) = summary.sources
    assert src.engine == "sim" and src.errors == 0
    # zero lost samples: everything handed to the writer is in the store
    counts = sample_series.sample_counts(store)
    for table, added in summary.rows_added.items():
        assert counts[table] == added, table
    assert summary.rows_written == sum(summary.rows_added.values())
    series = sample_series.engine_series(
        store, since=0, metrics=["generation_tokens_total", "requests_finished_total"]
    )
    finished = series[series["metric"] == "requests_finished_total"].sort_values("ts")
    assert finished["value"].iloc[-1] - finished["value"].iloc[0] == 6
    tokens = series[series["metric"] == "generation_tokens_total"]["value"]
    assert tokens.max() - tokens.min() == 6 * 16
    # the sim's DCGM-style memory became a GPU row with bytes
    gpus = sample_series.latest_gpu_state(store)
    assert gpus["source"].tolist() == ["sim"]
    assert gpus["mem_total_bytes"].iloc[0] > gpus["mem_used_bytes"].iloc[0] > 1e9
    # histogram series were stored, label-free, and yield a TTFT percentile for the window
    hist = sample_series.engine_histogram_series(store, target, "ttft_seconds", since=0)
    from analysis.histogram_windows import summed_histogram_windows

    w = summed_histogram_windows(hist.assign(target=target), "ttft_seconds", window_s=3600.0)
    assert w["count"].sum() == 6
    assert w["p50"].dropna().iloc[0] > 0
    # a summary fit for runs.client_params
    js = summary.to_json()
    assert js["targets"] == [target] and js["rows"] == summary.rows_added
    store.dispose()


def test_a_dead_target_does_not_stop_the_others(sim: SimHandle, live_db: str) -> None:
    with socket_closed_port() as dead:
        store = open_store(live_db)
        live = watch.LiveCollection.start(
            store,
            metrics_urls=[f"http://127.0.0.1:{dead}/metrics", sim.url],
            gpu=False,
            interval_s=0.25,
        )
        try:
            wait_for(lambda: live.watcher.states[1].scrapes >= 3, what="the live target")
            wait_for(lambda: live.watcher.states[0].errors >= 2, what="failed scrapes")
        finally:
            summary = live.stop()
        dead_state, _ = summary.sources
        assert dead_state.scrapes == 0 and dead_state.last_error
        assert "ConnectError" in dead_state.last_error
        assert summary.targets == [f"{sim.url}/metrics"]
        store.dispose()


class socket_closed_port:
    """A port nothing listens on (bound, then closed)."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        return None


def test_resolve_metrics_url(sim: SimHandle) -> None:
    assert watch.resolve_metrics_url(f"{sim.url}/v1") == f"{sim.url}/metrics"
    assert watch.resolve_metrics_url(sim.url) == f"{sim.url}/metrics"
    with socket_closed_port() as dead:
        assert watch.resolve_metrics_url(f"http://127.0.0.1:{dead}/v1") is None


def _watch_cmd(db: str, *extra: str) -> list[str]:
    # `servescope watch` itself
    return [sys.executable, "-m", "cli", "watch", "--db", db, *extra]


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["SERVESCOPE_SPOOL_DIR"] = str(tmp_path / "spool")
    env["PYTHONPATH"] = str(ROOT)
    return env


def test_watch_command_runs_for_its_duration(sim: SimHandle, live_db: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        _watch_cmd(
            live_db,
            "--metrics",
            f"127.0.0.1:{sim.port}",
            "--interval",
            "250ms",
            "--duration",
            "2s",
            "--gpu",
        ),
        cwd=ROOT,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    # --gpu without a driver: one clear line, and the engine target still collected
    assert "no NVIDIA driver found: GPU samples off" in proc.stderr or "NVML:" in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("stored ")
    stored, added = (int(x.replace(",", "")) for x in last.split()[1:4:2])
    assert stored == added > 0
    store = open_store(live_db)
    assert sample_series.sample_counts(store)["engine_samples"] > 0
    store.dispose()


def test_ctrl_c_flushes_and_exits_zero(sim: SimHandle, live_db: str, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        _watch_cmd(live_db, "--metrics", f"{sim.url}/metrics", "--interval", "250ms"),
        cwd=ROOT,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        assert first.startswith("servescope watch"), first
        store = open_store(live_db, lock_timeout_s=30)
        try:
            wait_for(
                lambda: sample_series.sample_counts(store)["engine_samples"] > 0,
                what="the first flush",
            )
        finally:
            store.dispose()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    last = err.strip().splitlines()[-1]
    stored, added = (int(x.replace(",", "")) for x in last.split()[1:4:2])
    assert stored == added > 0
    store = open_store(live_db)
    counts = sample_series.sample_counts(store)
    assert sum(counts.values()) == added
    store.dispose()


def test_watch_needs_something_to_watch(live_db: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        _watch_cmd(live_db),
        cwd=ROOT,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "nothing to watch" in proc.stderr


def test_run_live_sources_reads_what_the_bench_records(live_db: str) -> None:
    from store import ingest, sample_series

    store = open_store(live_db)
    summary = {"targets": ["http://127.0.0.1:8000/metrics"], "hosts": ["sim@127.0.0.1:8000"]}
    ingest.add_run(
        store,
        {
            "run_id": "r1",
            "started_at": 10.0,
            "ended_at": 20.0,
            "client_params": {"concurrency": 4, "collectors": summary},
        },
    )
    ingest.add_run(store, {"run_id": "r2", "started_at": 1.0})
    assert sample_series.run_live_sources(store, "r1") == {
        "started_at": 10.0,
        "ended_at": 20.0,
        **summary,
    }
    assert sample_series.run_live_sources(store, "r2")["targets"] == []
    assert sample_series.run_live_sources(store, "nope") == {}
    store.dispose()


# --- several targets per flag (issue 9), exit status when nothing was collected ------------------

FIXTURES = ROOT / "tests" / "fixtures"
GATEWAY_PAGES = {
    "/vllm/metrics": FIXTURES
    / "vllm"
    / "metrics_v1_full_qwen2.5-0.5b_k8s-ai-conformance_kops.prom",
    "/llama/metrics": FIXTURES / "llamacpp" / "metrics_llama-server_cuda_lfm2.5-8b.prom",
    "/dcgm/metrics": FIXTURES / "dcgm" / "dcgm_exporter_nvidia_l4_k8s-ai-conformance_kops.prom",
}


@pytest.fixture
def gateway() -> Iterator[str]:
    """A loopback 'gateway' serving real /metrics captures under several paths."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    pages = {path: file.read_bytes() for path, file in GATEWAY_PAGES.items()}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, format: str, *args: object) -> None:
            return None

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: object, client_address: object) -> None:
            # a scrape that timed out on a loaded machine closes its socket mid-write
            if not isinstance(sys.exc_info()[1], ConnectionError):
                super().handle_error(request, client_address)  # type: ignore[arg-type]

    server = Server(("127.0.0.1", 0), Handler)
    thread = Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


TIMING = ("--interval", "250ms", "--duration", "2s")


def test_repeated_metrics_and_dcgm_flags_watch_every_target(
    gateway: str, sim: SimHandle, live_db: str, tmp_path: Path
) -> None:
    """`watch --metrics A --metrics B --dcgm C --dcgm D` stores samples from all four (a repeated
    flag used to replace the earlier list: only B and D were watched, '2/2 ok')."""
    a, b = f"{gateway}/vllm/metrics", f"{gateway}/llama/metrics"
    c, d = f"{gateway}/dcgm/metrics", f"{sim.url}/metrics"
    proc = subprocess.run(
        _watch_cmd(live_db, "--metrics", a, "--metrics", b, "--dcgm", c, "--dcgm", d, *TIMING),
        cwd=ROOT,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    store = open_store(live_db)
    engine = store.read_df(
        "SELECT target, min(engine) AS engine, count(*) AS n FROM engine_samples GROUP BY target"
    ).set_index("target")
    gpus = store.read_df(
        "SELECT host, source, count(*) AS n FROM gpu_samples GROUP BY host, source"
    )
    raw = set(store.read_df("SELECT DISTINCT target FROM engine_raw_samples")["target"])
    store.dispose()
    assert engine.to_dict("index") == {
        a: {"engine": "vllm", "n": engine.loc[a, "n"]},
        b: {"engine": "llamacpp", "n": engine.loc[b, "n"]},
    }
    assert (engine["n"] > 0).all()
    # C: the real DCGM exporter (its Hostname label); D: the sim's DCGM-style page
    assert "i-030791dc5a37cd257" in set(gpus["host"])
    assert set(gpus["source"]) == {"dcgm"} and len(gpus) == 2 and (gpus["n"] > 0).all()
    assert raw == {a, b, c, d}


def _dead_port() -> int:
    with socket_closed_port() as port:
        return port


def test_watch_exits_3_when_every_scrape_of_every_target_failed(
    gateway: str, live_db: str, tmp_path: Path
) -> None:
    dead1, dead2 = f"127.0.0.1:{_dead_port()}", f"127.0.0.1:{_dead_port()}"
    args = ["--interval", "250ms", "--duration", "1s"]
    proc = subprocess.run(
        _watch_cmd(live_db, "--metrics", dead1, "--dcgm", dead2, *args),
        cwd=ROOT,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 3, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("servescope watch: every scrape failed (")
    assert last.endswith(", 2 target(s)): nothing was collected (exit 3)")
    # one live target among dead ones: something was collected, exit 0
    proc = subprocess.run(
        _watch_cmd(live_db, "--metrics", dead1, f"{gateway}/vllm/metrics", *args),
        cwd=ROOT,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "every scrape failed" not in proc.stderr


def test_watch_says_when_rows_wait_in_the_spool_and_exits_4(
    gateway: str,
    tmp_path: Path,
    duckdb_lock: Callable[[Path], AbstractContextManager[None]],
    ingest_spool_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    """The store is locked by another process from the first status line to the end: the
    watcher's rows go to the spool, it says where and which command stores them, exits 4, and
    `db ingest-spool` then stores every one of them."""
    path = tmp_path / "locked.duckdb"
    db = f"duckdb:///{path}"
    env = _env(tmp_path) | {"SERVESCOPE_LOCK_TIMEOUT_S": "0.3"}
    env.pop("SERVESCOPE_SPOOL_DIR")  # the default: beside the store
    args = ["--metrics", f"{gateway}/vllm/metrics", "--interval", "250ms", "--duration", "3s"]
    watcher = subprocess.Popen(
        _watch_cmd(db, *args), cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        assert watcher.stderr is not None
        assert watcher.stderr.readline().startswith("servescope watch →")
        with duckdb_lock(path):
            rest = watcher.stderr.read()
            assert watcher.wait(timeout=60) == 4, rest
    finally:
        if watcher.poll() is None:
            watcher.kill()
        watcher.communicate(timeout=10)
    last = rest.strip().splitlines()[-1]
    assert "rows (" in last and f"spooled at {path}.spool" in last
    assert f"servescope db ingest-spool --db {db}" in last and last.endswith("(exit 4).")
    spooled = int(last.split("locked: ")[1].split(" rows")[0].replace(",", ""))
    assert spooled > 0
    ingest = ingest_spool_cli(db, cwd=ROOT, env=env)
    assert ingest.returncode == 0, ingest.stderr
    store = open_store(db)
    stored = store.read_df(
        "select (select count(*) from engine_samples) + (select count(*) from engine_raw_samples)"
        " as n"
    ).n[0]
    store.dispose()
    assert stored >= spooled
