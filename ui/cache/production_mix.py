"""Production's length mix and the runs' flags against it, cached
(``services.views.production_mix``; see ``ui.cache``): the production read is kept once per
window for every page, the flags once per set of runs."""

from __future__ import annotations

from collections.abc import Sequence

from services.views import production_mix
from services.views.production_mix import FlagSelection, MixFlag, ProductionMix
from ui.cache import cached_view


def production() -> ProductionMix | None:
    """Production's length mix over the last day of every watched engine target; None when
    the store holds no length histograms."""
    return cached_view(production_mix.production_view, production_mix.ProductionSelection())


def flags(mix: ProductionMix, groups: Sequence[tuple[str, Sequence[str]]]) -> tuple[MixFlag, ...]:
    """Each group's (label, runs) lengths against ``mix``."""
    selection = FlagSelection(mix, tuple((label, tuple(runs)) for label, runs in groups))
    return cached_view(production_mix.flags_view, selection)
