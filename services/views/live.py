"""The Live page's view model: the current state of watched engines and GPUs.

``live_view`` reads the last minutes of samples (``store.samples``) and derives what the panels
show (``analysis.engine_series``: counter rates, staleness). The page rebuilds it on every
refresh of its panels: live data is never cached (a cached copy would be stale by design), and
every read is bounded by the window.

URL: ``?refresh=<seconds>`` (1..60), how often the panels refresh.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import pandas as pd

from analysis import engine_series
from store import sample_series
from store.db import Store

#: How much history the small charts show.
WINDOW_S: Final = 15 * 60
#: Default refresh period of the live panels (seconds); ``?refresh=N`` overrides it.
REFRESH_S: Final = 2.0
#: The refresh period's bounds (seconds).
REFRESH_MIN_S: Final = 1.0
REFRESH_MAX_S: Final = 60.0
REFRESH_PARAM: Final = "refresh"

_ENGINE_COLUMNS: Final = ["target", "engine", "ts", "metric", "value"]


@dataclass(frozen=True)
class LiveSelection:
    """What the Live page is asked to show; the defaults are the page's first view."""

    window_s: float = WINDOW_S  # how much history the charts show
    refresh_s: float = REFRESH_S  # how often the panels refresh

    @classmethod
    def default(cls) -> LiveSelection:
        """The page's first view."""
        return cls()

    @classmethod
    def from_params(cls, params: Mapping[str, str | None]) -> LiveSelection:
        """The selection a URL's query parameters describe: ``?refresh=`` seconds, clamped to
        1..60 (unreadable: the default)."""
        raw = params.get(REFRESH_PARAM)
        try:
            refresh = float(raw) if raw else REFRESH_S
        except ValueError:
            refresh = REFRESH_S
        return cls(refresh_s=min(REFRESH_MAX_S, max(REFRESH_MIN_S, refresh)))


@dataclass(frozen=True)
class LiveView:
    """Everything the Live page's panels show at ``now``."""

    now: float
    window_start: float
    window_end: float
    window_s: float
    current: bool  # the window ends now (False: showing the last recorded window)
    #: One row per engine target: latest gauges, counter rates, staleness
    #: (``analysis.engine_series.target_summary``).
    targets: pd.DataFrame
    engine: pd.DataFrame  # target, engine, ts, metric, value
    generation_rates: pd.DataFrame  # target, ts, rate: generated tokens per second
    gpus_latest: pd.DataFrame  # each GPU's newest sample
    gpus: pd.DataFrame  # the GPUs' samples in the window (``store.sample_series.gpu_series``)
    stale_targets: frozenset[str] = field(default_factory=frozenset)
    stale_hosts: frozenset[str] = field(default_factory=frozenset)

    @property
    def empty(self) -> bool:
        """True when no engine and no GPU has ever reported."""
        return self.targets.empty and self.gpus_latest.empty


def live_view(store: Store, selection: LiveSelection, *, now: float | None = None) -> LiveView:
    """The last ``selection.window_s`` of samples up to ``now`` (default: the clock) or, when
    nothing is that recent, the last recorded window; each target and GPU summarised."""
    now = time.time() if now is None else now
    window_s = selection.window_s
    latest = sample_series.latest_sample_ts(store, since=now - window_s)
    current = latest is not None
    if latest is None:  # nothing recent: the last recorded window, if any
        latest = sample_series.latest_sample_ts(store)
    end = now if current or latest is None else latest
    start = end - window_s
    gpus = sample_series.gpu_series(store, since=start, until=end)
    if latest is None:
        engine = pd.DataFrame(columns=_ENGINE_COLUMNS)
        gpus_latest = gpus
    else:
        engine = sample_series.engine_series(store, since=start, until=end)
        gpus_latest = sample_series.latest_gpu_state(store, since=start)
    targets = engine_series.target_summary(engine, now=now)
    stale_targets = frozenset(str(t) for t in targets.loc[targets["stale"].astype(bool), "target"])
    return LiveView(
        now=now,
        window_start=start,
        window_end=end,
        window_s=window_s,
        current=current,
        targets=targets,
        engine=engine,
        generation_rates=engine_series.rate_series(engine, "generation_tokens_total"),
        gpus_latest=gpus_latest,
        gpus=gpus,
        stale_targets=stale_targets,
        stale_hosts=stale_hosts(gpus, gpus_latest, now),
    )


def stale_hosts(gpus: pd.DataFrame, gpus_latest: pd.DataFrame, now: float) -> frozenset[str]:
    """GPU hosts whose newest sample is older than three of their sampling intervals at
    ``now``, and hosts with a newest sample but none in the window."""
    if gpus_latest.empty:
        return frozenset()
    stale: set[str] = set()
    for host, part in gpus.groupby("host") if not gpus.empty else []:
        interval = engine_series.estimate_interval(part["ts"].to_numpy())
        if engine_series.is_stale(float(part["ts"].max()), now, interval):
            stale.add(str(host))
    seen = set(gpus["host"].astype(str)) if not gpus.empty else set()
    return frozenset(stale | {str(h) for h in gpus_latest["host"] if str(h) not in seen})
