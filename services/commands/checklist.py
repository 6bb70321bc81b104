"""``servescope checklist``: the framework evaluation checklist from the command line, and the
validated writes the Select page makes (a score edit, a weight preset).

    servescope checklist rank [--preset P] [--weight CRITERION=W …] [--must-have TAG …]
                              [--model M] [--gpu G] [--slo PROFILE]
    servescope checklist load FILE.toml [--by NAME]

``rank`` prints the ranking the Select page shows (same view model), with each weight's range
and the share of ±20 % perturbations each framework wins. ``load`` takes a TOML file shaped like
seeds/scores.toml (``[[scores]]``) and/or seeds/weight_presets.toml (``[[weight_presets]]``):
every entry is validated against the catalogue first, and then all are stored in one
transaction — a malformed entry stores nothing, and the error names the file, the entry, the key
and what is accepted.
"""

from __future__ import annotations

import argparse
import getpass
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from analysis import checklist, toml_input
from errors import ConfigError, InputError
from services.views import select
from store import checklist as checklist_store
from store.db import Store


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (containers)
        return "unknown"


def _catalog(
    store: Store,
    scores: Sequence[Mapping[str, Any]] = (),
    presets: Sequence[Mapping[str, Any]] = (),
) -> checklist.Catalog:
    """The stored catalogue with ``scores`` and ``presets`` applied on top, validated whole."""
    entries = checklist_store.catalog_entries(store)
    merged_scores = {(s["framework"], s["criterion"]): dict(s) for s in entries["framework_scores"]}
    for s in scores:
        merged_scores[(s.get("framework"), s.get("criterion"))] = dict(s)
    merged_presets = {p["name"]: dict(p) for p in entries["weight_presets"]}
    for p in presets:
        merged_presets[p.get("name")] = dict(p)
    return checklist.Catalog.from_entries(
        entries["frameworks"],
        entries["criteria"],
        list(merged_scores.values()),
        list(merged_presets.values()),
    )


def score_entry(values: Mapping[str, Any]) -> dict[str, Any]:
    """A score edit's ``values`` as a validated entry (a ConfigError names the bad field)."""
    s = checklist.Score.from_entry(values)
    return {
        "framework": s.framework,
        "criterion": s.criterion,
        "score": s.score,
        "evidence": s.evidence,
        "source_url": s.source_url,
        "checked_on": s.checked_on,
        "tags": list(s.tags),
    }


def save_scores(
    store: Store, entries: Sequence[Mapping[str, Any]], *, edited_by: str | None = None
) -> int:
    """Validate ``entries`` (score edits) against the catalogue, then store them all, each with
    its edit-history row, in one transaction. Returns how many were stored."""
    valid = [score_entry(e) for e in entries]
    _catalog(store, scores=valid)
    return checklist_store.edit_scores(store, valid, edited_by=edited_by or _user())


def preset_entry(values: Mapping[str, Any]) -> dict[str, Any]:
    """A weight preset's ``values`` as a validated entry (weights, must-haves)."""
    p = checklist.WeightPreset.from_entry(values)
    return {
        "name": p.name,
        "description": p.description,
        "weights": dict(p.weights),
        "must_have": list(p.must_have),
        "source": p.source or "user",
    }


def save_preset(store: Store, values: Mapping[str, Any]) -> str:
    """Validate a weight preset against the criteria and tags, and keep it as the user's own
    (reseeding never touches it). Returns its name."""
    entry = preset_entry(values)
    _catalog(store, presets=[entry])
    checklist_store.save_preset(store, entry)
    return str(entry["name"])


def load_file(store: Store, path: Path, *, edited_by: str | None = None) -> tuple[int, int]:
    """Store the ``[[scores]]`` and ``[[weight_presets]]`` of the TOML file ``path``: all
    validated first, then written in one transaction each. Returns (scores, presets)."""
    try:
        data = toml_input.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise InputError(f"{path}: no such file") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot be read: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML: {exc}") from exc
    unknown = sorted(set(data) - {"scores", "weight_presets"})
    if unknown:
        raise InputError(
            f"{path}: unknown table(s) {', '.join(unknown)}; a checklist file holds "
            "[[scores]] and/or [[weight_presets]]"
        )
    raw_scores, raw_presets = data.get("scores", []), data.get("weight_presets", [])
    if not isinstance(raw_scores, list) or not isinstance(raw_presets, list):
        raise InputError(f"{path}: 'scores' and 'weight_presets' must be arrays of tables ([[…]])")
    if not raw_scores and not raw_presets:
        raise InputError(f"{path}: no [[scores]] or [[weight_presets]] entries")
    for key, raw in (("scores", raw_scores), ("weight_presets", raw_presets)):
        bad = next((i for i, e in enumerate(raw) if not isinstance(e, dict)), None)
        if bad is not None:
            raise InputError(
                f"{path}: {key} entry {bad + 1} is {raw[bad]!r}; expected a table ([[{key}]])"
            )
    try:
        scores = [score_entry(e) for e in raw_scores]
        presets = [preset_entry(e) for e in raw_presets]
        _catalog(store, scores=scores, presets=presets)
    except ConfigError as exc:
        raise InputError(f"{path}: {exc.message}", hint=exc.hint) from exc
    if scores:
        checklist_store.edit_scores(store, scores, edited_by=edited_by or _user())
    for p in presets:
        checklist_store.save_preset(store, p)
    return len(scores), len(presets)


# --- the command -------------------------------------------------------------------------------


def parse_weight(text: str) -> tuple[str, float]:
    """``"scheduling=5"`` → ("scheduling", 5.0); an InputError says what is accepted."""
    name, sep, value = text.partition("=")
    try:
        weight = float(value)
    except ValueError:
        weight = float("nan")
    if not sep or not name.strip() or not 0 <= weight <= checklist.MAX_WEIGHT:
        raise InputError(
            f"--weight {text!r} is not CRITERION=WEIGHT with a weight from 0 to "
            f"{checklist.MAX_WEIGHT:g} (e.g. --weight scheduling=5 licence=1)"
        )
    return name.strip(), weight


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "checklist",
        help="rank frameworks on the weighted evaluation checklist; load score edits",
        description="The framework evaluation checklist (the Select page) on the command line.",
    )
    p.add_argument("--db", help="store URL (default: $SERVESCOPE_DB or the DuckDB file)")
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    r = sub.add_parser("rank", help="print the ranking, weight ranges and perturbation shares")
    r.add_argument("--preset", help="weight preset (default: online-chat)")
    r.add_argument(
        "--weight",
        action="extend",
        nargs="+",
        default=[],
        metavar="CRITERION=W",
        help="override weights (space-separated or repeated); the preset's others stay",
    )
    r.add_argument(
        "--must-have",
        action="extend",
        nargs="+",
        default=None,
        metavar="TAG",
        help="capabilities every framework must have, e.g. amd gguf (space-separated or repeated)",
    )
    r.add_argument("--model", help="model whose runs feed the measured criteria")
    r.add_argument("--gpu", help="GPU whose runs feed the measured criteria")
    r.add_argument(
        "--slo", help="SLO profile for measured SLO capacity (default: interactive-chat)"
    )
    r.set_defaults(func=run_rank)
    ld = sub.add_parser("load", help="validate and store score edits / weight presets from TOML")
    ld.add_argument("file", type=Path, metavar="FILE.toml")
    ld.add_argument("--by", help="who made the edits (default: the OS user)")
    ld.set_defaults(func=run_load)


def _open(args: argparse.Namespace) -> Store:
    from store.lifecycle import open_store

    return open_store(args.db)


def rank_view(store: Store, args: argparse.Namespace) -> select.SelectView:
    """The Select view for ``checklist rank``'s arguments; unknown names are errors here (the
    page falls back to defaults, a command must not)."""
    entries = checklist_store.catalog_entries(store)
    presets = [p["name"] for p in entries["weight_presets"]]
    if args.preset and args.preset not in presets:
        raise ConfigError(f"unknown weight preset {args.preset!r}; presets: {', '.join(presets)}")
    criteria = [c["name"] for c in entries["criteria"]]
    asked = [parse_weight(w) for w in args.weight]
    bad = [n for n, _ in asked if n not in criteria]
    if bad:
        raise ConfigError(
            f"unknown criterion {bad[0]!r} in --weight; criteria: {', '.join(criteria)}"
        )
    first = select.select_view(store, select.SelectSelection(preset=args.preset))
    weights = dict(first.weights) | dict(asked)
    if args.must_have is not None:
        unknown = [t for t in args.must_have if t not in first.tag_labels]
        if unknown:
            raise ConfigError(
                f"unknown capability {unknown[0]!r} in --must-have; "
                f"tags: {', '.join(sorted(first.tag_labels))}"
            )
    for name, wanted, choices in (
        ("model", args.model, first.models),
        ("GPU", args.gpu, first.gpus),
        ("SLO profile", args.slo, first.profile_names),
    ):
        if wanted and wanted not in choices:
            raise ConfigError(
                f"no {name} {wanted!r} among the measured ones; "
                f"available: {', '.join(choices) or 'none (no runs of a catalogued framework)'}"
            )
    return select.select_view(
        store,
        select.SelectSelection(
            preset=first.selection.preset,
            weights=tuple(sorted(weights.items())),
            must_have=tuple(args.must_have) if args.must_have is not None else None,
            model=args.model,
            gpu=args.gpu,
            slo=args.slo,
        ),
    )


def run_rank(args: argparse.Namespace) -> int:
    """Print the ranking for the arguments."""
    store = _open(args)
    try:
        view = rank_view(store, args)
    finally:
        store.dispose()
    for line in rank_lines(view):
        print(line)
    return 0


def rank_lines(view: select.SelectView) -> list[str]:
    """The ranking as text: one line per framework, the exclusions, the weight ranges."""
    sel = view.selection
    out = [f"preset: {sel.preset}   must-have: {', '.join(view.must_have) or 'none'}"]
    if sel.model:
        out.append(f"measured evidence: {sel.model} on {sel.gpu or 'any GPU'} under {sel.slo}")
    else:
        out.append("measured evidence: none (no runs of a catalogued framework in the store)")
    out.append(f"{'#':>2}  {'framework':<16} {'score':>5}  {'first in':>8}  missing")
    for row in view.ranking.rows:
        share = view.shares.get(row.framework, 0.0)
        missing = ", ".join(row.missing) or "-"
        out.append(
            f"{row.rank:>2}  {view.framework_label(row.framework):<16} {row.total:5.2f}"
            f"  {share:8.0%}  {missing}"
        )
    for ex in view.ranking.excluded:
        out.append(f"  out: {view.framework_label(ex.framework)} lacks {', '.join(ex.lacking)}")
    if view.sensitivity:
        out.append("weights (the leader stays first within):")
        for wr in view.sensitivity:
            if wr.weight == 0 and wr.upper is None:
                continue
            upper = "∞" if wr.upper is None else f"{wr.upper:g}"
            out.append(f"  {wr.criterion:<20} {wr.weight:g} in [{wr.lower:g}, {upper}]")
    return out


def run_load(args: argparse.Namespace) -> int:
    """Validate and store the file's score edits and presets."""
    store = _open(args)
    try:
        scores, presets = load_file(store, args.file, edited_by=args.by)
    finally:
        store.dispose()
    print(f"stored {scores} score(s) and {presets} weight preset(s) from {args.file}")
    return 0
