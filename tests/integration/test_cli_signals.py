"""A stop signal to ``servescope`` reaches the processes it started (issue 10 item 11).

``servescope ui`` stopped with SIGTERM (a supervisor, ``kill``, a container stop) used to exit
and leave Streamlit running, holding the port. These tests start the real command, signal the
parent only, and check that no child is left and the port can be bound again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/task").is_dir(), reason="reads child processes from /proc (Linux)"
)


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    """What the next server on this port does: bind (SO_REUSEADDR, as Streamlit) and listen."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
        except OSError:
            return False
        return True


#: every child process the tests saw, killed at the end of each test (a failing test, or the
#: bug itself, must not leave a Streamlit or a sim running)
_SEEN: set[int] = set()


def children(pid: int) -> set[int]:
    """The live child processes of ``pid`` (from /proc)."""
    out: set[int] = set()
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError):
                out.update(int(p) for p in (task / "children").read_text().split())
    _SEEN.update(out)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def alive(pid: int) -> bool:
    """Running (a zombie, or a pid no longer there, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@contextlib.contextmanager
def servescope(tmp_path: Path, *args: str) -> Iterator[subprocess.Popen[str]]:
    """``servescope ARGS`` as a real process (its own session, like a supervisor's child);
    whatever it leaves behind is killed at the end, so a failing test leaks nothing."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    env["SERVESCOPE_DB"] = f"duckdb:///{tmp_path / 'signals.duckdb'}"
    env["SERVESCOPE_SPOOL_DIR"] = str(tmp_path / "spool")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", *args],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        children(proc.pid)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
        for pid in _SEEN:  # what the command left behind (the bug this file is about)
            if alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        _SEEN.clear()
        with contextlib.suppress(ProcessLookupError):  # its session, should any remain
            os.killpg(proc.pid, signal.SIGKILL)


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _stop_and_check(proc: subprocess.Popen[str], port: int, kids: set[int]) -> int:
    """SIGTERM the parent only; it must exit, leave no child, and free the port."""
    assert kids, "the command started no child process"
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=30)
    wait_for(lambda: not any(alive(k) for k in kids), 15, "the children to exit")
    wait_for(lambda: port_is_free(port), 15, f"port {port} to be free")
    return rc


def test_sigterm_to_ui_stops_streamlit_and_frees_the_port(tmp_path: Path) -> None:
    port = free_port()
    with servescope(tmp_path, "ui", "--port", str(port)) as proc:
        wait_for(lambda: _healthy(port), 90, "Streamlit's /_stcore/health")
        kids = children(proc.pid)
        assert any("streamlit" in cmdline(k) for k in kids), [cmdline(k) for k in kids]
        assert _stop_and_check(proc, port, kids) == 0
        # and the next `servescope ui` on that port starts
    with servescope(tmp_path, "ui", "--port", str(port)) as again:
        wait_for(lambda: _healthy(port), 90, "the second dashboard")
        assert _stop_and_check(again, port, children(again.pid)) == 0


def test_sigterm_to_demo_stops_its_simulated_engine(tmp_path: Path) -> None:
    """While the demo measures, a SIGTERM stops it and the sim process it started."""
    with servescope(tmp_path, "demo", "--no-ui", "--quiet") as proc:
        sims: set[int] = set()

        def a_sim_runs() -> bool:
            sims.update(k for k in children(proc.pid) if " sim " in cmdline(k))
            return bool(sims) and proc.poll() is None

        wait_for(a_sim_runs, 90, "the demo's sim process")
        sim_port = int(cmdline(next(iter(sims))).split("--port ")[1].split()[0])
        wait_for(lambda: not port_is_free(sim_port), 60, "the sim to listen")
        # stopped as Ctrl-C stops it, with SIGTERM's exit status (128 + 15)
        assert _stop_and_check(proc, sim_port, children(proc.pid)) == 143
        assert proc.stderr is not None
        assert "servescope: interrupted (SIGTERM)" in proc.stderr.read()


def test_sigterm_to_demo_dashboard_stops_streamlit(tmp_path: Path) -> None:
    """The demo's dashboard (after an already-filled store) forwards the signal too."""
    from services.commands import demo
    from store import ingest
    from store.lifecycle import open_store

    store = open_store(f"duckdb:///{tmp_path / 'signals.duckdb'}")
    for engine in demo.ENGINES:
        for c in demo.LEVELS:
            ingest.add_run(store, {"run_id": f"demo-{engine.key}-c{c}", "status": "completed"})
    store.dispose()
    port = free_port()
    with servescope(tmp_path, "demo", "--port", str(port), "--quiet") as proc:
        wait_for(lambda: _healthy(port), 90, "the demo's dashboard")
        assert _stop_and_check(proc, port, children(proc.pid)) == 0


def test_a_second_signal_while_the_demo_stops_its_sim_still_kills_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two signals in a row (a supervisor's SIGTERM, then a user's Ctrl-C): the second lands
    while running_sim waits for its sim to exit. That wait is made to raise here, as the
    second signal would, and the sim process must still be gone."""
    from services.commands import demo

    engine = demo.DemoEngine("sig", "H100-SXM-80GB", "llama-3.1-8b", "signal test")
    real_wait = subprocess.Popen.wait
    sims: list[int] = []

    def wait(self: subprocess.Popen[str], timeout: float | None = None) -> int:
        if timeout is not None and self.pid in sims:  # the polite wait after terminate()
            raise KeyboardInterrupt("the second signal")
        return real_wait(self, timeout)

    with (
        pytest.raises(KeyboardInterrupt, match="the second signal"),
        demo.running_sim(engine),
    ):
        sims.extend(k for k in children(os.getpid()) if " sim " in cmdline(k))
        assert sims, "no sim child found"
        monkeypatch.setattr(subprocess.Popen, "wait", wait)
        raise KeyboardInterrupt("the first signal")
    monkeypatch.undo()
    try:
        wait_for(lambda: not alive(sims[0]), 10, "the sim to be gone")
    finally:
        if alive(sims[0]):
            os.kill(sims[0], signal.SIGKILL)
