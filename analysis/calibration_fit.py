"""Fitting the step-time model's constants to measured points, and k-fold cross-validation.

Pure logic: the caller supplies ``loss(calibration, row_id)``, the |log(model / measured)| of each
metric of one measured point under a set of constants (``bench/sim_calibration.py`` replays the
point on the reference engine; the unit tests use ``analysis.perf_model`` step times directly).
Nothing here runs a simulation, reads a file or looks at a clock.

* :func:`fit` — coordinate descent over a fixed grid per constant: for each constant in turn, try
  every grid value with the others held, keep the best; repeat for ``passes`` passes or until a
  pass changes nothing. The objective is the mean of every metric's |log error| over the rows
  (each metric counts once, so a row with four metrics weighs four times a row with one).
  It is a local search: it can stall where no single constant's move helps though a joint move
  would (tests/unit/test_calibration_fit.py shows it on noise-free rows with six constants
  free), and the cross-validation measures the procedure with that weakness included.
* :func:`folds` — a fixed, seeded assignment of rows to k folds (k ≥ the number of rows gives
  leave-one-out).
* :func:`cross_validate` — for each fold, :func:`fit` on the other folds' rows only; the fold's
  rows are then predicted with constants that never saw them (the out-of-sample error).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace

from analysis.perf_model import Calibration

RowLoss = Callable[[Calibration, str], Sequence[float]]
"""|log(model / measured)| of every metric of one row (by id) under the given constants."""

Grid = Mapping[str, Sequence[float]]
"""Candidate values per ``Calibration`` field, tried in order."""


# The model's constants before any fit (analysis/perf_model.py as first committed); every refit,
# on all rows or on a fold's, starts here, so no fold starts from constants that saw its rows.
PRIOR = Calibration(
    eta_bw=0.70,
    eta_fl=0.50,
    overhead_s=1.5e-3,
    overhead_per_seq_s=10e-6,
    allreduce_s=20e-6,
    request_overhead_s=0.0,
)


@dataclass(frozen=True)
class Fit:
    """The constants :func:`fit` settled on.

    objective: mean |log error| over the training rows' metrics (in-sample for those rows);
    evaluations: candidate sets of constants scored, each over every training row;
    trace: (pass, constant, value kept, objective) after each constant's sweep.
    """

    calibration: Calibration
    objective: float
    evaluations: int
    trace: tuple[tuple[int, str, float, float], ...]


@dataclass(frozen=True)
class FoldFit:
    """One fold of a cross-validation: the rows held out and the fit on all the others."""

    held_out: tuple[str, ...]
    fit: Fit


@dataclass(frozen=True)
class CrossValidation:
    k: int
    seed: int
    folds: tuple[FoldFit, ...]

    def calibration_for(self, row_id: str) -> Calibration:
        """The constants fitted without ``row_id`` (KeyError for a row in no fold)."""
        for f in self.folds:
            if row_id in f.held_out:
                return f.fit.calibration
        raise KeyError(row_id)

    def fold_of(self, row_id: str) -> int:
        """1-based index of the fold that holds ``row_id`` out."""
        for i, f in enumerate(self.folds, start=1):
            if row_id in f.held_out:
                return i
        raise KeyError(row_id)


def mean_loss(loss: RowLoss, calibration: Calibration, ids: Sequence[str]) -> float:
    """Mean |log error| over every metric of the rows ``ids``."""
    errs = [e for i in ids for e in loss(calibration, i)]
    if not errs:
        raise ValueError("no metric to score: the rows give no comparable value")
    return statistics.fmean(errs)


def _check_grid(grid: Grid) -> None:
    known = {f.name for f in fields(Calibration)}
    unknown = sorted(set(grid) - known)
    if unknown:
        raise ValueError(f"unknown constants {unknown}; Calibration has {sorted(known)}")
    empty = sorted(name for name, values in grid.items() if not values)
    if empty:
        raise ValueError(f"empty grid for {empty}")


def fit(
    loss: RowLoss,
    ids: Sequence[str],
    start: Calibration,
    grid: Grid,
    passes: int = 2,
    on_sweep: Callable[[int, str, Calibration, float], None] | None = None,
) -> Fit:
    """Coordinate descent over ``grid`` from ``start``, minimising :func:`mean_loss` on ``ids``.

    Ties keep the current value (a candidate must improve the objective by more than 1e-9), so
    the result does not depend on float noise. ``on_sweep(pass, constant, best, objective)`` is
    called after each constant's sweep (progress output).
    """
    _check_grid(grid)
    if passes < 1:
        raise ValueError(f"passes must be ≥ 1, got {passes}")
    if not ids:
        raise ValueError("no rows to fit")
    best = start
    best_obj = mean_loss(loss, best, ids)
    evaluations = 1
    trace: list[tuple[int, str, float, float]] = []
    for p in range(1, passes + 1):
        changed = False
        for name, values in grid.items():
            for v in values:
                cand = replace(best, **{name: v})
                if cand == best:
                    continue
                obj = mean_loss(loss, cand, ids)
                evaluations += 1
                if obj < best_obj - 1e-9:
                    best, best_obj, changed = cand, obj, True
            trace.append((p, name, float(getattr(best, name)), best_obj))
            if on_sweep is not None:
                on_sweep(p, name, best, best_obj)
        if not changed:
            break
    return Fit(best, best_obj, evaluations, tuple(trace))


def folds(ids: Sequence[str], k: int, seed: int) -> list[tuple[str, ...]]:
    """``ids`` dealt into ``k`` folds: sorted, shuffled with ``random.Random(seed)``, then dealt
    round-robin, so the assignment depends only on the set of ids, ``k`` and ``seed``. Fold sizes
    differ by at most one; ``k`` ≥ len(ids) gives leave-one-out (one row per fold)."""
    if k < 2:
        raise ValueError(f"k must be ≥ 2, got {k}")
    order = sorted(set(ids))
    if len(order) != len(ids):
        raise ValueError("duplicate row ids")
    if len(order) < 2:
        raise ValueError("cross-validation needs at least two rows")
    random.Random(seed).shuffle(order)
    k = min(k, len(order))
    return [tuple(sorted(order[i::k])) for i in range(k)]


def cross_validate(
    loss: RowLoss,
    ids: Sequence[str],
    start: Calibration,
    grid: Grid,
    k: int = 5,
    seed: int = 0,
    passes: int = 2,
    on_fold: Callable[[int, tuple[str, ...]], None] | None = None,
    on_sweep: Callable[[int, str, Calibration, float], None] | None = None,
) -> CrossValidation:
    """k-fold cross-validation of :func:`fit`: each fold's constants are fitted from ``start``
    on the rows of the other folds only. ``on_fold(index, held_out)`` is called before each
    fold's fit (progress output)."""
    out = []
    for i, held in enumerate(folds(ids, k, seed), start=1):
        if on_fold is not None:
            on_fold(i, held)
        train = [r for r in ids if r not in held]
        out.append(FoldFit(held, fit(loss, train, start, grid, passes, on_sweep)))
    return CrossValidation(len(out), seed, tuple(out))


def held_out_errors(loss: RowLoss, cv: CrossValidation) -> dict[str, list[float]]:
    """Each row's |log errors| under the constants fitted without it (out-of-sample). ``loss``
    may differ from the one fitted on, e.g. full-length replays after fitting on shortened ones."""
    return {r: list(loss(f.fit.calibration, r)) for f in cv.folds for r in f.held_out}
