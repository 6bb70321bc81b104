"""Production's length mix and whether a benchmark's workload represents it.

:func:`production_mix` reads the prompt and output length histograms that ``servescope watch``
stores (``prompt_length_tokens`` / ``output_length_tokens`` in ``engine_samples``), takes each
bucket's increase over the last ``window_s`` (24 h by default) before the last engine sample,
summed over the watched targets (``analysis.histogram_windows.bucket_increase``: resets
handled, on the rows ``store.histogram_spans`` thins in SQL to those that decide it), and
returns production's two length distributions (``analysis.length_mix.LengthDist``).

:func:`mix_flags` (one run each) and :func:`group_flags` (a label → the runs pooled behind it,
e.g. a framework's evidence on the Select page) compare the lengths the runs' successful
requests had (``store.request_lengths``), binned on production's bucket edges, with production:
the distance is Kolmogorov–Smirnov on the bucketed CDFs (``analysis.length_mix.distance``), and
a side whose distance is at least ``MATERIAL_DISTANCE`` (0.2) differs materially — the run's
results may not hold for production's traffic. docs/select.md states it.

The page-facing builders take a frozen selection (:class:`ProductionSelection`,
:class:`FlagSelection`) so ``ui.cache`` can keep them: the production read once per window, the
flags once per set of runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import pandas as pd

from analysis import histogram_windows, length_mix
from analysis.length_mix import MATERIAL_DISTANCE, LengthDist
from errors import InputError
from services.views import traffic
from store import histogram_spans, request_lengths, sample_series
from store.db import Store

#: The production window compared with (seconds): the last day of traffic.
DEFAULT_WINDOW_S: Final = 24 * 3600.0
#: side → the stored length histogram (``collectors.engine_metrics.LENGTH_HISTOGRAMS``).
HISTS: Final[Mapping[str, str]] = dict(zip(("prompt", "output"), traffic.LENGTH_HISTS, strict=True))
#: How the sides are named in a reason.
SIDE_NAMES: Final[Mapping[str, str]] = {"prompt": "prompt lengths", "output": "output lengths"}
#: The command that fills the store with production's histograms.
WATCH_HINT: Final = "servescope watch --target <engine URL>"


def _tokens(value: float) -> str:
    """``1024.0`` → ``"1 024"`` (grouped by spaces, as ``length_mix.describe``)."""
    return f"{value:,.0f}".replace(",", " ")


@dataclass(frozen=True)
class ProductionMix:
    """Production's prompt and output length distributions over (start, end], summed over
    ``targets``; a side is None when its histogram recorded no request in the window."""

    targets: tuple[str, ...]
    start: float
    end: float
    window_s: float
    prompt: LengthDist | None
    output: LengthDist | None

    def side(self, side: str) -> LengthDist | None:
        """The distribution of ``side`` (``prompt`` or ``output``)."""
        return self.prompt if side == "prompt" else self.output


@dataclass(frozen=True)
class SideCheck:
    """One side of a run (or a group of runs) against production: both distributions on
    production's edges and their KS distance."""

    side: str  # prompt | output
    production: LengthDist
    run: LengthDist
    distance: float

    @property
    def flagged(self) -> bool:
        """Whether the run's lengths differ materially from production's."""
        return self.distance >= MATERIAL_DISTANCE

    @property
    def reason(self) -> str:
        """One line: the distance against the threshold and both medians."""
        name = SIDE_NAMES[self.side]
        verdict = (
            f"{name} differ from production: KS distance {self.distance:.2f} ≥ "
            f"{MATERIAL_DISTANCE:g}"
            if self.flagged
            else f"{name} match production: KS distance {self.distance:.2f} < {MATERIAL_DISTANCE:g}"
        )
        return (
            f"{verdict}; production P50 ≈ {_tokens(self.production.quantile(0.5))} tokens, "
            f"run P50 ≈ {_tokens(self.run.quantile(0.5))}"
        )


@dataclass(frozen=True)
class MixFlag:
    """Whether one run's (or one group's pooled) lengths represent production.

    ``checks``: the sides compared (a side is left out when production or the runs have no
    lengths for it); ``note``: why nothing was compared (no per-request lengths)."""

    label: str
    run_ids: tuple[str, ...]
    checks: tuple[SideCheck, ...] = ()
    requests: int = 0
    note: str = ""

    @property
    def flagged(self) -> bool:
        """Whether any side differs materially from production."""
        return any(c.flagged for c in self.checks)

    @property
    def distance(self) -> float | None:
        """The larger distance of the sides compared (None: nothing compared)."""
        return max((c.distance for c in self.checks), default=None)

    @property
    def reason(self) -> str:
        """One line: the flagged sides' reasons, else every side's, else the note."""
        flagged = [c.reason for c in self.checks if c.flagged]
        return "; ".join(flagged or [c.reason for c in self.checks]) or self.note


@dataclass(frozen=True)
class ProductionSelection:
    """Which production traffic to compare with: one target (None: every watched engine
    target) over the last ``window_s`` before the last engine sample."""

    target: str | None = None
    window_s: float = DEFAULT_WINDOW_S


@dataclass(frozen=True)
class FlagSelection:
    """The groups to judge against ``mix``: (label, the runs pooled under it)."""

    mix: ProductionMix
    groups: tuple[tuple[str, tuple[str, ...]], ...]


# --- production ----------------------------------------------------------------------------


def production_mix(
    store: Store,
    *,
    target: str | None = None,
    window_s: float = DEFAULT_WINDOW_S,
    end: float | None = None,
) -> ProductionMix | None:
    """Production's length mix over (end − window_s, end] (``end`` None: the last engine
    sample), summed over ``target`` or every engine target that reported in the window; None
    when the store holds no length histogram with a request in that window. An InputError
    when ``window_s`` is not positive or ``target`` was never watched."""
    if not np.isfinite(window_s) or window_s <= 0:
        raise InputError(
            f"production window {window_s!r} s is not a positive duration",
            hint="give a window such as 24h (86400 s)",
        )
    if target is not None:
        known = traffic.known_targets(store)
        names = [str(k) for k in known["key"]]
        if target not in names:
            raise InputError(
                f"target {target!r} has no engine samples in this store",
                hint=f"known targets: {', '.join(names) or 'none (run servescope watch)'}",
            )
        if end is None:
            end = float(known.loc[known["key"] == target, "last_ts"].max())
    if end is None:
        end = sample_series.latest_sample_ts(store)
        if end is None:
            return None
    start = end - window_s
    if target is not None:
        targets: tuple[str, ...] = (target,)
    else:
        reported = sample_series.last_sample_times(store, since=start)
        targets = tuple(sorted(str(k) for k in reported.loc[reported["kind"] == "engine", "key"]))
    dists: dict[str, LengthDist | None] = {}
    for side, hist in HISTS.items():
        # thinned in SQL to the rows that decide the increase (a day at 1 Hz is millions)
        rows = histogram_spans.histogram_span_rows(store, targets, hist, since=start, until=end)
        pairs = (
            histogram_windows.bucket_increase(rows, hist, start=start, end=end)
            if not rows.empty
            else []
        )
        dist = length_mix.from_buckets(pairs) if pairs else None
        dists[side] = dist if dist is not None and dist.total > 0 else None
    if dists["prompt"] is None and dists["output"] is None:
        return None
    return ProductionMix(
        targets=targets,
        start=start,
        end=end,
        window_s=window_s,
        prompt=dists["prompt"],
        output=dists["output"],
    )


def production_view(store: Store, selection: ProductionSelection) -> ProductionMix | None:
    """:func:`production_mix` for a page's selection (``ui.cache`` keeps it)."""
    return production_mix(store, target=selection.target, window_s=selection.window_s)


# --- the runs against it -------------------------------------------------------------------


def side_check(
    mix: ProductionMix, side: str, tokens: np.ndarray, counts: np.ndarray
) -> SideCheck | None:
    """``side`` of some requests (each distinct length ``tokens`` seen ``counts`` times) binned
    on production's edges, and its distance to production; None when either has no requests."""
    production = mix.side(side)
    if production is None or int(counts.sum()) <= 0:
        return None
    if not math.isinf(production.edges[-1]):  # an exporter without +Inf: close it, empty
        production = LengthDist((*production.edges, math.inf), (*production.counts, 0.0))
    values = np.repeat(tokens.astype("float64"), counts.astype("int64"))
    run = length_mix.from_lengths(values, production.edges)  # the same edges, +Inf last
    return SideCheck(side, production, run, float(length_mix.distance(run, production)))


def judge(mix: ProductionMix, label: str, run_ids: Sequence[str], counts: pd.DataFrame) -> MixFlag:
    """One group's flag from its length counts (``store.request_lengths.length_counts`` rows
    of ``run_ids``; pooled)."""
    mine = counts[counts["run_id"].isin(list(run_ids))]
    checks = []
    for side in HISTS:
        rows = mine[mine["side"] == side]
        if rows.empty:
            continue
        pooled = rows.groupby("tokens", sort=True)["n"].sum()
        check = side_check(
            mix, side, pooled.index.to_numpy(dtype="float64"), pooled.to_numpy(dtype="int64")
        )
        if check is not None:
            checks.append(check)
    prompts = mine.loc[mine["side"] == "prompt", "n"].sum()
    outputs = mine.loc[mine["side"] == "output", "n"].sum()
    note = "" if checks else "no per-request lengths to compare with production"
    return MixFlag(
        label=label,
        run_ids=tuple(str(r) for r in run_ids),
        checks=tuple(checks),
        requests=int(max(prompts, outputs)),
        note=note,
    )


def group_flags(
    store: Store, mix: ProductionMix, groups: Sequence[tuple[str, Sequence[str]]]
) -> list[MixFlag]:
    """Per group (label, runs): the runs' pooled lengths against production (one read)."""
    ids = list(dict.fromkeys(str(r) for _, runs in groups for r in runs))
    step = request_lengths.MAX_RUNS
    parts = [
        request_lengths.length_counts(store, ids[i : i + step]) for i in range(0, len(ids), step)
    ]
    counts = (
        pd.concat(parts, ignore_index=True) if parts else request_lengths.length_counts(store, [])
    )
    return [judge(mix, label, runs, counts) for label, runs in groups]


def mix_flags(store: Store, mix: ProductionMix, runs: Sequence[str]) -> list[MixFlag]:
    """Per run of ``runs``: its lengths against production."""
    return group_flags(store, mix, [(str(r), (str(r),)) for r in runs])


def flags_view(store: Store, selection: FlagSelection) -> tuple[MixFlag, ...]:
    """:func:`group_flags` for a page's selection (``ui.cache`` keeps it)."""
    return tuple(group_flags(store, selection.mix, selection.groups))
