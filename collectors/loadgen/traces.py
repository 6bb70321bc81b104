"""Production traces to replay: arrival times and input/output lengths (``bench --trace``).

``Trace`` is what a load level of kind ``"trace"`` replays (``WorkerPlan.trace``): request i is
sent ``offsets[i]`` seconds after the level's start, with a prompt of ``input_tokens[i]`` tokens
and ``output_tokens[i]`` tokens asked for.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Trace:
    """A trace ready to replay: scaled by ``speed``, cut to its window, offsets from 0."""

    format: str  # azure | burstgpt | mooncake
    name: str  # the file's name (never its folder)
    sha256: str  # of the whole file, as read
    offsets: tuple[float, ...]  # seconds from the level's start, non-decreasing, first 0
    input_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    speed: float = 1.0
    window: tuple[float, float] | None = None  # seconds of the original trace, [start, end)
    rows_read: int = 0
    rows_skipped: int = 0  # rows outside the window or without usable lengths

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def span_s(self) -> float:
        return self.offsets[-1] if self.offsets else 0.0

    @property
    def mean_rate(self) -> float:
        """Requests per second over the replay (what a rate level's value would be)."""
        n = len(self.offsets)
        return (n - 1) / self.span_s if n > 1 and self.span_s > 0 else float(n)
