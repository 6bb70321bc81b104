"""The Plan page's cached view model (``services.views.plan``; see ``ui.cache``), and its two
writes: a GPU price and a saved plan (validated in ``services.commands.plan``)."""

from __future__ import annotations

from services.commands import plan as plan_command
from services.store_session import short_lived_store
from services.views import plan
from ui.cache import cached_view, clear, store_url


def plan_view(selection: plan.PlanSelection) -> plan.PlanView:
    """The Plan page for ``selection`` (``services.views.plan.page_view``)."""
    return cached_view(plan.page_view, selection)


def save_price(gpu: str, usd_per_hour: float, note: str = "") -> float:
    """Validate and store a GPU's price per GPU-hour; every cached view is forgotten (the
    plan's costs read the prices)."""
    with short_lived_store(store_url()) as store:
        value = plan_command.save_price(store, gpu, usd_per_hour, note=note)
    clear()
    return value


def save_plan(name: str, spec: plan.PlanSpec) -> str:
    """Store the plan's inputs under ``name`` (computed first: a bad spec stores nothing)."""
    with short_lived_store(store_url()) as store:
        saved = plan_command.save_plan(store, name, spec)
    clear()
    return saved
