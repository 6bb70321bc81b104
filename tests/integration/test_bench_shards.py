"""One run from many hosts (``servescope bench --shard I/N --group NAME``), for real: three bench
processes (three host names) against one loopback sim into a private PostgreSQL make ONE run —
its request count the sum of the hosts' rows, its percentiles (the store's own run figures)
those of the union of the rows — and a host killed mid-run leaves the others' rows, is marked
failed (no heartbeat), and the run ends ``interrupted`` naming it, within a bounded time."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from collectors.loadgen.config import BenchConfig
from collectors.loadgen.runner import run_bench
from collectors.loadgen.shards import ShardCoordinator
from errors import CollectorError, InputError
from sim.mockserver import MockServer
from store import run_figures, run_shards
from store.db import Store
from store.lifecycle import open_store

ROOT = Path(__file__).resolve().parents[2]
SERVESCOPE = Path(sys.executable).parent / "servescope"


@pytest.fixture(scope="module")
def sim() -> Iterator[MockServer]:
    server = MockServer(ttft_ms=20, itl_ms=3)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def pg_fresh(pg_url: str, request: pytest.FixtureRequest) -> str:
    """A new, empty PostgreSQL database (no schema yet)."""
    server = request.getfixturevalue("_pg_server")
    return str(server.create_database(f"t_{uuid.uuid4().hex[:16]}"))


@pytest.fixture
def pg_store(pg_fresh: str) -> Iterator[tuple[str, Store]]:
    """A new PostgreSQL database, migrated once before the hosts open it."""
    store = open_store(pg_fresh)
    yield pg_fresh, store
    store.dispose()


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError):
                out.update(int(p) for p in (task / "children").read_text().split())
    return out


@contextlib.contextmanager
def hosts(
    url: str,
    db: str,
    group: str,
    tmp_path: Path,
    *args: str,
    n: int = 3,
    started: int | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[list[subprocess.Popen[str]]]:
    """bench processes for shards 1/n … started/n (default all), as host-i; whatever they leave
    is killed at the end."""
    procs: list[subprocess.Popen[str]] = []
    seen: set[int] = set()
    for i in range(1, (started or n) + 1):
        log = (tmp_path / f"host-{i}.log").open("w")
        procs.append(
            subprocess.Popen(
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
                    "--workers",
                    "1",
                    "--db",
                    db,
                    "--shard",
                    f"{i}/{n}",
                    "--group",
                    group,
                    "--host-name",
                    f"host-{i}",
                    *args,
                ],
                cwd=tmp_path,
                env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                start_new_session=True,
            )
        )
        log.close()
    try:
        yield procs
    finally:
        for proc in procs:
            seen |= _children(proc.pid)
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        for pid in seen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _log(tmp_path: Path, i: int) -> str:
    return (tmp_path / f"host-{i}.log").read_text(errors="replace")[-3000:]


def _wait(proc: subprocess.Popen[str], timeout: float, tmp_path: Path, i: int) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"host-{i} did not finish in {timeout} s: {_log(tmp_path, i)}"
        ) from None


def _run_row(store: Store, run_id: str) -> dict[str, Any]:
    df = store.read_df("SELECT * FROM runs WHERE run_id = :r", {"r": run_id})
    assert len(df) == 1, f"one run row for {run_id}, found {len(df)}"
    return dict(df.iloc[0])


def test_three_hosts_make_one_run_whose_figures_are_over_every_hosts_rows(
    sim: MockServer, pg_fresh: str, tmp_path: Path
) -> None:
    db = pg_fresh  # not migrated: the three hosts open it together (store.lifecycle's lock)
    with hosts(sim.url, db, "three", tmp_path, "--concurrency", "6", "--requests", "90") as procs:
        codes = [_wait(p, 60, tmp_path, i + 1) for i, p in enumerate(procs)]
        outs = [p.stdout.read() if p.stdout else "" for p in procs]
    assert codes == [0, 0, 0], [_log(tmp_path, i) for i in (1, 2, 3)]
    store = open_store(db)
    try:
        _check_one_run(store, outs)
    finally:
        store.dispose()


def _check_one_run(store: Store, outs: list[str]) -> None:
    assert {o.strip() for o in outs} == {"three-c6"}  # every host names the same run
    assert store.read_df("SELECT run_id FROM runs")["run_id"].tolist() == ["three-c6"]

    rows = store.read_df(
        "SELECT seq, host, status, ttft_ms, e2e_ms, sent_at FROM requests WHERE run_id = :r",
        {"r": "three-c6"},
    )
    per_host = rows.groupby("host").size().to_dict()
    assert per_host == {"host-1": 30, "host-2": 30, "host-3": 30}
    assert sorted(rows["seq"]) == list(range(90))  # the global plan, shared out once
    ok = rows[rows["status"] == "ok"]
    assert len(ok) == 90

    figures = run_figures.compute(store, ["three-c6"]).iloc[0]
    assert figures["requests"] == sum(per_host.values())
    for metric in ("ttft", "e2e"):
        values = ok[f"{metric}_ms"].to_numpy(dtype=float)
        for q in (50, 90, 95, 99):
            assert figures[f"{metric}_p{q}_ms"] == pytest.approx(np.percentile(values, q), rel=1e-9)

    run = _run_row(store, "three-c6")
    assert run["status"] == "completed"
    assert run["concurrency"] == 6
    summary = json.loads(run["tool_summary"])
    assert summary["requests"] == 90 and summary["ok"] == 90
    assert [h["host"] for h in summary["hosts"]] == ["host-1", "host-2", "host-3"]
    assert summary["failed_hosts"] == []
    # the run's span covers every host's: merged, not the last writer's
    first = rows.groupby("host")["sent_at"].min()
    assert run["started_at"] <= first.min() + 0.05
    assert run["ended_at"] >= rows["sent_at"].max()

    shares = run_shards.read(store, "three-c6")
    assert [(s.host, s.status, s.requests) for s in shares] == [
        ("host-1", "completed", 30),
        ("host-2", "completed", 30),
        ("host-3", "completed", 30),
    ]
    for s in shares:  # one machine, one clock: the offset is within the round trip
        assert s.clock_offset_ms is not None and s.clock_rtt_ms is not None
        assert abs(s.clock_offset_ms) <= s.clock_rtt_ms / 2 + 5.0
    # the common start: every host's first send within a few hundred ms of the others'
    skew = float(first.max() - first.min())
    print(f"start skew between hosts (first sent_at): {skew * 1000:.1f} ms")
    assert skew < 0.5


def test_an_open_loop_is_shared_out_request_by_request(
    sim: MockServer, pg_store: tuple[str, Store], tmp_path: Path
) -> None:
    db, store = pg_store
    args = ("--rate", "40", "--requests", "60", "--arrival", "constant")
    with hosts(sim.url, db, "open", tmp_path, *args, n=2) as procs:
        codes = [_wait(p, 60, tmp_path, i + 1) for i, p in enumerate(procs)]
    assert codes == [0, 0], [_log(tmp_path, i) for i in (1, 2)]
    rows = store.read_df("SELECT seq, host, scheduled_at FROM requests ORDER BY seq")
    assert rows["seq"].tolist() == list(range(60))
    assert rows["host"].tolist() == ["host-1", "host-2"] * 30  # request j is shard j mod 2's
    gaps = np.diff(rows["scheduled_at"].to_numpy(dtype=float))  # one schedule over both hosts
    assert np.median(gaps) == pytest.approx(1 / 40, abs=0.005)
    run = _run_row(store, "open-r40")
    assert run["status"] == "completed" and run["target_rate"] == 40
    assert run["achieved_rate"] == pytest.approx(40, rel=0.25)  # the hosts' rates summed


def test_a_host_killed_mid_run_is_marked_and_the_others_rows_kept(
    sim: MockServer, pg_store: tuple[str, Store], tmp_path: Path
) -> None:
    db, store = pg_store
    run_id = "killed-c6"
    with hosts(sim.url, db, "killed", tmp_path, "--concurrency", "6", "--requests", "900") as procs:
        deadline = time.monotonic() + 40
        while True:  # host-3 is running and has rows stored
            n = store.read_df(
                "SELECT count(*) AS n FROM requests WHERE run_id = :r AND host = 'host-3'",
                {"r": run_id},
            )["n"].iloc[0]
            if n > 0:
                break
            assert all(p.poll() is None for p in procs), [_log(tmp_path, i) for i in (1, 2, 3)]
            assert time.monotonic() < deadline, "host-3 stored no rows"
            time.sleep(0.2)
        workers = _children(procs[2].pid)
        procs[2].kill()  # the host dies: its bench and its measuring workers
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        codes = [_wait(p, 60, tmp_path, i + 1) for i, p in enumerate(procs[:2])]
        settled_s = time.monotonic() - killed_at
    assert codes == [0, 0], [_log(tmp_path, i) for i in (1, 2)]
    print(f"the others ended {settled_s:.1f} s after host-3 was killed")

    rows = store.read_df(
        "SELECT host, count(*) AS n FROM requests WHERE run_id = :r GROUP BY host", {"r": run_id}
    )
    per_host = dict(zip(rows["host"], rows["n"], strict=True))
    assert per_host["host-1"] == 300 and per_host["host-2"] == 300  # their whole shares
    assert 0 < per_host["host-3"] < 300  # what it stored before it died is kept

    shares = {s.host: s for s in run_shards.read(store, run_id)}
    assert shares["host-1"].status == shares["host-2"].status == "completed"
    assert shares["host-3"].status == "failed"
    assert (shares["host-3"].error or "").startswith("no heartbeat since")
    print(f"host-3: {shares['host-3'].error}")

    run = _run_row(store, run_id)
    assert run["status"] == "interrupted"
    assert "host-3" in (run["notes"] or "")
    summary = json.loads(run["tool_summary"])
    assert summary["failed_hosts"] == ["host-3"]
    figures = run_figures.compute(store, [run_id]).iloc[0]
    assert figures["requests"] == sum(per_host.values())


def test_a_host_stopped_with_ctrl_c_marks_itself_interrupted(
    sim: MockServer, pg_store: tuple[str, Store], tmp_path: Path
) -> None:
    db, store = pg_store
    run_id = "stopped-c6"
    with hosts(
        sim.url, db, "stopped", tmp_path, "--concurrency", "6", "--requests", "900"
    ) as procs:
        deadline = time.monotonic() + 40
        while not len(store.read_df("SELECT 1 FROM requests WHERE host = 'host-2' LIMIT 1")):
            assert all(p.poll() is None for p in procs), [_log(tmp_path, i) for i in (1, 2, 3)]
            assert time.monotonic() < deadline, "host-2 stored no rows"
            time.sleep(0.2)
        procs[1].send_signal(signal.SIGINT)
        codes = [_wait(p, 60, tmp_path, i + 1) for i, p in enumerate(procs)]
    assert codes == [0, 128 + signal.SIGINT, 0], [_log(tmp_path, i) for i in (1, 2, 3)]
    shares = {s.host: s.status for s in run_shards.read(store, run_id)}
    assert shares == {"host-1": "completed", "host-2": "interrupted", "host-3": "completed"}
    run = _run_row(store, run_id)
    assert run["status"] == "interrupted"
    assert "host-2 (shard 2/3) was stopped" in run["notes"]
    counts = store.read_df("SELECT host, count(*) AS n FROM requests GROUP BY host")
    per_host = dict(zip(counts["host"], counts["n"], strict=True))
    assert per_host["host-1"] == per_host["host-3"] == 300 and 0 < per_host["host-2"] < 300


def test_hosts_whose_peer_never_comes_give_up_and_leave_nothing(
    sim: MockServer, pg_store: tuple[str, Store], tmp_path: Path
) -> None:
    db, store = pg_store
    wait = {"SERVESCOPE_SHARD_WAIT_S": "3"}
    with hosts(
        sim.url, db, "alone", tmp_path, "--concurrency", "3", "--requests", "9", started=2, env=wait
    ) as procs:
        codes = [_wait(p, 40, tmp_path, i + 1) for i, p in enumerate(procs)]
    assert codes == [2, 2]
    for i in (1, 2):
        assert re.search(
            r"not every host was ready within 3 s \(waiting for [^)]*3/3: not joined\)",
            _log(tmp_path, i),
        ), _log(tmp_path, i)
    assert _counts(store) == (0, 0)
    assert len(store.read_df("SELECT 1 FROM requests")) == 0


def test_in_process_hosts_share_one_run(sim: MockServer, pg_store: tuple[str, Store]) -> None:
    """The Python API measuring in its own process (``in_process``) waits for the common start
    too: two hosts as two threads."""
    _db, store = pg_store
    outcomes: dict[int, Any] = {}

    def host(i: int) -> None:
        cfg = BenchConfig(
            endpoint=sim.url,
            workload="short-in-short-out",
            concurrency=(4,),
            requests=20,
            max_tokens=10,
            metrics_url="off",
            gpu=False,
            in_process=True,
            shard=(i, 2),
            group="inproc",
            host_name=f"thread-{i + 1}",
        )
        outcomes[i] = run_bench(cfg, store, progress=False)

    threads = [threading.Thread(target=host, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert [outcomes[i].levels[0].status for i in range(2)] == ["completed", "completed"]
    assert [outcomes[i].levels[0].merged_status for i in range(2)] == ["completed", "completed"]
    run = _run_row(store, "inproc-c4")
    assert run["status"] == "completed"
    counts = store.read_df("SELECT host, count(*) AS n FROM requests GROUP BY host ORDER BY host")
    assert counts["n"].tolist() == [10, 10]


# --- the agreement through the store (store/run_shards.py), without processes ----------------


def _run(run_id: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "name": "sharded",
        "status": "running",
        "started_at": time.time(),
        "client_params": {"shard": {"index": 1, "count": 3, "group": "g"}},
    }


def _join(
    store: Store,
    run_id: str,
    shard: int,
    *,
    shards: int = 3,
    stale_s: float = 5.0,
    host: str | None = None,
) -> run_shards.Joined:
    return run_shards.join(
        store,
        _run(run_id),
        shard=shard,
        shards=shards,
        host=host or f"h{shard + 1}",
        clock_offset_ms=0.0,
        clock_rtt_ms=0.2,
        stale_s=stale_s,
    )


def _counts(store: Store) -> tuple[int, int]:
    df = store.read_df(
        "SELECT (SELECT count(*) FROM runs) AS runs, (SELECT count(*) FROM run_shards) AS shards"
    )
    return int(df["runs"].iloc[0]), int(df["shards"].iloc[0])


def _finish(store: Store, run_id: str, shard: int, status: str = "completed") -> None:
    run_shards.finish(
        store,
        run_id,
        shard,
        status=status,
        started_at=100.0,
        ended_at=110.0,
        requests=5,
        ok=5,
        errors=0,
        client_bound=False,
        reason=None,
        summary={"requests": 5, "ok": 5},
    )


def test_joining_is_refused_with_nothing_written(pg_store: tuple[str, Store]) -> None:
    _db, store = pg_store
    assert _join(store, "g-c3", 0).created_run
    before = _counts(store)
    assert before == (1, 1)
    with pytest.raises(InputError, match="already holds that share"):
        _join(store, "g-c3", 0, host="other")
    with pytest.raises(InputError, match="gave /3"):
        _join(store, "g-c3", 1, shards=4)
    assert _counts(store) == before
    assert not _join(store, "g-c3", 1).created_run
    _join(store, "g-c3", 2)
    assert run_shards.ready(store, "g-c3", 0, lead_s=1.0) is None
    assert run_shards.ready(store, "g-c3", 1, lead_s=1.0) is None
    state = run_shards.start_state(store, "g-c3", 0)
    assert state.start_at is None and state.waiting_for == ("3/3 h3: joined",)
    start = run_shards.ready(store, "g-c3", 2, lead_s=1.0)  # the last ready fixes the start
    assert start is not None and start == pytest.approx(state.now + 1.0, abs=0.5)
    assert run_shards.start_state(store, "g-c3", 1).start_at == start  # once, for everyone
    with pytest.raises(CollectorError, match="joins too late"):
        _join(store, "g-c3", 1, host="late")
    for shard in range(3):
        _finish(store, "g-c3", shard)
    assert run_shards.settle(store, "g-c3", stale_s=5.0).state == "merged"
    with pytest.raises(InputError, match="already ended"):
        _join(store, "g-c3", 0)
    assert _counts(store) == (1, 3)


def test_a_run_whose_hosts_all_died_is_ended_by_a_late_joiner(
    pg_store: tuple[str, Store],
) -> None:
    _db, store = pg_store
    run = _run("dead-c2")
    for shard in range(2):
        _join(store, "dead-c2", shard, shards=2)
        run_shards.ready(store, "dead-c2", shard, lead_s=0.0)
    coord = ShardCoordinator(
        store, run, shard=1, shards=2, host="late", counts=lambda: (0, 0, 0), stale_s=0.05
    )
    time.sleep(0.1)  # both hosts are silent past stale_s
    with pytest.raises(CollectorError, match="joins too late"):
        coord.join()
    assert _run_row(store, "dead-c2")["status"] == "interrupted"
    assert [s.status for s in run_shards.read(store, "dead-c2")] == ["failed", "failed"]


def test_a_silent_joined_host_is_replaced_and_a_run_never_started_is_left_clean(
    pg_store: tuple[str, Store],
) -> None:
    _db, store = pg_store
    _join(store, "r-c1", 0, host="dead")
    time.sleep(0.05)
    _join(store, "r-c1", 0, host="again", stale_s=0.01)  # its heartbeat went stale: taken over
    assert [(s.host, s.status) for s in run_shards.read(store, "r-c1")] == [("again", "joined")]
    run_shards.leave(store, "r-c1", 0)
    assert _counts(store) == (0, 0)  # as if never joined


def test_hosts_finishing_together_merge_exactly_once(pg_store: tuple[str, Store]) -> None:
    _db, store = pg_store
    for shard in range(3):
        _join(store, "t-c3", shard)
    _finish(store, "t-c3", 2, status="interrupted")  # stopped with Ctrl-C: its own verdict
    barrier = threading.Barrier(2)
    found: list[str] = []

    def finisher(shard: int) -> None:
        barrier.wait()
        _finish(store, "t-c3", shard)
        found.append(run_shards.settle(store, "t-c3", stale_s=5.0).state)

    threads = [threading.Thread(target=finisher, args=(s,)) for s in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    # under the run row's lock the second to settle sees every share ended: exactly one merges
    # (the other found the run merged, or settled first and saw the other still running)
    assert found.count("merged") == 1 and len(found) == 2
    run = _run_row(store, "t-c3")
    assert run["status"] == "interrupted"
    assert "h3 (shard 3/3) was stopped" in run["notes"]
    assert json.loads(run["client_params"])["shard"] == {"count": 3, "group": "g"}


def test_shard_with_a_duckdb_store_is_refused(tmp_path: Path) -> None:
    """DuckDB takes one writing process: --shard says PostgreSQL is needed, before measuring."""
    db = tmp_path / "one.duckdb"
    proc = subprocess.run(
        [
            str(SERVESCOPE),
            "bench",
            "--endpoint",
            "http://127.0.0.1:9",  # never reached
            "--workload",
            "short-in-short-out",
            "--concurrency",
            "2",
            "--requests",
            "4",
            "--metrics-url",
            "off",
            "--no-gpu",
            "--shard",
            "1/2",
            "--group",
            "g",
            "--db",
            f"duckdb:///{db}",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "--shard needs a PostgreSQL store" in proc.stderr
    assert "postgresql+psycopg://" in proc.stderr
    assert not db.exists()  # refused before the store was opened: no file created
    assert proc.stdout == ""
    if db.exists():
        store = open_store(f"duckdb:///{db}")
        try:
            assert store.read_df("SELECT count(*) AS n FROM runs")["n"].iloc[0] == 0
        finally:
            store.dispose()


def test_a_host_with_another_load_is_refused_before_anything_is_sent(
    sim: MockServer, pg_store: tuple[str, Store], tmp_path: Path
) -> None:
    # the case: host 1 short-in-short-out --requests 20 --max-tokens 8, host 2
    # long-in-long-out --requests 400 --max-tokens 64 in one --group made one 'completed' run
    # labelled short-in-short-out, 200 of whose 210 rows averaged 2,003 input tokens
    db, store = pg_store
    sim.stats(reset=True)
    common = [str(SERVESCOPE), "bench", "--endpoint", sim.url, "--metrics-url", "off"]
    common += ["--no-gpu", "--workers", "1", "--db", db, "--group", "mixed", "--concurrency", "4"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SERVESCOPE_SHARD_WAIT_S": "60"}
    log = (tmp_path / "host-1.log").open("w")
    first = subprocess.Popen(
        [
            *common,
            *("--workload", "short-in-short-out", "--requests", "20", "--max-tokens", "8"),
            *("--shard", "1/2", "--host-name", "host-1"),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while _counts(store)[1] < 1:  # host 1 joined: its run row is the group's
            assert first.poll() is None and time.monotonic() < deadline, _log(tmp_path, 1)
            time.sleep(0.1)
        probes = sim.stats()["requests"]  # host 1's calibration probes, before it joined
        second = subprocess.run(
            [
                *common,
                *("--workload", "long-in-long-out", "--requests", "400", "--max-tokens", "64"),
                *("--shard", "2/2", "--host-name", "host-2"),
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(first.pid, signal.SIGTERM)
        first.wait(30)
        if first.stdout is not None:
            first.stdout.close()
        log.close()
    assert second.returncode == 2, second.stderr
    errors = [line for line in second.stderr.splitlines() if line.startswith("servescope: ")]
    assert len(errors) == 1, second.stderr
    line = errors[0]
    assert line.startswith("servescope: error: --shard 2/2 (host-2): run mixed-c") and (
        "has another load on the group's first host (host-1): " in line
    ), line
    for phrase in (
        "--workload long-in-long-out here, short-in-short-out on the first host",
        "--requests 400 here, 20 on the first host",
        "--max-tokens 64 here, 8 on the first host",
    ):
        assert phrase in line, line
    # refused before sending its load: host 2 wrote no share and no row
    shards = store.read_df("SELECT host FROM run_shards")
    assert set(shards["host"]) <= {"host-1"}
    assert store.read_df("SELECT count(*) AS n FROM requests")["n"].iloc[0] == 0
    # host 2 sent only its calibration probes (as host 1 did before joining), none of its 400
    assert sim.stats()["requests"] - probes == probes <= 4
