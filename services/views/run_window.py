"""A window over one run's time span, as the one-run pages (Latency, Memory) take it: a slider
in whole seconds from the run's start, kept in the URL as ``?window=a-b``; the whole range is
the whole run."""

from __future__ import annotations

import math
from dataclasses import dataclass

#: The URL parameter of the window (seconds from the run's start: ``?window=60-300``).
WINDOW_PARAM = "window"


def parse_window(text: str | None) -> tuple[float, float] | None:
    """``"60-300"`` → (60.0, 300.0) seconds from the run's start; None (the whole run) when
    absent or unreadable."""
    if not text:
        return None
    try:
        start, end = (float(part) for part in text.split("-", 1))
    except ValueError:
        return None
    return start, end


@dataclass(frozen=True)
class RunWindow:
    """The window chosen over a run that starts at ``start`` (epoch seconds): ``chosen`` in
    seconds from the start, within the slider's range [0, ``span_s``]."""

    start: float
    span_s: float  # the slider's range: the run's length in whole seconds, at least 1
    chosen: tuple[float, float]

    @property
    def whole(self) -> bool:
        """True when the window is the slider's whole range: the whole run."""
        return self.chosen == (0.0, self.span_s)

    @property
    def bounds(self) -> tuple[float | None, float | None]:
        """The window on ``sent_at`` (epoch seconds, the end just past the last second); (None,
        None) for the whole run."""
        if self.whole:
            return None, None
        return self.start + self.chosen[0], self.start + self.chosen[1] + 1e-6


def run_window(start: float, end: float, wanted: tuple[float, float] | None) -> RunWindow:
    """The window ``wanted`` (seconds from ``start``; None: the whole run) over a run spanning
    [``start``, ``end``], clamped to the slider's range."""
    span_s = float(max(1, math.ceil(end - start)))
    first, last = wanted if wanted is not None else (0.0, span_s)
    chosen = (max(0.0, min(first, span_s)), max(0.0, min(last, span_s)))
    return RunWindow(start=float(start), span_s=span_s, chosen=chosen)
