"""``servescope bench --concurrency 99999999 --requests 5`` (issue 10 item 6): the worker used to
grow to 23 GB until the kernel killed it (~88 s). Streams are capped at the number of requests,
so it finishes at once, small, with its 5 requests stored and the cap recorded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sim.mockserver import MockServer
from store.lifecycle import open_store

ROOT = Path(__file__).resolve().parents[2]

# Runs the command and prints the peak RSS (KiB) of its process tree's largest process: the bench
# coordinator and its worker process (reaped by it) are this wrapper's only descendants. Their
# address space is limited to 4 GiB, so that a regression fails without eating the machine.
WRAPPER = (
    "import resource, subprocess, sys\n"
    "resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
    "rc = subprocess.call(sys.argv[1:])\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, flush=True)\n"
    "sys.exit(rc)\n"
)


def _kill_leftovers(marker: str) -> None:
    """Kill this test's processes still running (a timed-out bench leaves its coordinator and
    its worker, in a session of its own): those whose environment holds ``marker``."""
    needle = f"SERVESCOPE_SPOOL_DIR={marker}".encode()
    for proc_dir in Path("/proc").glob("[0-9]*"):
        try:
            if needle in (proc_dir / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc_dir.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue


def test_streams_beyond_the_requests_are_never_started(tmp_path: Path) -> None:
    db = f"duckdb:///{tmp_path / 'caps.duckdb'}"
    env = dict(os.environ, PYTHONPATH=str(ROOT), SERVESCOPE_SPOOL_DIR=str(tmp_path / "spool"))
    with MockServer(ttft_ms=2, itl_ms=1) as url:
        bench = [sys.executable, "-m", "cli", "bench", "--endpoint", url, "--no-gpu"]
        bench += ["--workload", "short-in-short-out", "--max-tokens", "4", "--db", db]
        bench += ["--concurrency", "99999999", "--requests", "5", "--metrics-url", "off"]
        t0 = time.monotonic()
        try:
            proc = subprocess.run(
                [sys.executable, "-c", WRAPPER, *bench],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=90,
            )
        finally:
            _kill_leftovers(env["SERVESCOPE_SPOOL_DIR"])
        wall_s = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    peak_mib = int(proc.stdout.strip().splitlines()[-1]) / 1024
    print(f"capped run: {wall_s:.1f} s, peak RSS {peak_mib:.0f} MiB")
    assert wall_s < 60, wall_s
    assert peak_mib < 1024, f"peak RSS {peak_mib:.0f} MiB"
    assert (
        "servescope bench: --concurrency 99,999,999 capped at 5 streams "
        "(--requests 5: more streams would never send a request)"
    ) in proc.stderr
    store = open_store(db)
    runs = store.read_df("SELECT run_id, concurrency, notes, status, client_params FROM runs")
    assert len(runs) == 1 and runs["concurrency"].tolist() == [5]
    assert runs["status"].tolist() == ["completed"]
    assert "capped at 5 streams" in runs["notes"].iloc[0]
    params = json.loads(runs["client_params"].iloc[0])
    assert params["load"] == {"kind": "concurrency", "value": 5}
    assert params["concurrency_capped"]["requested"] == [99_999_999]
    assert params["concurrency_capped"]["streams"] == 5
    reqs = store.read_df("SELECT status FROM requests")
    assert reqs["status"].tolist() == ["ok"] * 5
    store.dispose()
