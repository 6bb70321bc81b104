"""The Select page's view model: which framework to run, from a weighted checklist and from
evidence measured on the user's own endpoints.

:class:`SelectSelection` is what the page asks for (the URL's ``preset``, ``w`` — weights as
``criterion:weight,…`` —, ``must`` — must-have capability tags —, and ``model``, ``gpu``,
``slo`` for the measured evidence); :func:`select_view` resolves it and returns a
:class:`SelectView`: the catalogue (frameworks, criteria, every score with its evidence, source
and date), the measured evidence per framework (best SLO capacity and goodput from the store's
runs of that model on that GPU under that SLO profile, the latest verification, quality
retention, project health), the ranking by weighted total with the must-have filter applied,
each weight's sensitivity and the share of ±20 % weight perturbations each framework wins.

Measured criteria (``kind = "measured"`` in seeds/criteria.toml) are scored from the store,
never from the seed (``analysis.checklist.measured_score``): a framework with no measurement
scores nothing there (counted 0, and listed as missing).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import pandas as pd

from analysis import checklist, slo
from analysis.metrics import finite_number
from errors import ConfigError
from services.commands import slo_profiles
from services.views import compare as compare_view
from store import checklist as checklist_store
from store import project_health, quality_results, runs_table, verifications
from store.db import Store

DEFAULT_PRESET: Final = "online-chat"
DEFAULT_PROFILE: Final = compare_view.DEFAULT_PROFILE
#: The newest runs per framework, model and GPU that measured evidence is drawn from.
EVIDENCE_RUNS: Final = 200
#: Runs read to find the models, GPUs and frameworks measured.
CANDIDATES_LIMIT: Final = 2000
#: Perturbations drawn for the "ranks first" shares, and their spread.
PERTURBATION_SAMPLES: Final = 2000
PERTURBATION_SPREAD: Final = 0.2
#: URL parameters.
PRESET_PARAM: Final = "preset"
WEIGHTS_PARAM: Final = "w"
MUST_PARAM: Final = "must"
MODEL_PARAM: Final = "model"
GPU_PARAM: Final = "gpu"
SLO_PARAM: Final = "slo"


def format_weights(weights: Mapping[str, float]) -> str:
    """``{"a": 2.0, "b": 0.5}`` → ``"a:2,b:0.5"`` (the ``w`` URL parameter; zero weights are
    written too, so that a weight moved to 0 stays 0)."""
    return ",".join(f"{k}:{v:g}" for k, v in sorted(weights.items()))


def parse_weights(text: str | None) -> tuple[tuple[str, float], ...] | None:
    """The ``w`` URL parameter → sorted (criterion, weight) pairs; None when absent. A part
    that is not ``name:number`` (0 to ``MAX_WEIGHT``) is an InputError-free skip: a hand-edited URL
    should not break the page, and the page shows the weights it used."""
    if not text:
        return None
    out: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = part.partition(":")
        try:
            weight = float(value)
        except ValueError:
            continue
        if sep and name.strip() and 0 <= weight <= checklist.MAX_WEIGHT:  # NaN fails too
            out[name.strip()] = weight
    return tuple(sorted(out.items())) or None


def split_tags(text: str | None) -> tuple[str, ...] | None:
    """``"amd,gguf"`` → ``("amd", "gguf")``; None when absent."""
    if text is None:
        return None
    return tuple(sorted({t.strip() for t in text.split(",") if t.strip()}))


@dataclass(frozen=True)
class SelectSelection:
    """What the Select page is asked to show; None fields are resolved by :func:`select_view`.

    ``preset``: a weight preset (None or unknown → :data:`DEFAULT_PRESET`); ``weights``:
    (criterion, weight) pairs overriding the preset's (None: the preset's); ``must_have``:
    capability tags (None: the preset's); ``model``/``gpu``: the measured evidence's model and
    GPU (None → the most measured); ``slo``: its SLO profile (None → :data:`DEFAULT_PROFILE`).
    """

    preset: str | None = None
    weights: tuple[tuple[str, float], ...] | None = None
    must_have: tuple[str, ...] | None = None
    model: str | None = None
    gpu: str | None = None
    slo: str | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, str | None]) -> SelectSelection:
        """The selection a URL's query parameters ask for."""
        return cls(
            preset=params.get(PRESET_PARAM) or None,
            weights=parse_weights(params.get(WEIGHTS_PARAM)),
            must_have=split_tags(params.get(MUST_PARAM)),
            model=params.get(MODEL_PARAM) or None,
            gpu=params.get(GPU_PARAM) or None,
            slo=params.get(SLO_PARAM) or None,
        )

    @property
    def weight_map(self) -> dict[str, float]:
        return dict(self.weights or ())

    def evidence(self) -> EvidenceSelection:
        """The part of the selection that reads the store (the rest is pure ranking)."""
        return EvidenceSelection(model=self.model, gpu=self.gpu, slo=self.slo)


@dataclass(frozen=True)
class EvidenceSelection:
    """The measured evidence's model, GPU and SLO profile (None: resolved by
    :func:`select_basis`)."""

    model: str | None = None
    gpu: str | None = None
    slo: str | None = None


@dataclass(frozen=True)
class Evidence:
    """What the store measured for one framework (``framework``: the catalogue's name)."""

    framework: str
    runs: int = 0
    capacity: float | None = None  # best SLO capacity over its configurations
    capacity_kind: str = ""  # rate (req/s) | concurrency
    capacity_series: str = ""  # the configuration that reached it
    capacity_note: str = ""
    goodput: float | None = None  # best goodput (req/s) of its runs
    verification: Mapping[str, Any] | None = None  # latest verify: passed, failed, version …
    quality: Mapping[str, Any] | None = None  # latest quality run with it as the candidate
    health: Mapping[str, Any] | None = None  # latest project-health fetch
    run_ids: tuple[str, ...] = ()  # the runs its evidence was drawn from (newest first)
    capacity_runs: tuple[str, ...] = ()  # the runs of the configuration that reached capacity

    @property
    def measured(self) -> bool:
        """Whether anything at all was measured for it."""
        return bool(self.runs or self.verification or self.quality)


@dataclass(frozen=True)
class SelectBasis:
    """What the Select page reads from the store for one :class:`EvidenceSelection`: the
    catalogue, every score, the edit history, the presets, the measured evidence and the scores
    the ranking uses. Moving a weight or a must-have ranks it again without reading the store
    (:func:`rank_view`)."""

    selection: EvidenceSelection
    catalog: checklist.Catalog
    scores: pd.DataFrame
    history: pd.DataFrame
    presets: tuple[Mapping[str, Any], ...]
    tag_labels: Mapping[str, str]
    profile_names: tuple[str, ...]
    models: tuple[str, ...]
    gpus: tuple[str, ...]
    evidence: Mapping[str, Evidence]
    scores_used: Mapping[tuple[str, str], float | None]
    other_frameworks: Mapping[str, int] = field(default_factory=dict)
    profile_error: str | None = None


@dataclass(frozen=True)
class SelectView:
    """Everything the Select page shows for a (resolved) :class:`SelectSelection`.

    ``scores``: every score (``store.checklist.scores``) with its evidence, source and date;
    ``scores_used``: (framework, criterion) → 0–5 as ranked (measured criteria filled from
    ``evidence``); ``ranking``, ``sensitivity`` and ``shares`` from ``analysis.checklist``.
    ``other_frameworks``: framework labels in the store's runs that are not in the catalogue
    (e.g. ``sim``), with their run counts: shown, never ranked.
    """

    selection: SelectSelection
    catalog: checklist.Catalog
    scores: pd.DataFrame
    history: pd.DataFrame
    presets: tuple[Mapping[str, Any], ...]
    weights: Mapping[str, float]
    must_have: tuple[str, ...]
    tag_labels: Mapping[str, str]
    profile_names: tuple[str, ...]
    models: tuple[str, ...]
    gpus: tuple[str, ...]
    evidence: Mapping[str, Evidence]
    scores_used: Mapping[tuple[str, str], float | None]
    ranking: checklist.Ranking
    sensitivity: tuple[checklist.WeightRange, ...]
    shares: Mapping[str, float]
    other_frameworks: Mapping[str, int] = field(default_factory=dict)
    profile_error: str | None = None
    problem: str | None = None  # why there is no ranking (every weight at 0)

    def framework_label(self, name: str) -> str:
        """A framework's display name."""
        for f in self.catalog.frameworks:
            if f.name == name:
                return f.display_name or name
        return name


# --- the builder -------------------------------------------------------------------------------


def select_view(store: Store, selection: SelectSelection) -> SelectView:
    """The Select page for ``selection``: :func:`select_basis` (the store's part) ranked by
    :func:`rank_view`."""
    return rank_view(select_basis(store, selection.evidence()), selection)


def select_basis(store: Store, selection: EvidenceSelection) -> SelectBasis:
    """The checklist from the store (seeded, plus the user's edits and presets) and the
    measured evidence for ``selection`` (None fields: the most measured model and GPU among runs
    of catalogued frameworks, the default SLO profile)."""
    entries = checklist_store.catalog_entries(store)
    cat = checklist.Catalog.from_entries(
        entries["frameworks"],
        entries["criteria"],
        entries["framework_scores"],
        entries["weight_presets"],
    )
    profiles = slo_profiles.slo_profiles(store)
    profile_names = tuple(profiles)
    slo_name = _resolve(selection.slo, profile_names, DEFAULT_PROFILE)
    profile: slo.SloProfile | None = None
    profile_error = None
    if slo_name is not None:
        try:
            profile = slo.SloProfile.from_entry(profiles[slo_name])
        except ConfigError as exc:
            profile_error = exc.message

    runs = runs_table.list_runs(store, limit=CANDIDATES_LIMIT)
    runs = runs.assign(catalogue=framework_of(runs.get("framework"), cat.frameworks))
    ours = runs[runs["catalogue"].notna()]
    models = _by_count(ours.get("model"))
    model = _resolve(selection.model, models, models[0] if models else None)
    in_model = ours[ours["model"] == model] if model is not None else ours.iloc[0:0]
    gpus = _by_count(in_model.get("gpu_name"))
    gpu = _resolve(selection.gpu, gpus, gpus[0] if gpus else None)
    measured_runs = in_model[in_model["gpu_name"] == gpu] if gpu is not None else in_model
    other = runs[runs["catalogue"].isna()]["framework"].fillna("unknown").astype(str)
    other_counts = {str(k): int(v) for k, v in other.value_counts().items()}
    evidence = gather_evidence(store, cat, measured_runs, profile, model)
    return SelectBasis(
        selection=EvidenceSelection(model=model, gpu=gpu, slo=slo_name),
        catalog=cat,
        scores=checklist_store.scores(store),
        history=checklist_store.score_history(store),
        presets=tuple(checklist_store.presets(store)),
        tag_labels=checklist.tag_labels(cat.criteria),
        profile_names=profile_names,
        models=tuple(models),
        gpus=tuple(gpus),
        evidence=evidence,
        scores_used=score_table(cat, evidence),
        other_frameworks=other_counts,
        profile_error=profile_error,
    )


def rank_view(basis: SelectBasis, selection: SelectSelection) -> SelectView:
    """Rank ``basis`` under the selection's preset, weights and must-haves (pure; unknown
    names fall back to the preset's, as a hand-edited URL should not break the page)."""
    cat = basis.catalog
    preset_names = [str(p["name"]) for p in basis.presets]
    preset_name = _resolve(selection.preset, preset_names, DEFAULT_PRESET)
    preset = next((p for p in cat.presets if p.name == preset_name), None)
    criteria_names = [c.name for c in cat.criteria]
    weights = {c: 0.0 for c in criteria_names}
    if preset is not None:
        weights.update({k: float(v) for k, v in preset.weights.items()})
    if selection.weights is not None:
        asked = {k: v for k, v in selection.weights if k in weights}
        weights = {c: asked.get(c, 0.0) for c in criteria_names}
    labels = basis.tag_labels
    wanted_tags = (
        selection.must_have
        if selection.must_have is not None
        else tuple(preset.must_have if preset else ())
    )
    must_have = tuple(t for t in wanted_tags if t in labels)
    scores_used = basis.scores_used
    tags = checklist.tags_by_framework(cat.scores)
    names = [f.name for f in cat.frameworks]
    known = cat.known_tags()
    problem = None
    if not any(w > 0 for w in weights.values()):
        problem = "Every weight is 0: give at least one criterion a weight to rank."
        ranking = checklist.Ranking(rows=(), must_have=must_have)
        sensitivity: tuple[checklist.WeightRange, ...] = ()
        shares: dict[str, float] = {}
    else:
        kwargs: dict[str, Any] = {"must_have": must_have, "tags": tags, "known_tags": known}
        ranking = checklist.rank(names, scores_used, weights, **kwargs)
        sensitivity = tuple(checklist.weight_sensitivity(names, scores_used, weights, **kwargs))
        shares = checklist.perturbation_shares(
            names,
            scores_used,
            weights,
            spread=PERTURBATION_SPREAD,
            samples=PERTURBATION_SAMPLES,
            seed=0,
            **kwargs,
        )
    ev = basis.selection
    resolved = SelectSelection(
        preset=preset_name,
        weights=tuple(sorted(weights.items())),
        must_have=must_have,
        model=ev.model,
        gpu=ev.gpu,
        slo=ev.slo,
    )
    return SelectView(
        selection=resolved,
        catalog=cat,
        scores=basis.scores,
        history=basis.history,
        presets=basis.presets,
        weights=weights,
        must_have=must_have,
        tag_labels=labels,
        profile_names=basis.profile_names,
        models=basis.models,
        gpus=basis.gpus,
        evidence=basis.evidence,
        scores_used=scores_used,
        ranking=ranking,
        sensitivity=sensitivity,
        shares=shares,
        other_frameworks=basis.other_frameworks,
        profile_error=basis.profile_error,
        problem=problem,
    )


def _resolve(wanted: str | None, names: Sequence[str], default: str | None) -> str | None:
    if wanted in names:
        return wanted
    if default in names:
        return default
    return names[0] if names else None


def _by_count(values: pd.Series | None) -> list[str]:
    """Distinct non-empty values, the most frequent first (ties by name)."""
    if values is None or values.empty:
        return []
    counts = values.dropna().astype(str).value_counts()
    return sorted(counts.index, key=lambda v: (-int(counts[v]), v))


def framework_of(labels: pd.Series | None, frameworks: Sequence[checklist.Framework]) -> pd.Series:
    """Each run's framework label → the catalogue's framework name (by name or alias, case
    insensitive), or None (``sim``, ``unknown``, a framework the catalogue lacks)."""
    if labels is None:
        return pd.Series(dtype=object)
    known: dict[str, str] = {}
    for f in frameworks:
        for alias in (f.name, *f.aliases):
            known[alias.lower()] = f.name
    return pd.Series(
        [known.get(str(v).lower()) if isinstance(v, str) else None for v in labels],
        index=labels.index,
        dtype=object,
    )


def gather_evidence(
    store: Store,
    cat: checklist.Catalog,
    runs: pd.DataFrame,
    profile: slo.SloProfile | None,
    model: str | None,
) -> dict[str, Evidence]:
    """Per catalogue framework: its runs' best SLO capacity and goodput under ``profile``
    (``runs``: its runs of the chosen model and GPU), its latest verification, the latest
    quality run with it as the candidate (of ``model`` when one exists), its project health."""
    verified = _latest_by_framework(verifications.latest_verifications(store), cat, "started_at")
    qualities = quality_results.quality_runs(store)
    if not qualities.empty:
        qualities = qualities.rename(columns={"candidate_framework": "framework"})
    quality = _latest_by_framework(qualities, cat, "started_at", model=model)
    health = _latest_by_framework(project_health.latest_project_health(store), cat, "fetched_at")
    out: dict[str, Evidence] = {}
    for f in cat.frameworks:
        mine = runs[runs["catalogue"] == f.name].head(EVIDENCE_RUNS) if not runs.empty else runs
        ev = Evidence(
            f.name,
            verification=verified.get(f.name),
            quality=quality.get(f.name),
            health=health.get(f.name),
        )
        if not mine.empty and profile is not None:
            ev = _with_capacity(store, ev, mine, profile)
        out[f.name] = ev
    return out


def _with_capacity(
    store: Store, ev: Evidence, runs: pd.DataFrame, profile: slo.SloProfile
) -> Evidence:
    rows = compare_view.read_rows(
        store, runs["run_id"].astype(str).tolist(), profile, compare_view.DEFAULT_GROUPING
    )
    best: tuple[float, str, str, str] | None = None
    for cap in compare_view.capacity(rows):
        value = cap.capacity.interpolated or cap.capacity.measured
        if value is not None and (best is None or value > best[0]):
            best = (value, cap.load_kind, cap.capacity.series, cap.capacity.note)
    goodput = (
        pd.to_numeric(rows["goodput"], errors="coerce").max()
        if len(rows) and "goodput" in rows
        else None
    )
    run_ids = tuple(runs["run_id"].astype(str))
    ev = replace(ev, runs=len(runs), goodput=finite_number(goodput), run_ids=run_ids)
    if best is not None:
        behind = rows.loc[rows["series"].astype(str) == best[2], "run_id"] if len(rows) else ()
        ev = replace(
            ev,
            capacity=best[0],
            capacity_kind=best[1],
            capacity_series=best[2],
            capacity_note=best[3],
            capacity_runs=tuple(str(r) for r in behind),
        )
    return ev


def _latest_by_framework(
    df: pd.DataFrame, cat: checklist.Catalog, when: str, *, model: str | None = None
) -> dict[str, dict[str, Any]]:
    """The newest row per catalogue framework (rows of ``model`` preferred when given)."""
    if df.empty or "framework" not in df:
        return {}
    df = df.assign(catalogue=framework_of(df["framework"], cat.frameworks))
    df = df[df["catalogue"].notna()].sort_values(when, ascending=False, kind="stable")
    out: dict[str, dict[str, Any]] = {}
    for name, group in df.groupby("catalogue", sort=False):
        if model is not None and "candidate_model" in group:
            same = group[group["candidate_model"] == model]
            group = same if not same.empty else group
        out[str(name)] = {str(k): v for k, v in group.iloc[0].to_dict().items()}
    return out


def score_table(
    cat: checklist.Catalog, evidence: Mapping[str, Evidence]
) -> dict[tuple[str, str], float | None]:
    """(framework, criterion) → 0–5: the checklist scores as stored, the measured criteria
    from ``evidence`` (SLO capacity relative to the best framework measured)."""
    table: dict[tuple[str, str], float | None] = {
        (s.framework, s.criterion): s.score for s in cat.scores
    }
    measured = {
        "slo_capacity": {n: e.capacity for n, e in evidence.items()},
        "quality_retention": {
            n: finite_number(e.quality.get("retention")) if e.quality else None
            for n, e in evidence.items()
        },
        "verification": {n: _pass_share(e.verification) for n, e in evidence.items()},
    }
    for criterion in cat.criteria:
        if criterion.kind != "measured" or criterion.metric not in measured:
            continue
        values = measured[criterion.metric]
        known = [v for v in values.values() if v is not None]
        best = max(known) if known else None
        for name, value in values.items():
            table[(name, criterion.name)] = checklist.measured_score(criterion.metric, value, best)
    return table


def _pass_share(verification: Mapping[str, Any] | None) -> float | None:
    if not verification:
        return None
    passed, failed = (
        finite_number(verification.get("passed")),
        finite_number(verification.get("failed")),
    )
    if passed is None or failed is None or passed + failed <= 0:
        return None
    return passed / (passed + failed)
