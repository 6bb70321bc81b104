"""Arrival processes of an open-loop benchmark: constant, Poisson and gamma (seeded).

Gamma follows vLLM's ``--burstiness`` semantics: inter-arrival times are gamma-distributed with
shape = burstiness and scale = 1 / (rate · burstiness), so the mean rate is ``rate`` whatever the
burstiness; burstiness 1 is Poisson, < 1 burstier, > 1 more regular.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from errors import InputError

ARRIVALS = ("poisson", "gamma", "constant")


def check(kind: str, rate: float, burstiness: float) -> None:
    if kind not in ARRIVALS:
        raise InputError(f"unknown arrival process {kind!r}; choose one of: {', '.join(ARRIVALS)}")
    if not rate > 0:
        raise InputError(f"request rate must be > 0 requests/s, got {rate!r}")
    if not burstiness > 0:
        raise InputError(f"burstiness must be > 0 (1 = Poisson), got {burstiness!r}")


def intervals(kind: str, rate: float, burstiness: float = 1.0, *, seed: int) -> Iterator[float]:
    """Endless inter-arrival times in seconds (the first is the gap before the second request)."""
    check(kind, rate, burstiness)
    rng = random.Random(seed)
    if kind == "constant":
        step = 1.0 / rate
        while True:
            yield step
    elif kind == "poisson":
        while True:
            yield rng.expovariate(rate)
    else:
        scale = 1.0 / (rate * burstiness)
        while True:
            yield rng.gammavariate(burstiness, scale)


def offsets(kind: str, rate: float, burstiness: float = 1.0, *, seed: int) -> Iterator[float]:
    """Endless send offsets from the start in seconds: 0, then cumulative intervals."""
    t = 0.0
    gen = intervals(kind, rate, burstiness, seed=seed)
    while True:
        yield t
        t += next(gen)
