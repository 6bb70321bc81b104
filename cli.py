"""`servescope` — the command line.

A parser only: each command lives in ``services.commands`` and registers its own subparser
(``register(subparsers)``, which sets ``func``); this file composes them, sets up logging and
turns ServeScope errors into one clear line (exit codes: ``errors.ExitCode``).

Signals: SIGTERM and SIGHUP stop every command the way Ctrl-C does (``finally`` blocks run, so
the child processes a command started — the demo's sims, the load generator's workers — are
stopped and what was measured is kept); the exit code is then 128 + the signal's number (130,
143, 129). ``ui`` (and ``demo``'s dashboard) forward SIGINT, SIGTERM and SIGHUP to Streamlit,
wait for it (killing it after ``services.commands.ui.CHILD_STOP_TIMEOUT_S``), and exit 0: its
port is free when ``servescope`` exits. ``watch`` and ``bench`` handle the signals themselves
(flush, save).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

from analysis.printable import PrintableFormatter
from errors import ExitCode, ServeScopeError

if TYPE_CHECKING:
    from services.views.report import ReportData


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised as Ctrl-C is: ``finally`` blocks stop the children a command
    started and collectors flush; ``servescope`` then exits 128 + ``signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signal.Signals(signum).name}")
        self.signum = signum


def _stop_as_interrupt(signum: int, frame: FrameType | None) -> None:
    raise Stopped(signum)


def _render_report(data: ReportData) -> str:
    """``servescope report``'s renderer: ``ui.report.render_html`` (the pages' own figure
    builders). cli.py composes it with ``services.commands.report``, which sits below ``ui/``
    and may not import it; imported here only when a report is written."""
    from ui.report import render_html

    return render_html(data)


def build_parser() -> argparse.ArgumentParser:
    """The ``servescope`` parser: every command's subparser, in the order ``--help`` lists them."""
    from services.commands import (
        bench,
        checklist,
        compare,
        db,
        demo,
        export,
        health,
        imports,
        plan,
        quality,
        report,
        sim,
        sweep,
        ui,
        verify,
        watch,
        workload,
    )

    parser = argparse.ArgumentParser(
        prog="servescope",
        description="Measure, import and explain LLM serving performance.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log more (and SQL, with -vv)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # measure, then decide, then look: the order --help lists them
    sim.register(sub)
    bench.register(sub)
    sweep.register(sub)
    plan.register(sub)
    imports.register(sub)
    export.register(sub)
    watch.register(sub)
    workload.register(sub)
    compare.register(sub)
    verify.register(sub)
    quality.register(sub)
    checklist.register(sub)
    report.register(sub, render=_render_report)
    health.register(sub)
    demo.register(sub)
    ui.register(sub)
    db.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: the process's), run the command, return its exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # label values and server texts reach log messages: one line each, escaped
    handler = logging.StreamHandler()
    handler.setFormatter(PrintableFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, handlers=[handler])
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
