"""How ``servescope bench`` ends: signals, a locked store at shutdown, total failure.

Real processes throughout: the console script as a subprocess, signals sent with ``os.kill``,
the loopback mock server, and a DuckDB file held locked by another process. What must hold:
every request the client measured is stored (or spooled, then stored by ``db ingest-spool``),
no run is left ``running``, the exit code says what happened and the run ids go to stdout.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from collectors.loadgen.prompts import PROBE_WORDS
from sim.mockserver import MockServer
from store.lifecycle import open_store

ROOT = Path(__file__).resolve().parents[2]
PROBES = len(PROBE_WORDS)  # calibration requests the server also counts (not measured)
SERVESCOPE = Path(sys.executable).parent / "servescope"


def bench(url: str, db: Path, *args: str, lock_timeout_s: float = 10.0) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            str(SERVESCOPE),
            "bench",
            "--endpoint",
            url,
            "--workload",
            "short-in-short-out",
            "--max-tokens",
            "10",
            "--metrics-url",
            "off",
            "--no-gpu",
            "--db",
            f"duckdb:///{db}",
            *args,
        ],
        cwd=db.parent,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "SERVESCOPE_LOCK_TIMEOUT_S": str(lock_timeout_s),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_completed(server: MockServer, proc: subprocess.Popen[str], n: int) -> None:
    deadline = time.monotonic() + 90
    while server.stats()["completed"] < n:  # poll the server, not the clock
        if proc.poll() is not None:
            _out, err = proc.communicate()
            raise AssertionError(f"bench exited early ({proc.returncode}): {err[-3000:]}")
        assert time.monotonic() < deadline, "no progress"


def request_counts(db: Path) -> dict[str, int]:
    store = open_store(f"duckdb:///{db}")
    df = store.read_df("select status, count(*) as n from requests group by 1")
    store.dispose()
    return {str(s): int(n) for s, n in zip(df.status, df.n, strict=True)}


def run_rows(db: Path) -> list[tuple[str, str]]:
    store = open_store(f"duckdb:///{db}")
    df = store.read_df("select run_id, status from runs order by run_id")
    store.dispose()
    return list(zip(df.run_id, df.status, strict=True))


def test_sigterm_stops_like_ctrl_c_and_keeps_every_completed_request(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    server = MockServer(ttft_ms=5, itl_ms=20)
    server.start()
    try:
        proc = bench(server.url, db, "--concurrency", "4", "--requests", "100000", "--workers", "2")
        try:
            wait_for_completed(server, proc, 40)
            os.kill(proc.pid, signal.SIGTERM)
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        truth = server.stats()
    finally:
        server.stop()
    assert proc.returncode == 143, err[-3000:]
    runs = run_rows(db)
    assert [status for _, status in runs] == ["interrupted"]
    assert out.split() == [runs[0][0]]  # the saved run id, on stdout
    counts = request_counts(db)
    assert set(counts) <= {"ok", "cancelled"}
    # every request the server finished was measured and stored: as ok, or as cancelled when
    # the stop came between the server's last byte and the client reading it
    assert counts["ok"] >= 40
    assert counts["ok"] + counts.get("cancelled", 0) >= truth["completed"] - PROBES
    # every request the server received has its row (the in-flight ones as cancelled);
    # some may not have reached it when the stop came
    assert sum(counts.values()) >= truth["requests"] - PROBES


def test_repeated_ctrl_c_while_saving_to_a_locked_store_spools_and_ends_the_run(
    tmp_path: Path,
    duckdb_lock: Callable[[Path], AbstractContextManager[None]],
    ingest_spool_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    """Ctrl-C, then Ctrl-C again and again while the final flush waits on a locked store:
    the flush is not cut; the rows and the ended run row are spooled, and the user is told."""
    db = tmp_path / "c.duckdb"
    server = MockServer(ttft_ms=5, itl_ms=20)
    server.start()
    try:
        proc = bench(
            server.url, db, "--concurrency", "4", "--requests", "100000", lock_timeout_s=4.0
        )
        try:
            wait_for_completed(server, proc, 40)
            with duckdb_lock(db):
                assert proc.stderr is not None
                lines: list[str] = []
                reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
                reader.start()
                os.kill(proc.pid, signal.SIGINT)
                deadline = time.monotonic() + 60
                # keep pressing Ctrl-C through the final flush (which waits on the lock, then
                # spools), until bench reports the interruption
                while not any(line.startswith("interrupted (") for line in lines):
                    assert proc.poll() is None, "".join(lines)[-3000:]
                    assert time.monotonic() < deadline, "bench did not finish saving"
                    os.kill(proc.pid, signal.SIGINT)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=0.2)
                out = proc.stdout.read() if proc.stdout is not None else ""
                proc.wait(timeout=60)
                reader.join(timeout=30)
                err = "".join(lines)
        finally:
            if proc.poll() is None:
                proc.kill()
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        truth = server.stats()
    finally:
        server.stop()
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "RuntimeError" not in err, err[-3000:]
    assert "already stopping" in err
    run_id = out.split()
    assert len(run_id) == 1  # the run id, on stdout
    assert "ingest-spool" in err and str(db.parent) in err, err[-3000:]
    done = ingest_spool_cli(f"duckdb:///{db}", cwd=db.parent)
    assert done.returncode == 0, done.stderr
    assert run_rows(db) == [(run_id[0], "interrupted")]
    counts = request_counts(db)
    assert counts["ok"] + counts.get("cancelled", 0) >= truth["completed"] - PROBES
    assert sum(counts.values()) >= truth["requests"] - PROBES
    assert not list(db.parent.glob("*.spool/*.json"))


@pytest.mark.parametrize(
    ("script", "flags", "code", "status"),
    [
        ("500", (), 3, "failed"),  # every request fails: a CI pipeline must see it
        ("ok*3,500", ("--max-error-rate", "0.2"), 3, "failed"),  # 25% > 20%
        ("ok*3,500", ("--max-error-rate", "0.5"), 0, "completed"),
    ],
)
def test_exit_code_and_status_follow_the_error_rate(
    tmp_path: Path, script: str, flags: tuple[str, ...], code: int, status: str
) -> None:
    db = tmp_path / "f.duckdb"
    with MockServer(script=script) as url:
        proc = bench(url, db, "--concurrency", "1", "--requests", "20", *flags)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err[-3000:]
    runs = run_rows(db)
    assert [s for _, s in runs] == [status]
    assert out.split() == [runs[0][0]]
    if code:
        assert f"run {runs[0][0]} failed" in err
    assert sum(request_counts(db).values()) == 20
