"""The live progress of ``servescope bench`` (on stderr).

On a terminal: a rich progress bar per load level. Elsewhere (a pipe, a CI log, a file): plain,
whole lines, never cut to a width — one when a level starts, one every ``plain_every_s``
while it runs, and one when it ends.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.errors import MarkupError
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text


def _elapsed(seconds: float) -> str:
    h, rem = divmod(int(seconds), 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}"


class ProgressView:
    """One bar per load level: done/total, requests/s, TTFT P50/P99, errors."""

    def __init__(
        self,
        *,
        enabled: bool = True,
        console: Console | None = None,
        plain_every_s: float = 10.0,
    ) -> None:
        self.enabled = enabled
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._t0 = time.monotonic()
        self._last = 0.0
        self._console = console or Console(stderr=True)
        # not a terminal: plain lines (rich would render the bar once, cut at 80 columns)
        self._plain = enabled and not self._console.is_terminal
        self._plain_every_s = plain_every_s
        self._plain_last = 0.0
        self._level: tuple[str, float | None] | None = None
        self._stats = ""
        self._done = 0
        self._printed_done = -1
        if enabled and not self._plain:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[stats]}"),
                TimeElapsedColumn(),
                console=self._console,
                transient=False,
                refresh_per_second=4,
            )

    def __enter__(self) -> ProgressView:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()
        self._end_plain_level()

    # --- plain lines ----------------------------------------------------------------------

    def _line(self, text: str) -> None:
        # one whole line, whatever the console's width; markup-free
        self._console.file.write(text + "\n")
        self._console.file.flush()

    def _plain_status(self) -> str:
        assert self._level is not None
        description, total = self._level
        of = f"/{total:,.0f}" if total is not None else ""
        return (
            f"{description}: {self._done:,}{of} requests · {self._stats or 'starting…'} · "
            f"{_elapsed(self._last - self._t0 if self._last else 0.0)}"
        )

    def _end_plain_level(self) -> None:
        if self._plain and self._level is not None and self._printed_done != self._done:
            self._line(self._plain_status())
            self._printed_done = self._done
        self._level = None

    # --- the view's API -------------------------------------------------------------------

    def level(self, description: str, total: float | None) -> None:
        self._end_plain_level()
        self._t0 = time.monotonic()
        self._last = 0.0
        self._done = 0
        self._stats = ""
        self._printed_done = -1
        if self._plain:
            self._level = (description, total)
            self._plain_last = self._t0
            of = f" ({total:,.0f} requests)" if total is not None else ""
            self._line(f"{description}: started{of}")
        if self._progress is not None:
            self._task = self._progress.add_task(description, total=total, stats="starting…")

    def update(
        self,
        *,
        done: int,
        errors: int,
        ttft_p50: float | None,
        ttft_p99: float | None,
        force: bool = False,
    ) -> None:
        if not self.enabled or (self._progress is not None and self._task is None):
            return
        if self._plain and self._level is None:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.25:
            return
        self._last = now
        elapsed = max(1e-9, now - self._t0)
        ttft = (
            f"TTFT P50 {ttft_p50:,.0f} ms P99 {ttft_p99:,.0f} ms"
            if ttft_p50 is not None and ttft_p99 is not None
            else "TTFT –"
        )
        rate = f"{done / elapsed:,.1f} req/s"
        if self._plain:
            self._done = done
            self._stats = f"{rate} · {ttft} · {errors} errors"
            if now - self._plain_last >= self._plain_every_s:
                self._plain_last = now
                self._line(self._plain_status())
                self._printed_done = done
            return
        assert self._progress is not None and self._task is not None
        err = f"[red]{errors} errors[/red]" if errors else "0 errors"
        self._progress.update(self._task, completed=done, stats=f"{rate} · {ttft} · {err}")

    def note(self, text: str) -> None:
        """A line above the bars (rich markup; plain text when not on a terminal)."""
        if self._plain:
            try:
                self._line(Text.from_markup(text).plain)
            except MarkupError:
                self._line(text)
        elif self._progress is not None:
            self._progress.console.print(text)
