"""A watched store for the On-call tests (tests/integration/test_oncall_saturation.py,
tests/e2e/test_oncall_e2e.py): a real ``servescope sim`` with a small KV cache, watched by the
real ``servescope watch`` into a DuckDB file, driven by the real load generator through calm
load, then a burst that fills the KV cache and builds a queue, then calm load again.

Nothing is written by hand: every sample in the store is a scrape of the sim's ``/metrics`` over
a loopback socket. The phases' times come from the load generator's own stored runs (their
``started_at`` and ``duration_s``), not from when the calls returned.

The engine: Llama-3.1-8B on one H100 with 256 KV blocks of 16 tokens (4 096 tokens) and up to
64 running sequences. Calm: Poisson arrivals at 1 request/s of the ``short-in-short-out``
workload (~128 tokens in, 128 out, ``ignore_eos``), about one sequence running, KV a few
percent. Burst: 48 streams in a closed loop; 48 × ~256 tokens do not fit in 4 096, so the KV
cache fills, requests wait (vLLM's queue) and are preempted, and TTFT grows from tens of ms to
seconds. About 45–55 s of wall time in all on the 2-core development machine
(``bench/oncall_replay.py`` prints it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from collectors.loadgen.config import BenchConfig
from collectors.loadgen.runner import run_benchmark
from store.lifecycle import open_store

ROOT = Path(__file__).resolve().parents[1]

GPU = "H100-SXM-80GB"
MODEL = "llama-3.1-8b"
KV_BLOCKS = 256
MAX_BATCH = 64
WORKLOAD = "short-in-short-out"
MAX_TOKENS = 128
CALM_RATE = 1.0  # requests/s, Poisson
CALM_S = 10.0
BURST_STREAMS = 48
BURST_S = 10.0
RECOVERY_S = 6.0
SCRAPE_INTERVAL = "500ms"


@dataclass(frozen=True)
class SaturationStore:
    """The watched store and the phases' times (epoch seconds)."""

    url: str  # the DuckDB store URL the watcher wrote
    target: str  # the watched target as stored: the sim's /metrics URL
    calm_start: float  # first calm request sent
    burst_start: float  # first burst request sent
    burst_end: float  # the burst's last request finished
    end: float  # the recovery's last request finished
    requests: int  # requests the load generator completed in the three phases
    kv_blocks: int = KV_BLOCKS
    wall_s: float = 0.0  # time build_saturation_store took


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(tmp_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["SERVESCOPE_SPOOL_DIR"] = str(tmp_dir / "spool")
    env["PYTHONPATH"] = str(ROOT)
    return env


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def _process(cmd: Sequence[str], tmp_dir: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(list(cmd), cwd=ROOT, env=_env(tmp_dir), stdout=out, stderr=out)
        try:
            yield proc
        finally:
            _stop(proc)


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0) as client:
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"the sim exited: {log.read_text(errors='replace')[-800:]}")
            with contextlib.suppress(httpx.HTTPError):
                if client.get(url + "/health").status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise AssertionError(f"the sim did not answer on {url} within {timeout_s:.0f} s")
            time.sleep(0.1)


def _wait_scraped(db_url: str, target: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Until the watcher has stored a scrape of the target (it flushes every few seconds), so
    that the calm phase starts with a baseline in the store. Polls its log line instead of the
    store, which the watcher holds open."""
    deadline = time.monotonic() + 60.0
    while "1/1 ok" not in log.read_text(errors="replace"):
        if proc.poll() is not None:
            raise AssertionError(f"watch exited: {log.read_text(errors='replace')[-800:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"watch stored no scrape of {target} into {db_url}")
        time.sleep(0.1)


def _phase(url: str, bench_db: str, name: str, **load: object) -> tuple[float, float, int]:
    """One load phase through the real load generator: (first sent, last finished, requests
    that completed)."""
    config = BenchConfig(
        endpoint=url,
        api="completions",
        workload=WORKLOAD,
        max_tokens=MAX_TOKENS,
        ignore_eos=True,
        metrics_url="off",
        gpu=False,
        seed=11,
        name=name,
        # no calibration probe: every request the sim serves is one of the phase's, so the
        # engine's counters can be checked against the load generator's records
        calibrate=False,
        **load,  # type: ignore[arg-type]
    )
    store = open_store(bench_db)
    try:
        (run_id,) = run_benchmark(config, store, progress=False)
        span = store.read_df(
            "SELECT min(sent_at) AS first, max(done_at) AS last, count(*) AS n "
            "FROM requests WHERE run_id = :r AND status = 'ok'",
            {"r": run_id},
        )
    finally:
        store.dispose()
    return float(span["first"].iloc[0]), float(span["last"].iloc[0]), int(span["n"].iloc[0])


def build_saturation_store(tmp_dir: Path | str) -> SaturationStore:
    """Run sim + watch + calm/burst/recovery load; everything is stopped on return."""
    t0 = time.monotonic()
    tmp = Path(tmp_dir)
    tmp.mkdir(parents=True, exist_ok=True)
    db_url = f"duckdb:///{tmp / 'oncall.duckdb'}"
    bench_db = f"duckdb:///{tmp / 'oncall-bench.duckdb'}"
    port = free_port()
    sim_url = f"http://127.0.0.1:{port}"
    target = f"{sim_url}/metrics"
    sim_cmd = [sys.executable, "-m", "cli", "sim", "--port", str(port), "--gpu", GPU]
    sim_cmd += ["--model", MODEL, "--num-gpu-blocks", str(KV_BLOCKS)]
    sim_cmd += ["--max-batch-size", str(MAX_BATCH), "--seed", "5"]
    watch_cmd = [sys.executable, "-m", "cli", "watch", "--metrics", target]
    watch_cmd += ["--interval", SCRAPE_INTERVAL, "--db", db_url]
    sim_log, watch_log = tmp / "sim.log", tmp / "watch.log"
    with _process(sim_cmd, tmp, sim_log) as sim:
        _wait_healthy(sim_url, sim, sim_log, 60.0)
        with _process(watch_cmd, tmp, watch_log) as watcher:
            _wait_scraped(db_url, target, watcher, watch_log)
            calm_start, _, n_calm = _phase(
                sim_url, bench_db, "calm", rate=(CALM_RATE,), duration_s=CALM_S
            )
            burst_start, burst_end, n_burst = _phase(
                sim_url, bench_db, "burst", concurrency=(BURST_STREAMS,), duration_s=BURST_S
            )
            _, end, n_recovery = _phase(
                sim_url, bench_db, "recovery", rate=(CALM_RATE,), duration_s=RECOVERY_S
            )
            time.sleep(1.5)  # a few scrapes after the last request finished
            # SIGINT flushes what is buffered and exits 0 (as Ctrl-C)
            _stop(watcher, signal.SIGINT, timeout=60.0)
            if watcher.returncode != 0:
                raise AssertionError(
                    f"watch exited {watcher.returncode}: "
                    f"{watch_log.read_text(errors='replace')[-800:]}"
                )
    return SaturationStore(
        url=db_url,
        target=target,
        calm_start=calm_start,
        burst_start=burst_start,
        burst_end=burst_end,
        end=end,
        requests=n_calm + n_burst + n_recovery,
        wall_s=time.monotonic() - t0,
    )
