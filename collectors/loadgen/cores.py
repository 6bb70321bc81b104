"""How many measuring processes a load level gets (``bench --workers auto``, the default).

One process keeps honest timestamps up to about 256 streams on one core (bench/README.md,
``measurement_error.py``, docs/timing.md); beyond that its event loop falls behind. So a level
needs one worker per 256 streams (or per 256 requests/s of an open loop), and gets one per free
core beyond that — a less loaded loop reads sooner — as long as each worker keeps at least 64
streams (64 requests/s), below which a process costs more than it saves. Free cores are those
this process may run on (its CPU affinity) less the load already on the machine (the 1-minute
load average, e.g. an engine on the same host). A worker beyond the free cores would only share
a core with another, which measures worse than one worker alone; when the free cores are fewer
than needed, the choice says the run may be client-bound.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

STREAMS_PER_WORKER = 256  # what one worker holds within the measurement targets
RATE_PER_WORKER = 256.0  # requests/s of an open loop one worker sends on time
MIN_STREAMS_PER_WORKER = 64  # fewer per worker: a process costs more than it saves
MIN_RATE_PER_WORKER = 64.0


@dataclass(frozen=True)
class WorkerChoice:
    workers: int
    reason: str  # recorded on the run (client_params.workers_reason)


def usable_cores() -> int:
    """Cores this process may run on (its affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def free_cores(cores: int | None = None, load: float | None = None) -> int:
    """Usable cores less the load already on them (1-minute load average), at least 1."""
    cores = usable_cores() if cores is None else cores
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):
            load = 0.0
    return max(1, min(cores, cores - math.floor(load + 0.5)))


def auto_workers(
    kind: str, value: float, *, cores: int | None = None, load: float | None = None
) -> WorkerChoice:
    """Workers for a level of ``kind`` (concurrency | rate | trace) at ``value`` (streams, or
    requests/s: a trace's mean rate): at least one per 256 streams or requests/s, one per free
    core beyond that while each keeps 64 or more, never more than the free cores."""
    if kind == "concurrency":
        need = max(1, math.ceil(value / STREAMS_PER_WORKER))
        most = max(1, math.floor(value / MIN_STREAMS_PER_WORKER))
        load_text = f"{int(value):,} streams"
    else:
        need = max(1, math.ceil(value / RATE_PER_WORKER))
        most = max(1, math.floor(value / MIN_RATE_PER_WORKER))
        load_text = f"{value:,.4g} requests/s"
    total = usable_cores() if cores is None else cores
    free = free_cores(total, load)
    n = min(max(need, min(free, most)), free)
    if n < need:
        why = (
            f"{load_text} need {need} workers (256 each); {free} of {total} cores are free, so "
            f"{n}: the run may be client-bound"
        )
    elif n == 1:
        why = f"{load_text}: 1 worker ({free} of {total} cores free)"
    else:
        why = (
            f"{load_text}: {n} workers, one per free core ({free} of {total} free; {need} needed "
            "at 256 each, at least 64 each)"
        )
    return WorkerChoice(n, why)
