"""`servescope` — the command line.

Subcommands are registered by the modules that own them (``register(subparsers)``); this file
only builds the parser, sets up logging and turns ServeScope errors into one clear line.

Signals: SIGTERM and SIGHUP stop every command the way Ctrl-C does (``finally`` blocks run, so
the child processes a command started — the demo's sims, the load generator's workers — are
stopped and what was measured is kept); the exit code is then 128 + the signal's number (130,
143, 129). ``ui`` (and ``demo``'s dashboard) forward SIGINT, SIGTERM and SIGHUP to Streamlit,
wait for it (killing it after ``CHILD_STOP_TIMEOUT_S``), and exit 0: its port is free when
``servescope`` exits. ``watch`` and ``bench`` handle the signals themselves (flush, save).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import settings
from errors import ExitCode, InputError, ServeScopeError

if TYPE_CHECKING:
    from store.db import Store

ROOT = Path(__file__).resolve().parent

#: Signals that stop a command (as Ctrl-C does) and that ``ui`` forwards to Streamlit.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: How long a child gets to exit after the stop signal was forwarded, before it is killed.
CHILD_STOP_TIMEOUT_S = 10.0


def _db_commands(sub: argparse._SubParsersAction) -> None:
    db = sub.add_parser("db", help="store maintenance: info, runs, migrate, ingest-spool, prepare")
    db.add_argument("--db", help="store URL (default: $SERVESCOPE_DB or the DuckDB file)")
    actions = db.add_subparsers(dest="db_action", required=True)
    actions.add_parser("info", help="print the store URL and row counts per table")
    runs = actions.add_parser("runs", help="list the stored runs, newest first (id, name, …)")
    runs.add_argument(
        "--limit", type=int, default=50, metavar="N", help="at most N runs (default 50)"
    )
    actions.add_parser("migrate", help="bring the schema up to date and seed the catalog")
    spool = actions.add_parser(
        "ingest-spool", help="store the batches spooled while the store was locked"
    )
    spool.add_argument(
        "--legacy",
        action="store_true",
        help="also store old-format batches (they do not record their store) into this store",
    )
    prepare = actions.add_parser(
        "prepare",
        help="compute run summaries (and large runs' page views) now, so first views are quick",
        description="Compute and keep each run's summary, and the Latency/Memory page views of "
        "runs of 500k+ requests (import and bench do this for their own runs; use this for "
        "runs written another way, or after an upgrade). Cheap for runs already prepared.",
    )
    prepare.add_argument(
        "run_ids",
        nargs="*",
        metavar="RUN_ID",
        help="space-separated run ids (default: every run); an unknown id is an error and "
        "nothing is prepared",
    )
    db.set_defaults(func=_run_db)


def _run_db(args: argparse.Namespace) -> int:
    from store import migrations, queries_admin
    from store.db import Store

    store = Store.open(args.db)
    if args.db_action == "migrate":
        print(f"{store.url}: schema version {migrations.migrate(store)}")
    elif args.db_action == "ingest-spool":
        return _ingest_spool(store, legacy=args.legacy)
    elif args.db_action == "runs":
        _print_runs(store, args.limit)
    elif args.db_action == "prepare":
        from services.commands import prepare
        from store import data_queries

        if args.run_ids:
            known = data_queries.existing_run_ids(store, args.run_ids)
            unknown = [r for r in dict.fromkeys(args.run_ids) if r not in known]
            if unknown:
                raise InputError(
                    f"{len(unknown)} run id(s) not in {store.url}: {', '.join(unknown)}; "
                    "nothing was prepared",
                    hint="`servescope db runs` lists the stored runs",
                )
        ids = list(dict.fromkeys(args.run_ids)) or queries_admin.run_ids(store)
        if not prepare.prepare(store, ids):
            print(
                f"servescope db prepare: {store.url} refused the writes (locked?)", file=sys.stderr
            )
            return ExitCode.PARTIAL
        print(f"prepared {len(ids)} run(s) in {store.url}")
    else:
        print(f"store: {store.url}")
        for table, count in queries_admin.table_counts(store).items():
            print(f"  {table:<22} {count:>12,}")
    return 0


#: where spool files went before they recorded their store (relative to the working directory)
_OLD_SPOOL_DIR = Path("data/spool")


def _ingest_spool(store: Store, *, legacy: bool) -> int:
    """``db ingest-spool``: this store's batches from its spool folder (and the old shared
    ``data/spool``); says what it left for other stores, and where."""
    from store import ingest
    from store.db import location_spool_dir

    own = store.identity().spool_dir
    extra = [_OLD_SPOOL_DIR]
    if store.dialect not in ("duckdb", "sqlite"):
        # a server store's batches spooled while its id was unknown: its location's folder
        extra.insert(0, location_spool_dir(store.location))
    folders = [own] + [f for f in extra if f.is_dir() and f.resolve() != own.resolve()]
    total = ingest.SpoolReport(own)
    lines: list[str] = []
    for folder in folders:
        report = ingest.ingest_spool(store, folder, legacy=legacy)
        total.add(report)
        for other, n in sorted(report.others.items()):
            lines.append(f"  left {n} batch(es) of {other} in {folder.resolve()}")
        if report.legacy:
            lines.append(
                f"  left {report.legacy} old-format batch(es) in {folder.resolve()}: they do not "
                "record their store; add --legacy to store them into this one"
            )
    print(
        f"ingested {total.rows} spooled rows ({total.batches} batch(es)) into {store.url} "
        f"from {own.resolve()}"
    )
    for line in lines:
        print(line)
    if total.rejected:
        print(
            f"servescope db ingest-spool: {total.rejected} batch(es) refused by the store, "
            "kept as *.rejected (see the log)",
            file=sys.stderr,
        )
        return ExitCode.PARTIAL
    return 0


def _print_runs(store: Store, limit: int) -> None:
    """``servescope db runs``: one line per run, newest first."""
    import time

    from store import data_queries

    if limit < 1:
        raise InputError(f"--limit must be ≥ 1, got {limit}")
    df = data_queries.runs_listing(store, limit=limit)
    if df.empty:
        print(f"no runs in {store.url} (servescope bench, import or demo add some)")
        return
    print(f"{'run_id':<36} {'started (UTC)':<16} {'source':<12} {'requests':>9}  name")
    for row in df.to_dict("records"):
        when = "-"
        for key in ("started_at", "created_at"):
            value = row.get(key)
            if isinstance(value, int | float) and value == value:  # not NaN
                when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(float(value)))
                break
        print(
            f"{row['run_id']!s:<36} {when:<16} {row.get('source') or '-'!s:<12} "
            f"{int(row.get('requests') or 0):>9,}  {row.get('name') or ''!s}"
        )
    print(f"{len(df)} run(s) shown" + (f" (--limit {limit})" if len(df) == limit else ""))


def _ui_command(sub: argparse._SubParsersAction) -> None:
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
        str(ROOT / "ui" / "entry" / "streamlit_app.py"),
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
    """Install ``handler`` for :data:`STOP_SIGNALS` (main thread only), restore on exit."""
    previous: dict[signal.Signals, Any] = {}
    try:
        for sig in STOP_SIGNALS:
            with contextlib.suppress(ValueError):  # not the main thread: leave them
                previous[sig] = signal.signal(sig, handler)
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised as Ctrl-C is: ``finally`` blocks stop the children a command
    started and collectors flush; ``servescope`` then exits 128 + ``signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signal.Signals(signum).name}")
        self.signum = signum


def _stop_as_interrupt(signum: int, frame: FrameType | None) -> None:
    raise Stopped(signum)


def _demo_command(sub: argparse._SubParsersAction) -> None:
    from services.commands import demo

    p = sub.add_parser(
        "demo",
        help="measure simulated engines into the store, then open the dashboard",
        description=demo.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--no-ui", action="store_true", help="fill the store, do not open the UI")
    p.add_argument("--port", type=int, default=8501, help="dashboard port (default 8501)")
    p.add_argument("--db", help="store URL (default: $SERVESCOPE_DB or the DuckDB file)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    from services.commands import demo

    demo.fill(args.db, progress=not args.quiet)
    if args.no_ui:
        return 0
    return run_ui(argparse.Namespace(host="127.0.0.1", port=args.port, db=args.db))


def build_parser() -> argparse.ArgumentParser:
    from services.commands import bench, export, imports, sim, watch

    parser = argparse.ArgumentParser(
        prog="servescope",
        description="Measure, import and explain LLM serving performance.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log more (and SQL, with -vv)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sim.register(sub)
    bench.register(sub)
    imports.register(sub)
    export.register(sub)
    watch.register(sub)
    _demo_command(sub)
    _ui_command(sub)
    _db_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    previous: dict[signal.Signals, Any] = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(ValueError):  # main() called off the main thread (tests)
            previous[sig] = signal.signal(sig, _stop_as_interrupt)
    try:
        return int(args.func(args) or 0)
    except ServeScopeError as exc:
        print(f"servescope: error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"  hint: {exc.hint}", file=sys.stderr)
        return ExitCode.ERROR
    except KeyboardInterrupt as exc:
        # Ctrl-C: 130; SIGTERM: 143; SIGHUP: 129 (bench's BenchInterrupted carries its signal too)
        signum = int(getattr(exc, "signum", signal.SIGINT))
        print(f"servescope: interrupted ({signal.Signals(signum).name})", file=sys.stderr)
        return 128 + signum
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


if __name__ == "__main__":
    sys.exit(main())
