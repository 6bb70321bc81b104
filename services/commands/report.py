"""``servescope report --runs ID… [--sweep ID] [--plan NAME] [--title T] --out review.html`` —
the planning-review report: one self-contained HTML file (Plotly embedded, no external URL)
with the checklist result, the SLO table, P99 by input length, memory curves, the sweep's
recommendation and the capacity plan (``services.views.report`` gathers it).

Layering: this module is below ``ui/`` and may not import it, yet the document is drawn by
``ui.report.render_html`` (the pages' own figure builders). cli.py, the top, composes the two:
it passes the renderer to :func:`register` (``register(sub, render=...)``), so the command
stays Streamlit- and ui-free and the report's figures stay the pages' own.

The file is written atomically: the document is built in full first, then written to a
temporary file beside ``--out`` and renamed over it — an existing file is replaced only when
the new one is complete. Bad input (an unknown run, sweep, plan or SLO profile, an ``--out``
whose folder does not exist) is one ``servescope: error:`` line with a hint, exit 2, and no
file.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from errors import InputError
from services.views.report import DEFAULT_PROFILE, ReportData, ReportRequest, report_data
from store.db import Store

Render = Callable[[ReportData], str]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], render: Render) -> None:
    """Add the ``report`` subcommand to cli.py's parser; ``render`` draws the document
    (``ui.report.render_html``, passed in by cli.py: see the module's docstring)."""
    p = sub.add_parser(
        "report",
        help="the planning-review report: one self-contained HTML file",
        description="Write the planning-review report: one self-contained HTML file (charts "
        "embedded, opens offline) with the checklist result, the SLO table of the runs, P99 by "
        "input length and memory curves per run, the sweep's recommendation and the capacity "
        "plan. An existing --out file is replaced only when the new one is complete.",
    )
    p.add_argument(
        "--runs",
        action="extend",
        nargs="+",
        default=[],
        metavar="ID",
        help="run ids (space-separated, comma-separated or repeated); with --sweep and no "
        "--runs: the sweep's runs. `servescope db runs` lists them",
    )
    p.add_argument("--sweep", metavar="ID", help="a sweep whose recommendation to include")
    p.add_argument("--plan", metavar="NAME", help="a capacity plan saved in the store")
    p.add_argument(
        "--plan-spec",
        metavar="FILE",
        help="a capacity plan's spec as a JSON file (instead of --plan)",
    )
    p.add_argument("--title", help="the report's title (default: Planning review)")
    p.add_argument(
        "--slo", metavar="PROFILE", help=f"the SLO table's profile (default {DEFAULT_PROFILE})"
    )
    p.add_argument("--out", required=True, metavar="FILE", help="the HTML file to write")
    p.add_argument("--db", help="store URL (default: $SERVESCOPE_DB or the DuckDB file)")
    p.set_defaults(func=lambda args: run(args, render))


def split_ids(values: list[str]) -> tuple[str, ...]:
    """``["a,b", "c"]`` → ``("a", "b", "c")``: each value may be a comma-separated list."""
    return tuple(p.strip() for v in values for p in v.split(",") if p.strip())


def request_from_args(args: argparse.Namespace) -> ReportRequest:
    """The report the command line asks for (InputError when it asks for nothing, or for a plan
    twice, or the spec file cannot be read)."""
    run_ids = split_ids(args.runs or [])
    if args.plan and args.plan_spec:
        raise InputError(
            "the plan is given twice (--plan and --plan-spec)", hint="give one of the two"
        )
    if not run_ids and not args.sweep and not args.plan and not args.plan_spec:
        raise InputError(
            "nothing to report: give --runs ID …, --sweep ID or --plan NAME",
            hint="`servescope db runs` lists the stored runs",
        )
    spec_json = None
    if args.plan_spec:
        try:
            spec_json = Path(args.plan_spec).read_text(encoding="utf-8")
        except OSError as exc:
            raise InputError(
                f"cannot read --plan-spec {args.plan_spec}: {exc.strerror or exc}",
                hint="give a JSON file saved from the Plan page",
            ) from None
    return ReportRequest(
        run_ids=run_ids,
        sweep_id=args.sweep or None,
        plan_name=args.plan or None,
        plan_spec_json=spec_json,
        title=args.title,
        slo=args.slo or None,
    )


def check_out(out: str) -> Path:
    """``--out`` as a path whose folder exists and that is not a folder itself."""
    path = Path(out)
    if path.is_dir():
        raise InputError(f"--out {out} is a folder", hint="give a file name, e.g. review.html")
    if not path.parent.is_dir():
        raise InputError(
            f"--out {out}: the folder {path.parent} does not exist",
            hint="create it first, or write the report elsewhere",
        )
    return path


def write_atomically(path: Path, text: str) -> int:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file in the same folder renamed
    over it; returns the size in bytes. On any failure the temporary file is removed and
    ``path`` is as it was."""
    data = text.encode("utf-8")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return len(data)


def size_text(size: int) -> str:
    """``1,234,567`` → ``"1.2 MB (1,234,567 bytes)"``."""
    return f"{size / 1e6:.1f} MB ({size:,} bytes)"


def write_report(store: Store, request: ReportRequest, out: Path, render: Render) -> int:
    """Build the report of ``request`` in full, then write it to ``out``; returns its size."""
    text = render(report_data(store, request))
    return write_atomically(out, text)


def run(args: argparse.Namespace, render: Render) -> int:
    """Entry point of ``servescope report``: write the file, print its path and size."""
    from store.lifecycle import open_store

    request = request_from_args(args)
    out = check_out(args.out)
    started = time.perf_counter()
    store = open_store(args.db)
    try:
        with store.held_open():
            size = write_report(store, request, out, render)
    finally:
        store.dispose()
    print(f"wrote {out} — {size_text(size)} in {time.perf_counter() - started:.1f} s")
    return 0
