"""``servescope ui``: the dashboard (Streamlit) in the foreground.

The stop signals (``errors.STOP_SIGNALS``: Ctrl-C, SIGTERM, SIGHUP) are forwarded to Streamlit,
which is waited for (killed after :data:`CHILD_STOP_TIMEOUT_S`); the command then exits 0 and
the dashboard's port is free. ``servescope demo`` opens the dashboard the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any

import settings
from errors import STOP_SIGNALS
from services.commands import PROJECT_ROOT

#: How long a child gets to exit after the stop signal was forwarded, before it is killed.
CHILD_STOP_TIMEOUT_S = 10.0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``ui`` subcommand to cli.py's parser."""
    ui = sub.add_parser("ui", help="open the dashboard (Streamlit) on 127.0.0.1")
    ui.add_argument("--port", type=int, default=8501)
    ui.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1; binding elsewhere exposes the dashboard)",
    )
    ui.add_argument("--db", help="store URL (default: $SERVESCOPE_DB or the DuckDB file)")
    ui.set_defaults(func=run_ui)


def run_ui(args: argparse.Namespace) -> int:
    """Run Streamlit in the foreground until Ctrl-C, SIGTERM or SIGHUP, which are forwarded to
    it (so it stops and frees its port before this returns); 0 when stopped that way."""
    env = dict(os.environ)
    if getattr(args, "db", None):
        env["SERVESCOPE_DB"] = args.db
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(PROJECT_ROOT / "ui" / "entry" / "streamlit_app.py"),
        "--server.address",
        args.host,
        "--server.port",
        str(args.port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--global.developmentMode",
        "false",
        "--client.toolbarMode",
        "minimal",
    ]
    print(
        f"ServeScope dashboard on http://{args.host}:{args.port}  (store: {settings.db_url(env)})"
    )
    return run_child(cmd, env=env)


class _Forwarded(BaseException):
    """Raised in the main thread when a stop signal was forwarded to the child."""


def run_child(cmd: Sequence[str], *, env: dict[str, str] | None = None) -> int:
    """Run ``cmd`` in the foreground, forwarding SIGINT, SIGTERM and SIGHUP to it.

    Returns the child's exit status, or 0 when it ended after a forwarded stop signal. A child
    still running ``CHILD_STOP_TIMEOUT_S`` after the signal (or at a second signal) is killed.
    Whatever ends this function (an exception included) ends the child first: it is never
    left behind holding its port.
    """
    proc = subprocess.Popen(list(cmd), env=env)

    def forward(signum: int, frame: FrameType | None) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signum)
        raise _Forwarded

    try:
        with _signal_handlers(forward):
            try:
                return proc.wait()
            except _Forwarded:
                pass
            with contextlib.suppress(_Forwarded, subprocess.TimeoutExpired):
                proc.wait(timeout=CHILD_STOP_TIMEOUT_S)
            return 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@contextlib.contextmanager
def _signal_handlers(handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """Install ``handler`` for ``errors.STOP_SIGNALS`` (main thread only), restore on exit."""
    previous: dict[signal.Signals, Any] = {}
    try:
        for sig in STOP_SIGNALS:
            with contextlib.suppress(ValueError):  # not the main thread: leave them
                previous[sig] = signal.signal(sig, handler)
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
