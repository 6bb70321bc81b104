"""Kernel receive timestamps: when the data of a socket read reached this host.

On Linux a TCP socket with ``SO_TIMESTAMPNS`` set hands every ``recvmsg`` a control message
holding the instant (``struct timespec``, CLOCK_REALTIME) the kernel received the data that
read returns — the *last* segment's instant when one read drains several queued segments.
(Linux merges segments waiting in the receive queue into one buffer that keeps the newest
stamp, so a one-byte ``MSG_PEEK`` returns that same last instant: measured on loopback, see
docs/timing.md.) A busy event loop then delays the processing of a read but not its timestamp.

``RealtimeMap`` puts those instants on the ``time.perf_counter`` timeline (CLOCK_MONOTONIC on
Linux) with an offset measured like ``engine.Clock``'s; realtime and monotonic advance together
(NTP slews both) except when the realtime clock is *stepped*, so the offset is measured again
now and then (``maybe_refresh``) and a step larger than ``STEP_S`` is counted and noted.

``ReadDelays`` counts how late the event loop read each socket after the kernel received its
data (a log-spaced histogram: cheap enough for every read).
"""

from __future__ import annotations

import socket
import struct
import sys
import time
from bisect import bisect_left
from collections.abc import Callable

#: ``socket.SO_TIMESTAMPNS`` (Linux's value where the constant is missing)
SO_TIMESTAMPNS: int = getattr(socket, "SO_TIMESTAMPNS", 35)
SCM_TIMESTAMPNS = SO_TIMESTAMPNS  # the control message's type is the option's value
#: struct timespec: time_t and long, both the platform's long on Linux
_TIMESPEC = struct.Struct("@ll")
_SOL_SOCKET = socket.SOL_SOCKET
#: room for one timespec control message
CMSG_SIZE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 32
#: how often (seconds) the realtime → perf_counter offset is measured again
REFRESH_S = 1.0
#: an offset change larger than this is a clock step (slewing moves it by µs per second)
STEP_S = 0.001
#: the upper edges (ms) of the read-delay histogram's bins; the last bin is open
DELAY_EDGES_MS: tuple[float, ...] = (
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
    20.0,
    50.0,
    100.0,
    200.0,
    500.0,
)


def kernel_unavailable_reason(scheme: str) -> str | None:
    """Why reads on a ``scheme`` connection cannot carry kernel stamps here, or None."""
    if not sys.platform.startswith("linux"):
        return f"kernel receive timestamps need Linux (this is {sys.platform})"
    if scheme == "https":
        return (
            "https: TLS records are decrypted by the ssl module above the socket, so its reads "
            "carry no receive timestamps"
        )
    if not hasattr(socket.socket, "recvmsg"):
        return "socket.recvmsg is not available"
    return None


def enable(sock: socket.socket) -> str | None:
    """Turn on receive timestamps for ``sock``; the reason when the kernel refuses, or None."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError as exc:
        return f"setsockopt(SO_TIMESTAMPNS) failed: {exc}"
    return None


def stamp_of(ancdata: list[tuple[int, int, bytes]]) -> float | None:
    """The CLOCK_REALTIME seconds in a ``recvmsg`` result's control messages, or None."""
    for level, kind, data in ancdata:
        if kind == SCM_TIMESTAMPNS and level == _SOL_SOCKET and len(data) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(data)
            return float(sec + nsec * 1e-9)
    return None


def measure_offset(
    perf: Callable[[], float] = time.perf_counter, wall: Callable[[], float] = time.time
) -> float:
    """``wall() - perf()``, the tightest of five samples (epoch = perf + offset)."""
    best: tuple[float, float] | None = None
    for _ in range(5):
        a = perf()
        w = wall()
        b = perf()
        if best is None or b - a < best[0]:
            best = (b - a, w - (a + b) / 2)
    assert best is not None
    return best[1]


class RealtimeMap:
    """CLOCK_REALTIME seconds → perf_counter seconds, watching for clock steps."""

    __slots__ = ("checked", "largest_step_s", "offset", "perf", "steps", "wall")

    def __init__(
        self,
        perf: Callable[[], float] = time.perf_counter,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.perf = perf
        self.wall = wall
        self.offset = measure_offset(perf, wall)
        self.checked = perf()
        self.steps = 0
        self.largest_step_s = 0.0

    def maybe_refresh(self, now: float) -> None:
        """Measure the offset again when ``REFRESH_S`` has passed since the last time."""
        if now - self.checked >= REFRESH_S:
            self.refresh()

    def refresh(self) -> None:
        offset = measure_offset(self.perf, self.wall)
        change = abs(offset - self.offset)
        if change > STEP_S:
            self.steps += 1
            self.largest_step_s = max(self.largest_step_s, change)
        self.offset = offset
        self.checked = self.perf()

    def note(self) -> str | None:
        """A note on the clock steps seen, or None."""
        if not self.steps:
            return None
        return (
            f"the realtime clock was stepped {self.steps} time(s) during the run (largest "
            f"{self.largest_step_s * 1000:.1f} ms): reads between a step and the next check "
            f"(at most {REFRESH_S:g} s later) are off by the step"
        )


class ReadDelays:
    """How late the loop read the socket after the kernel received the data (histogram, ms)."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts = [0] * (len(DELAY_EDGES_MS) + 1)

    def add(self, delay_s: float) -> None:
        self.counts[bisect_left(DELAY_EDGES_MS, delay_s * 1000.0)] += 1

    def take(self) -> list[int]:
        """The counts so far, and start again."""
        counts, self.counts = self.counts, [0] * (len(DELAY_EDGES_MS) + 1)
        return counts


def delay_percentile(counts: list[int] | tuple[int, ...], q: float) -> float | None:
    """The upper edge (ms) of the bin holding the ``q``-th percentile (inf for the open bin)."""
    total = sum(counts)
    if not total:
        return None
    rank = q / 100.0 * total
    seen = 0
    for i, c in enumerate(counts):
        seen += c
        if seen >= rank and c:
            return DELAY_EDGES_MS[i] if i < len(DELAY_EDGES_MS) else float("inf")
    return float("inf")
