"""``servescope sweep`` with real engines: the sim measured end to end, launch failures recorded
with their log tail (never a crash of the sweep), ``--resume``, a stop signal, ``--dry-run``."""

from __future__ import annotations

import io
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

import cli
from analysis.sweep_spec import expand, parse_spec
from services.commands.sweep import headline, run_sweep, summary_table
from store import runs_table
from store import sweep_records as records
from store.db import Store
from store.lifecycle import open_store
from store.sweeps import sweep_points, sweep_record

REPO = Path(__file__).resolve().parents[2]
PY = shlex.quote(sys.executable)


def spec_of(engine: str, grid: str = "", load: str = "levels = [4]") -> str:
    return textwrap.dedent(
        f"""
        name = "it"
        [engine]
        {engine}
        [grid]
        {grid}
        [load]
        workload = "short-in-short-out"
        kind = "rate"
        {load}
        requests = 10
        max_tokens = 16
        seed = 3
        [slo]
        profile = "interactive-chat"
        """
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(f"duckdb:///{tmp_path / 's.duckdb'}")
    yield s
    s.dispose()


def _status(store: Store, sweep_id: str) -> str:
    record = sweep_record(store, sweep_id)
    assert record is not None
    return str(record["status"])


def sweep(store: Store, text: str, **kw: object) -> tuple[str, str]:
    out = io.StringIO()
    sweep_id, _ = run_sweep(parse_spec(text), store, progress=False, out=out, **kw)  # type: ignore[arg-type]
    return sweep_id, out.getvalue()


def test_sim_points_are_launched_measured_stopped_and_recorded(store: Store) -> None:
    text = spec_of(
        'template = "sim"\nmodel = "llama-3.1-8b"\n'
        'args = ["--time-scale", "4"]\nstartup_timeout_s = 60\nstop_timeout_s = 10',
        grid="kv_memory_fraction = [0.01, 0.9]",
        load="levels = [2, 8]",
    )
    sweep_id, out = sweep(store, text)
    points = sweep_points(store, sweep_id)
    by_kv = {r["params"]["kv_memory_fraction"]: r for r in points.to_dict("records")}
    # the model does not fit in 1 % of the GPU: the sim refuses to start; the sweep goes on
    bad = by_kv[0.01]
    assert bad["status"] == "failed_to_start", bad
    assert "exited at once with code 2" in bad["error"]
    assert "does not fit" in bad["log_tail"]
    ok = by_kv[0.9]
    assert ok["status"] == "completed", ok
    assert ok["framework"] == "sim"
    assert ok["launch_command"].startswith(sys.executable)
    assert "--kv-memory-fraction 0.9" in ok["launch_command"]
    assert ok["runs_used"] == 2 and len(ok["search"]) == 2
    assert ok["capacity_kind"] == "rate"
    assert ok["capacity"] is not None or ok["capacity_note"]
    assert "listening on" in ok["log_tail"]  # the engine's own log, kept
    assert _status(store, sweep_id) == "completed"

    runs = runs_table.list_runs(store, limit=50)
    mine = [runs_table.run_record(store, r) for r in runs["run_id"]]
    assert len(mine) == 2
    for run in mine:
        assert run is not None
        assert run["sweep_id"] == sweep_id
        assert run["status"] == "completed"
        assert run["framework"] == "sim"
        assert run["engine_params"] == {"kv_memory_fraction": 0.9}
        assert run["client_params"]["launch_command"] == ok["launch_command"]
        assert run["client_params"]["sweep_point"]["point_id"] == ok["point_id"]
    # every engine was stopped: its port is free again
    port = int(ok["launch_command"].split("--port ")[1].split()[0])
    with socket.socket() as s:  # nothing listens (TIME_WAIT connections aside)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
    table = summary_table(store, sweep_id)
    assert "failed_to_start" in table and "completed" in table
    assert headline(store, sweep_id).startswith(("Recommended: ", "No recommendation"))
    assert f"sweep {sweep_id}" in out


def _busy_port() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


@pytest.mark.parametrize(
    ("engine", "status", "error", "tail"),
    [
        (
            'command = "servescope-no-such-engine --port {port}"',
            "failed_to_start",
            "command not found: servescope-no-such-engine",
            "command not found",
        ),
        (
            f'command = "{PY} -c \'import sys; print(\\"boom\\"); sys.exit(3)\'"',
            "failed_to_start",
            "exited at once with code 3: boom",
            "boom",
        ),
        (
            f'command = "{PY} -c \'import time; print(\\"loading\\", flush=True); '
            "time.sleep(60)'\"\nstartup_timeout_s = 1.5\nstop_timeout_s = 2",
            "health_timeout",
            "not healthy within 1.5 s",
            "loading",
        ),
        (
            f'command = "{PY} -c \'import sys; print(\\"CUDA out of memory. Tried to '
            'allocate 2 GiB\\"); sys.exit(1)\'"',
            "oom",
            "out of memory at start",
            "CUDA out of memory",
        ),
        ("PORT", "failed_to_start", "port in use", "already in use"),
    ],
    ids=["not-found", "exits-at-once", "health-timeout", "oom", "port-in-use"],
)
def test_launch_failures_are_recorded_with_their_log_tail(
    store: Store, engine: str, status: str, error: str, tail: str
) -> None:
    busy = _busy_port()
    try:
        if engine == "PORT":
            engine = f'command = "{PY} -m cli sim --port {{port}}"\nport = {busy.getsockname()[1]}'
        started = time.monotonic()
        sweep_id, _ = sweep(store, spec_of(engine))
        assert time.monotonic() - started < 30
    finally:
        busy.close()
    [row] = sweep_points(store, sweep_id).to_dict("records")
    assert row["status"] == status, row
    assert error in row["error"]
    assert tail in row["log_tail"]
    assert row["launch_command"]
    assert _status(store, sweep_id) == "completed"  # the sweep itself ran
    assert store.read_df("SELECT COUNT(*) AS n FROM runs")["n"][0] == 0


def test_resume_measures_only_what_is_left(store: Store) -> None:
    text = spec_of(
        f"command = \"{PY} -c 'import sys; sys.exit(3)' --slots {{max_batch_size}}\"",
        grid="max_batch_size = [1, 2, 3]",
    )
    spec = parse_spec(text)
    p1, p2, p3 = expand(spec)
    # an interrupted sweep: point 1 done, point 2 cut by a signal, point 3 never started
    records.start_sweep(store, {"sweep_id": "it-old", "name": "it", "spec": spec.to_json()})
    for p, status in ((p1, "completed"), (p2, "interrupted")):
        records.record_point(
            store,
            {"sweep_id": "it-old", "point_id": p.point_id, "repeat": 0, "params": dict(p.params),
             "status": status, "started_at": time.time()},
        )  # fmt: skip
    records.finish_sweep(store, "it-old", "interrupted")
    assert records.completed_point_ids(store, "it-old") == {(p1.point_id, 0)}

    sweep_id, out = sweep(store, text, resume="latest")
    assert sweep_id == "it-old"
    assert "2 of 3 point run(s) to measure (1 already done)" in out
    rows = {r["point_id"]: r for r in sweep_points(store, sweep_id).to_dict("records")}
    assert rows[p1.point_id]["status"] == "completed"  # untouched
    assert rows[p2.point_id]["status"] == "failed_to_start"
    assert rows[p3.point_id]["status"] == "failed_to_start"
    assert _status(store, sweep_id) == "completed"
    # nothing left: a second resume of the same id measures nothing
    _, again = sweep(store, text, resume=sweep_id)
    assert "0 of 3 point run(s) to measure (3 already done)" in again


def test_resume_without_an_interrupted_sweep_says_so(store: Store) -> None:
    from errors import InputError

    with pytest.raises(InputError, match="no interrupted sweep named 'it'"):
        sweep(store, spec_of('command = "x --port {port}"'), resume="latest")


def test_sigterm_stops_the_engine_and_records_the_point_interrupted(tmp_path: Path) -> None:
    db = f"duckdb:///{tmp_path / 's.duckdb'}"
    pid_file = tmp_path / "engine.pid"
    spec = tmp_path / "spec.toml"
    spec.write_text(
        spec_of(
            f'command = "{PY} -c \'import os, time; open(\\"{pid_file}\\", \\"w\\")'
            ".write(str(os.getpid())); time.sleep(120)'\"\nstartup_timeout_s = 100\n"
            "stop_timeout_s = 5"
        )
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "sweep", str(spec), "--db", db, "--quiet"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the engine never started"
        time.sleep(0.1)
    engine_pid = int(pid_file.read_text())
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, (out, err)
    with pytest.raises(ProcessLookupError):  # the engine was stopped with the sweep
        os.kill(engine_pid, 0)
    store = open_store(db)
    try:
        [sw] = store.read_df("SELECT sweep_id, status FROM sweeps").to_dict("records")
        assert sw["status"] == "interrupted"
        [row] = sweep_points(store, sw["sweep_id"]).to_dict("records")
        assert row["status"] == "interrupted"
        assert row["ended_at"] is not None
    finally:
        store.dispose()
    assert f"--resume {sw['sweep_id']}" in out


def test_dry_run_prints_every_launch_and_stores_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "never.duckdb"
    example = str(REPO / "examples" / "sim-sweep.toml")
    rc = cli.main(["sweep", example, "--dry-run", "--db", f"duckdb:///{db}"])
    assert rc == 0
    out = capsys.readouterr().out
    assert out.count("$ ") == 4
    assert "-m cli sim --host 127.0.0.1 --port PORT --model llama-3.1-8b" in out
    assert "capacity search over rate" in out
    assert "nothing launched, nothing stored" in out
    assert not db.exists()


def test_a_bad_spec_exits_2_and_stores_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "bad.toml"
    spec.write_text(spec_of('template = "llamacpp"\nmodel = "m"', grid="block_size = [16, 32]"))
    db = tmp_path / "never.duckdb"
    assert cli.main(["sweep", str(spec), "--db", f"duckdb:///{db}"]) == 2
    err = capsys.readouterr().err
    assert "the llamacpp template cannot express block_size" in err
    assert "it accepts: max_batch_size, ctx_size, max_batched_tokens" in err
    assert not db.exists()


def test_efficient_mode_measures_the_best_prior_first_and_records_priors(store: Store) -> None:
    text = (
        spec_of(
            'template = "sim"\nmodel = "llama-3.1-8b"\n'
            'args = ["--time-scale", "4"]\nstartup_timeout_s = 60\nstop_timeout_s = 10',
            grid="max_batch_size = [1, 2, 64]",
            load="levels = [2, 8]",
        )
        + '\n[sweep]\nmode = "efficient"\n'
    )
    sweep_id, out = sweep(store, text)
    rows = sweep_points(store, sweep_id)
    assert len(rows) == 3
    assert rows["prior"].notna().all()
    ran = rows[rows["status"] != "pruned"].sort_values("started_at")
    # visited best prior first: the 64-sequence batch has the highest prior
    assert ran.iloc[0]["params"]["max_batch_size"] == 64
    priors = {r["params"]["max_batch_size"]: r["prior"] for r in rows.to_dict("records")}
    assert priors[64] > priors[2] > priors[1]
    for rec in rows[rows["status"] == "pruned"].to_dict("records"):
        assert rec["error"].startswith("pruned: prior")
    assert "efficient: measured" in out
    # pruned points were decided without running: not failures of the sweep
    from services.commands.sweep import exit_status

    assert set(ran["status"]) == {"completed"}
    assert exit_status(store, sweep_id) == 0


def test_an_endpoint_already_running_sweeps_client_params_only(store: Store) -> None:
    from sim.engine import EngineConfig
    from sim.server import start_in_thread

    handle = start_in_thread(EngineConfig.from_names("H100-SXM-80GB", "llama-3.1-8b"), time_scale=4)
    try:
        text = spec_of(f'endpoint = "{handle.url}"', grid="max_tokens = [8, 16]")
        sweep_id, _ = sweep(store, text)
    finally:
        handle.stop()
    rows = sweep_points(store, sweep_id)
    assert sorted(p["max_tokens"] for p in rows["params"]) == [8, 16]
    assert set(rows["status"]) == {"completed"}
    assert set(rows["launch_command"]) == {f"(endpoint {handle.url})"}
    runs = store.read_df("SELECT client_params, engine_params FROM runs ORDER BY run_id")
    assert len(runs) == 2
    assert runs["client_params"].str.contains('"max_tokens": 8').sum() == 1


# --- issue 24: a resumed point is a new attempt; every exit stops the engine; no secret leaks ---

RESUME_SPEC = """
name = "resume"
[engine]
template = "sim"
model = "llama-3.1-8b"
args = ["--time-scale", "1", "--seed", "0"]
startup_timeout_s = 60
stop_timeout_s = 10
[grid]
max_batch_size = [1, 8]
[load]
workload = "short-in-short-out"
kind = "concurrency"
levels = [1, 8]
requests = 20
max_tokens = 16
seed = 3
[slo]
profile = "code-completion"
"""


def _completed_runs(path: Path) -> int:
    """Completed runs in the DuckDB file a running sweep writes (0 while it holds the file):
    the sweep opens it only for each write and retries a file another process holds."""
    try:
        with duckdb.connect(str(path), read_only=True) as con:
            found = con.execute("SELECT count(*) FROM runs WHERE status = 'completed'").fetchone()
    except duckdb.Error:
        return 0
    return int(found[0]) if found else 0


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.slow
def test_kill_9_mid_point_then_resume_measures_it_again_as_a_new_attempt(tmp_path: Path) -> None:
    """Issue 24 case 1/2: kill -9 of a sweep during its second point; --resume stops the engine
    left behind, keeps the interrupted attempt apart, measures the point again in new runs, and
    recommends what an uninterrupted sweep of the same spec and seed recommends."""
    spec_path = tmp_path / "resume.toml"
    spec_path.write_text(RESUME_SPEC)
    db = f"duckdb:///{tmp_path / 'killed.duckdb'}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "sweep", str(spec_path), "--db", db, "--quiet"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    launches = []
    while len(launches) < 2:  # the second point's launch line
        line = proc.stdout.readline()
        assert line, "the sweep ended before its second point"
        if ": $ " in line:
            launches.append(line)
    port = int(launches[1].split("--port ")[1].split()[0])
    deadline = time.monotonic() + 60
    while not _listening(port):
        assert time.monotonic() < deadline, "the second engine never listened"
        time.sleep(0.05)
    # into the point's load: kill once its first level's run is stored completed (the first
    # point's two and this one's c1), while its c8 level runs (~0.5 s at time scale 1); a fixed
    # sleep raced the point's end on a quiet machine
    while _completed_runs(tmp_path / "killed.duckdb") < 3:
        assert proc.poll() is None, "the sweep ended before its second point's first level"
        assert time.monotonic() < deadline, "the second point's first level never ended"
        time.sleep(0.02)
    proc.kill()
    proc.wait(timeout=30)
    proc.stdout.close()
    assert _listening(port), "the engine should outlive a sweep killed with -9"

    store = open_store(db)
    try:
        [sweep_id] = store.read_df("SELECT sweep_id FROM sweeps")["sweep_id"].tolist()
        assert _status(store, sweep_id) == "running"
        left = {r["point_id"]: r for r in records.left_running(store, sweep_id)}
        [(point_id, row)] = left.items()
        pgid = int(row["engine_pgid"])
        killed_runs = set(store.read_df("SELECT run_id FROM runs")["run_id"])

        resumed, out = sweep(store, RESUME_SPEC, resume="latest")
        assert resumed == sweep_id
        assert f"stopped the engine left by sweep {sweep_id} (process group {pgid})" in out
        assert _gone(pgid) and not _listening(port)
        points = {r["point_id"]: r for r in sweep_points(store, sweep_id).to_dict("records")}
        point = points[point_id]
        assert point["status"] == "completed" and point["attempt"] == 2
        [earlier] = json.loads(point["attempts"])
        assert earlier["attempt"] == 1 and earlier["status"] == "interrupted"
        assert "killed" in earlier["error"]
        assert earlier["run_ids"], "the interrupted attempt's runs are kept"
        new_runs = [p["run_id"] for p in point["search"]]
        assert all(r.endswith(("-c1", "-c8")) and "-a2-" in r for r in new_runs)
        assert not set(new_runs) & killed_runs  # measured again in its own runs
        runs = store.read_df("SELECT run_id, status, started_at FROM runs")
        by_id = runs.set_index("run_id")
        # kept as they ended: a level it finished stays completed, none is left running
        assert set(by_id.loc[earlier["run_ids"], "status"]) <= {"completed", "interrupted"}
        for run_id in new_runs:
            assert by_id.loc[run_id, "status"] == "completed"
            reqs = store.read_df(
                "SELECT sent_at, status FROM requests WHERE run_id = :r", {"r": run_id}
            )
            assert len(reqs) == 20 and set(reqs["status"]) == {"ok"}
            assert (reqs["sent_at"] >= by_id.loc[run_id, "started_at"] - 1e-6).all()
        assert _status(store, sweep_id) == "completed"
        recommended = headline(store, sweep_id)
        capacities = {p: r["capacity"] for p, r in points.items()}
    finally:
        store.dispose()

    clean = open_store(f"duckdb:///{tmp_path / 'clean.duckdb'}")
    try:
        clean_id, _ = sweep(clean, RESUME_SPEC)
        assert headline(clean, clean_id) == recommended
        assert recommended.startswith("Recommended: max_batch_size=8")
        clean_points = sweep_points(clean, clean_id).set_index("point_id")
        assert clean_points.loc[point_id, "capacity"] == capacities[point_id]
    finally:
        clean.dispose()


def test_a_load_bench_refuses_is_refused_before_any_launch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 24 case 2: kind = "concurrency" with arrival = "constant" passed parsing, launched
    the engine and failed inside bench; now the whole spec is checked first."""
    spec = tmp_path / "bad.toml"
    spec.write_text(
        spec_of(
            f'command = "{PY} -m cli sim --port {{port}}"',
            load='levels = [2]\nkind = "concurrency"\narrival = "constant"',
        ).replace('kind = "rate"\n', "")
    )
    db = tmp_path / "never.duckdb"
    for extra in (["--dry-run"], ["--db", f"duckdb:///{db}", "--log-dir", str(tmp_path / "logs")]):
        assert cli.main(["sweep", str(spec), *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("servescope: error:") == 1
        assert "[load] of point" in err and "--arrival applies to --rate runs" in err
    assert not db.exists() and not (tmp_path / "logs").exists()


def test_a_failure_after_launch_stops_the_engine_and_ends_nothing_running(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 24 case 2: an error inside the load (not an engine failure) used to escape with the
    engine still listening and the sweep and point rows ``running``."""
    from errors import ConfigError
    from services.commands import sweep as runner

    def broken(*_: object, **__: object) -> None:
        raise ConfigError("the load broke")

    monkeypatch.setattr(runner, "run_bench", broken)
    text = spec_of(
        'template = "sim"\nmodel = "llama-3.1-8b"\nargs = ["--time-scale", "8"]\n'
        "startup_timeout_s = 60\nstop_timeout_s = 10"
    )
    with pytest.raises(ConfigError, match="the load broke"):
        sweep(store, text)
    [sweep_id] = store.read_df("SELECT sweep_id FROM sweeps")["sweep_id"].tolist()
    assert _status(store, sweep_id) == "failed"
    [row] = sweep_points(store, sweep_id).to_dict("records")
    assert row["status"] == "interrupted" and "the load broke" in row["error"]
    port = int(row["launch_command"].split("--port ")[1].split()[0])
    assert not _listening(port)
    # a failed sweep is resumable
    assert records.latest_resumable(store, "it") == sweep_id


@pytest.mark.slow  # a sweep process of its own: ~5–9 s on a loaded 2-core machine
def test_cleanup_stops_the_engine_of_a_sweep_killed_with_9(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"duckdb:///{tmp_path / 's.duckdb'}"
    pid_file = tmp_path / "engine.pid"
    spec = tmp_path / "spec.toml"
    spec.write_text(
        spec_of(
            f'command = "{PY} -c \'import os, time; open(\\"{pid_file}\\", \\"w\\")'
            ".write(str(os.getpid())); time.sleep(120)'\"\nstartup_timeout_s = 100\n"
            "stop_timeout_s = 5"
        )
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "sweep", str(spec), "--db", db, "--quiet"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, "the engine never started"
        time.sleep(0.05)
    engine_pid = int(pid_file.read_text())
    time.sleep(0.3)  # the engine's group is recorded right after the launch
    proc.kill()
    proc.wait(timeout=30)
    assert not _gone(engine_pid), "the engine outlives a sweep killed with -9"
    try:
        assert cli.main(["sweep", "--cleanup", "--db", db]) == 0
        out = capsys.readouterr().out
        assert f"(process group {engine_pid})" in out and "1 engine(s) stopped" in out
        assert _gone(engine_pid)
    finally:
        if not _gone(engine_pid):
            os.killpg(engine_pid, signal.SIGKILL)
    store = open_store(db)
    try:
        [sw] = store.read_df("SELECT sweep_id, status FROM sweeps").to_dict("records")
        assert sw["status"] == "interrupted"
        [row] = sweep_points(store, sw["sweep_id"]).to_dict("records")
        assert row["status"] == "interrupted" and "killed" in row["error"]
    finally:
        store.dispose()
    # nothing left: a second cleanup stops nothing
    assert cli.main(["sweep", "--cleanup", "--db", db]) == 0
    assert "0 engine(s) stopped" in capsys.readouterr().out


SECRETS = ("hf_SeCrEtEnV4242", "sk-SeCrEtFlAg4242", "SeCrEtEq4242", "SeCrEtNamed4242")


@pytest.mark.slow
def test_secrets_in_a_sweeps_env_and_args_are_never_shown_or_stored(tmp_path: Path) -> None:
    """Issue 24 case 3: an engine that prints its environment value and its arguments; the
    values reach neither --dry-run, -v output, launch commands, client_params, the spec, the
    stored log tails, nor any table of the store."""
    wrapper = (
        "import os, sys; print('token=' + os.environ['HF_TOKEN'], sys.argv[1:], flush=True); "
        "os.execv(sys.executable, [sys.executable, '-m', 'cli', 'sim', '--port', sys.argv[1], "
        "'--time-scale', '8'])"
    )
    spec = tmp_path / "secret.toml"
    spec.write_text(
        spec_of(
            f'command = "{PY} -c \\"{wrapper}\\" {{port}}"\n'
            f'env = {{ HF_TOKEN = "{SECRETS[0]}" }}\n'
            f'args = ["--api-key", "{SECRETS[1]}", "--hf-token={SECRETS[2]}", '
            f'"MY_SERVICE_TOKEN={SECRETS[3]}"]\nstartup_timeout_s = 60\nstop_timeout_s = 10',
            load="levels = [4]",
        )
    )
    db = tmp_path / "s.duckdb"
    outputs = []
    for extra in (["--dry-run"], ["--db", f"duckdb:///{db}"]):
        done = subprocess.run(
            [sys.executable, "-m", "cli", "-v", "sweep", str(spec), *extra],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode in (0, 3), done.stderr
        outputs.append(done.stdout + done.stderr)
    assert "HF_TOKEN=*** " in outputs[0] and "--api-key *** --hf-token=***" in outputs[0]
    logs = list((tmp_path / "sweeps").rglob("*.log"))
    assert logs and SECRETS[0] in logs[0].read_text()  # the engine did print them
    store = open_store(f"duckdb:///{db}")
    try:
        [row] = sweep_points(
            store, store.read_df("SELECT sweep_id FROM sweeps")["sweep_id"][0]
        ).to_dict("records")
        assert row["status"] == "completed", row
        assert (
            "token=***" in row["log_tail"]
            and "--api-key *** --hf-token=***" in row["launch_command"]
        )
        assert store.read_df("SELECT COUNT(*) AS n FROM runs")["n"][0] == 1
        tables = store.read_df(
            "select table_name from information_schema.tables where table_schema = 'main'"
        ).table_name
        pattern = "|".join(SECRETS)
        sql = " union all ".join(
            f"select '{name}' as tbl, count(*) as n from \"{name}\" t "
            "where regexp_matches(cast(t as varchar), :p)"
            for name in tables
        )
        hits = store.read_df(sql, {"p": pattern})
        assert hits.n.sum() == 0, hits[hits.n > 0].tbl.tolist()
        run_id = str(store.read_df("SELECT run_id FROM runs")["run_id"][0])
    finally:
        store.dispose()
    for fmt in ("csv", "vllm-json"):
        out = tmp_path / f"export.{fmt}"
        rc = cli.main(
            ["export", run_id, "--format", fmt, "--out", str(out), "--db", f"duckdb:///{db}"]
        )
        if rc == 0:
            outputs.append(out.read_text())
    for text in outputs:
        for secret in SECRETS:
            assert secret not in text


@pytest.mark.slow
def test_too_few_requests_are_inconclusive_and_the_printed_recommendation_has_the_caveat(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 24 case 12: a level's P99 from a dozen requests decided pass/fail, and the command
    printed a recommendation between two points /tune calls not separated, with no caveat."""
    from sim.engine import EngineConfig
    from sim.server import start_in_thread

    handle = start_in_thread(EngineConfig.from_names("H100-SXM-80GB", "llama-3.1-8b"), time_scale=8)
    db = f"duckdb:///{tmp_path / 's.duckdb'}"
    spec = tmp_path / "spec.toml"
    try:
        for profile in ("interactive-chat", "batch-summarisation"):  # P99 (needs 100), P90 (10)
            spec.write_text(
                spec_of(
                    f'endpoint = "{handle.url}"', grid="max_tokens = [8, 9]", load="levels = [20]"
                )
                .replace("requests = 10", "requests = 12")
                .replace("interactive-chat", profile)
            )
            assert cli.main(["sweep", str(spec), "--db", db, "--quiet"]) == 0
            out = capsys.readouterr().out
            if profile == "interactive-chat":
                assert "12 requests per level are too few to judge P99 (needs 100)" in out
                assert out.count("inconclusive: TTFT P99 from 12 samples (needs 100)") == 2
                assert "No recommendation: no completed point met the SLO at any load" in out
                assert "Recommended" not in out
            else:  # P90 from 12: judged; both pass every level, as equal as the page says
                assert "inconclusive" not in out
                assert "Recommended: max_tokens=8" in out
                assert "caveat: The top two are not separated" in out
    finally:
        handle.stop()


def test_the_printed_recommendation_carries_the_pages_caveat(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 24 case 12: two points within the noise: the command's output says what /tune
    says ("The top two are not separated"), under the headline."""
    from services.commands.sweep import caveats

    s = open_store(f"duckdb:///{tmp_path / 's.duckdb'}")
    try:
        spec = parse_spec(
            spec_of(
                'command = "x --port {port} --n {max_batch_size}"', grid="max_batch_size = [1, 2]"
            )
        )
        records.start_sweep(
            s, {"sweep_id": "it-1", "name": "it", "spec": spec.to_json(), "slo": "interactive-chat"}
        )
        for point, capacity in zip(expand(spec), (8.0, 8.2), strict=True):
            records.record_point(
                s,
                {"sweep_id": "it-1", "point_id": point.point_id, "repeat": 0,
                 "params": dict(point.params), "status": "completed", "capacity": capacity,
                 "capacity_kind": "rate"},
            )  # fmt: skip
        records.finish_sweep(s, "it-1", "completed")
        assert headline(s, "it-1").startswith("Recommended: max_batch_size=2")
        [caveat] = caveats(s, "it-1")
        assert caveat.startswith("caveat: The top two are not separated (within 5 % noise)")
    finally:
        s.dispose()
