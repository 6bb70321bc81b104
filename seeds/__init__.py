"""The catalog's seed data (TOML files beside this module) and a pure loader.

Each file holds one table of the catalog: ``[[gpus]]``, ``[[models]]``, ``[[slo_profiles]]``,
``[[workloads]]``, ``[[frameworks]]``, ``[[criteria]]``, ``[[weight_presets]]`` entries, each with
a ``name`` and a ``source``; ``scores.toml`` holds ``[[scores]]``, one per framework and criterion,
named ``"<framework>/<criterion>"`` by the loader (the ``framework_scores`` table). The store
seeds its catalog tables from here (``store.catalog``); the sim reads GPUs and models from here
directly so that it stands alone without a store.
"""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources
from typing import Any

from errors import ConfigError

SEED_FILES: dict[str, str] = {
    "gpus": "gpus.toml",
    "models": "models.toml",
    "slo_profiles": "slo_profiles.toml",
    "workloads": "workloads.toml",
    "frameworks": "frameworks.toml",
    "criteria": "criteria.toml",
    "framework_scores": "scores.toml",
    "weight_presets": "weight_presets.toml",
}
# the TOML array each file holds, where it is not named after the table
_ARRAY = {"framework_scores": "scores"}


def score_name(framework: str, criterion: str) -> str:
    """The key of one checklist score: ``"<framework>/<criterion>"``."""
    return f"{framework}/{criterion}"


@cache
def _load(kind: str) -> tuple[dict[str, Any], ...]:
    if kind not in SEED_FILES:
        raise ConfigError(f"unknown seed table {kind!r}; known: {sorted(SEED_FILES)}")
    resource = resources.files(__name__).joinpath(SEED_FILES[kind])
    if not resource.is_file():
        raise ConfigError(f"seeds/{SEED_FILES[kind]} is missing from the installation")
    text = resource.read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"seeds/{SEED_FILES[kind]} is not valid TOML: {exc}") from exc
    entries = data.get(_ARRAY.get(kind, kind), [])
    if kind == "framework_scores":
        for i, e in enumerate(entries):
            if not isinstance(e.get("framework"), str) or not isinstance(e.get("criterion"), str):
                raise ConfigError(
                    f"seeds/{SEED_FILES[kind]}: [[scores]] entry {i + 1} needs "
                    "'framework' and 'criterion' (strings)"
                )
            e["name"] = score_name(e["framework"], e["criterion"])
    names = [e.get("name") for e in entries]
    if any(not isinstance(n, str) or not n for n in names) or len(set(names)) != len(names):
        raise ConfigError(f"seeds/{SEED_FILES[kind]}: every entry needs a unique 'name'")
    return tuple(entries)


def entries(kind: str) -> list[dict[str, Any]]:
    """All seed entries of one catalog table (copies: callers may mutate them)."""
    return [dict(e) for e in _load(kind)]


def entry(kind: str, name: str) -> dict[str, Any]:
    """One seed entry by name; the error lists the valid names."""
    for e in _load(kind):
        if e["name"] == name:
            return dict(e)
    valid = ", ".join(e["name"] for e in _load(kind))
    raise ConfigError(f"unknown {kind[:-1].replace('_', ' ')} {name!r}; available: {valid}")
