"""SLO profiles: the catalog's seeded ones and the user's own, read and saved.

The Compare page's editor saves through :func:`save_slo_profile`; its view model and Memory's
cap read :func:`slo_profiles`; ``prepare`` keeps each run's SLO attainment under
:func:`threshold_sets` (every valid stored profile) from one scan.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from analysis import slo
from errors import ConfigError
from store import catalog
from store.db import Store

#: The catalog that holds them.
KIND = "slo_profiles"


def slo_profiles(store: Store) -> dict[str, dict[str, Any]]:
    """Every SLO profile in the catalog (seeded and the user's), as stored, by name; invalid
    entries included (the page says what is wrong when one is picked)."""
    return {name: catalog.get(store, KIND, name) for name in catalog.names(store, KIND)}


def profile_entry(values: Mapping[str, Any]) -> dict[str, Any]:
    """An editor's ``values`` (empty fields: None or "") as a validated catalog entry; a
    ConfigError names the bad field."""
    entry = {k: v for k, v in values.items() if v is not None and v != ""}
    return slo.SloProfile.from_entry(entry).to_entry()


def save_slo_profile(store: Store, entry: Mapping[str, Any]) -> str:
    """Validate ``entry`` and keep it as the user's own SLO profile (reseeding never overwrites
    it; a seeded profile's name makes the user's version of it). Returns its name."""
    valid = profile_entry(entry)
    catalog.save_user_entry(store, KIND, dict(valid))
    return str(valid["name"])


def threshold_sets(store: Store) -> list[dict[str, float]]:
    """The SQL thresholds (``SloProfile.sql_thresholds``) of every valid stored profile, for
    keeping runs' attainment under all of them at once; invalid entries are skipped."""
    sets = []
    for entry in slo_profiles(store).values():
        try:
            sets.append(slo.SloProfile.from_entry(entry).sql_thresholds())
        except ConfigError:
            continue  # the page says so when it is picked
    return sets
