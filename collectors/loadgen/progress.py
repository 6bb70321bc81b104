"""The live progress bar of ``servescope bench`` (rich, on stderr)."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)


class ProgressView:
    """One bar per load level: done/total, requests/s, TTFT P50/P99, errors."""

    def __init__(self, *, enabled: bool = True, console: Console | None = None) -> None:
        self.enabled = enabled
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._t0 = time.monotonic()
        self._last = 0.0
        if enabled:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[stats]}"),
                TimeElapsedColumn(),
                console=console or Console(stderr=True),
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

    def level(self, description: str, total: float | None) -> None:
        self._t0 = time.monotonic()
        self._last = 0.0
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
        if self._progress is None or self._task is None:
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
        err = f"[red]{errors} errors[/red]" if errors else "0 errors"
        self._progress.update(
            self._task, completed=done, stats=f"{done / elapsed:,.1f} req/s · {ttft} · {err}"
        )

    def note(self, text: str) -> None:
        if self._progress is not None:
            self._progress.console.print(text)
