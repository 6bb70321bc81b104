"""The framework evaluation checklist: catalog entries, validation, scoring, sensitivity. Pure.

The catalog (``seeds/frameworks.toml``, ``criteria.toml``, ``scores.toml``,
``weight_presets.toml``, or the store's copy of them) enters as plain mappings; each ``from_entry``
validates one entry and :func:`validate_catalog` cross-checks them. Every error is one line of
:class:`errors.ConfigError` naming the entry, the key, what was wrong and what is accepted.

Scoring (the Select page):

- A criterion's ``kind`` is ``"checklist"`` (scored 0–5 per framework in ``scores.toml``) or
  ``"measured"`` (``metric`` ``slo_capacity`` | ``quality_retention`` | ``verification``; the caller
  turns a measurement into 0–5 with :func:`measured_score`).
- **Total** of framework *f*: ``Σ_c w_c × s_fc / Σ_c w_c`` over the criteria with ``w_c > 0``
  (weights are relative: normalised, so the total is on the 0–5 scale). A missing score counts as
  0 and is listed in the row's ``missing``. A row's ``contributions`` (``w_c × s_fc / Σ w``) sum to
  its total.
- **Must-have tags**: a framework has a tag when any of its scores lists it
  (:func:`tags_by_framework`); one lacking any must-have tag is left out of the ranking and listed
  in :attr:`Ranking.excluded`.
- **Order**: total descending, ties by name ascending. Totals are compared rounded to
  :data:`TOTAL_DECIMALS` decimals so that mathematically equal totals tie despite float noise.
- **Sensitivity** (:func:`weight_sensitivity`): with the other weights fixed, the total of *f* as
  a function of one weight *x* is ``(A_f + x·s_f) / (W + x)``; the common denominator drops out of
  every comparison, so the leader changes exactly where two lines ``A_f + x·s_f`` cross.
- **Perturbation** (:func:`perturbation_shares`): every non-zero weight times an independent
  uniform factor in ``[1 − spread, 1 + spread]``; the share of samples each framework leads.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from types import MappingProxyType
from typing import Any, Final, TypeGuard
from urllib.parse import urlsplit

import numpy as np

from errors import ConfigError

#: Score range of every criterion (checklist scores and converted measurements).
SCORE_MIN: Final = 0.0
SCORE_MAX: Final = 5.0
#: The largest weight a criterion may have (weights are relative: 1,000 against 1 already
#: silences a criterion; 1e308 overflowed the weighted sums to NaN).
MAX_WEIGHT: Final = 1000.0
#: The two kinds of criteria.
KINDS: Final = ("checklist", "measured")
#: The measurements a ``measured`` criterion can be fed from (see :func:`measured_score`).
METRICS: Final = ("slo_capacity", "quality_retention", "verification")
#: Totals are compared at this many decimals (ties despite float noise), in rank and perturbation.
TOTAL_DECIMALS: Final = 9

_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
_NO_TAGS: Final[Mapping[str, frozenset[str]]] = MappingProxyType({})


# --- entry validation helpers ------------------------------------------------------------------


@dataclass(frozen=True)
class _Where:
    """Where an entry comes from, for one-line errors: ``"<file>: <entry>: <problem>"``."""

    file: str
    entry: str

    def fail(self, problem: str) -> ConfigError:
        return ConfigError(f"{self.file}: {self.entry}: {problem}")

    def text(self, entry: Mapping[str, Any], key: str, *, required: bool = False) -> str:
        value = entry.get(key)
        if value is None:
            if required:
                raise self.fail(f"'{key}' is missing; expected a non-empty string")
            return ""
        if not isinstance(value, str) or (required and not value.strip()):
            raise self.fail(f"'{key}' is {value!r}; expected a non-empty string")
        return value

    def texts(self, entry: Mapping[str, Any], key: str) -> tuple[str, ...]:
        value = entry.get(key)
        if value is None:
            return ()
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise self.fail(f"'{key}' is {value!r}; expected a list of strings")
        for item in value:
            if not isinstance(item, str) or not item.strip():
                raise self.fail(f"'{key}' holds {item!r}; expected non-empty strings")
        if len(set(value)) != len(value):
            dupes = sorted({v for v in value if list(value).count(v) > 1})
            raise self.fail(f"'{key}' repeats {', '.join(dupes)}; list each once")
        return tuple(value)

    def url(self, entry: Mapping[str, Any], key: str, *, required: bool = False) -> str:
        value = self.text(entry, key, required=required)
        if value and not _is_http_url(value):
            raise self.fail(f"'{key}' {value!r} is not an http(s) URL; expected https://…")
        return value


def _is_http_url(value: str) -> bool:
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.netloc) and " " not in value


def _is_number(value: object) -> TypeGuard[float]:
    """A real number (int, float, numpy's), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _name(entry: Mapping[str, Any], file: str, what: str) -> str:
    value = entry.get("name")
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{file}: a {what} entry has name {value!r}; expected a non-empty string")
    return value


def _join(names: Iterable[str]) -> str:
    items = sorted(set(names))
    return ", ".join(items) if items else "(none)"


# --- catalog entries ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Framework:
    """An inference framework the checklist scores (``seeds/frameworks.toml``)."""

    name: str  # the runs.framework value, e.g. "vllm"
    display_name: str
    repo: str = ""  # GitHub owner/name
    homepage: str = ""
    licence: str = ""
    aliases: tuple[str, ...] = ()
    serve: str = ""
    source: str = ""

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> Framework:
        """Validate one ``[[frameworks]]`` entry; unknown keys are ignored."""
        name = _name(entry, "frameworks.toml", "framework")
        at = _Where("frameworks.toml", f"framework {name!r}")
        repo = at.text(entry, "repo")
        if repo and not _REPO.fullmatch(repo):
            raise at.fail(
                f"'repo' {repo!r} is not a GitHub owner/name; expected e.g. 'org/project'"
            )
        return cls(
            name=name,
            display_name=at.text(entry, "display_name") or name,
            repo=repo,
            homepage=at.url(entry, "homepage"),
            licence=at.text(entry, "licence"),
            aliases=at.texts(entry, "aliases"),
            serve=at.text(entry, "serve"),
            source=at.text(entry, "source"),
        )


@dataclass(frozen=True)
class Criterion:
    """One checklist criterion (``seeds/criteria.toml``).

    ``tags`` is the capability vocabulary (tag → label) that must-have filters use; ``metric`` is
    set for ``kind == "measured"`` criteria only.
    """

    name: str
    display_name: str
    kind: str  # one of KINDS
    category: str = ""
    description: str = ""
    items: tuple[str, ...] = ()
    tags: dict[str, str] = field(default_factory=dict, hash=False)
    metric: str | None = None  # one of METRICS when kind == "measured"
    source: str = ""

    @property
    def vocabulary(self) -> frozenset[str]:
        """The tags a score for this criterion may list."""
        return frozenset(self.tags)

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> Criterion:
        """Validate one ``[[criteria]]`` entry; unknown keys are ignored."""
        name = _name(entry, "criteria.toml", "criterion")
        at = _Where("criteria.toml", f"criterion {name!r}")
        kind = entry.get("kind")
        if kind not in KINDS:
            raise at.fail(f"'kind' is {kind!r}; accepted: {', '.join(KINDS)}")
        metric = entry.get("metric")
        if kind == "measured" and metric not in METRICS:
            raise at.fail(
                f"'metric' is {metric!r}; a measured criterion needs one of: {', '.join(METRICS)}"
            )
        if kind == "checklist" and metric is not None:
            raise at.fail(
                f"'metric' {metric!r} is set on a checklist criterion; "
                'only kind = "measured" criteria take a metric'
            )
        raw_tags = entry.get("tags", {})
        if not isinstance(raw_tags, Mapping):
            raise at.fail(f"'tags' is {raw_tags!r}; expected a table of tag = \"label\"")
        tags: dict[str, str] = {}
        for tag, label in raw_tags.items():
            if not isinstance(tag, str) or not tag.strip():
                raise at.fail(f"'tags' has the tag {tag!r}; expected non-empty names")
            if not isinstance(label, str) or not label.strip():
                raise at.fail(f"'tags.{tag}' is {label!r}; expected a non-empty label")
            tags[tag] = label
        return cls(
            name=name,
            display_name=at.text(entry, "display_name") or name,
            kind=kind,
            category=at.text(entry, "category"),
            description=at.text(entry, "description"),
            items=at.texts(entry, "items"),
            tags=tags,
            metric=metric if kind == "measured" else None,
            source=at.text(entry, "source"),
        )


@dataclass(frozen=True)
class Score:
    """One framework's 0–5 score on one checklist criterion, with its evidence (``scores.toml``)."""

    framework: str
    criterion: str
    score: float
    evidence: str  # one line
    source_url: str  # http(s)
    checked_on: str  # ISO date, YYYY-MM-DD
    tags: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """``"<framework>/<criterion>"``, the key seeds and the store use."""
        return f"{self.framework}/{self.criterion}"

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> Score:
        """Validate one ``[[scores]]`` entry; a ``datetime.date`` checked_on becomes ISO text."""
        fw, crit = entry.get("framework"), entry.get("criterion")
        if not isinstance(fw, str) or not fw.strip() or not isinstance(crit, str) or not crit:
            raise ConfigError(
                f"scores.toml: a score entry has framework {fw!r} and criterion {crit!r}; "
                "expected non-empty strings"
            )
        at = _Where("scores.toml", f"{fw}/{crit}")
        value = entry.get("score")
        if not _is_number(value):
            raise at.fail(f"score {value!r} is not a number; expected a number from 0 to 5")
        score = float(value)
        if not (SCORE_MIN <= score <= SCORE_MAX):  # NaN fails too
            raise at.fail(f"score {value!r} is outside 0–5")
        evidence = at.text(entry, "evidence", required=True).strip()
        if "\n" in evidence or "\r" in evidence:
            raise at.fail("'evidence' spans several lines; expected one line")
        return cls(
            framework=fw,
            criterion=crit,
            score=score,
            evidence=evidence,
            source_url=at.url(entry, "source_url", required=True),
            checked_on=_iso_date(at, entry.get("checked_on")),
            tags=at.texts(entry, "tags"),
        )


def _iso_date(at: _Where, value: object) -> str:
    if isinstance(value, datetime):
        raise at.fail(f"'checked_on' {value!r} has a time; expected a date, YYYY-MM-DD")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, str) and _ISO_DATE.fullmatch(value):
        try:
            return date.fromisoformat(value).isoformat()
        except ValueError:
            pass
    raise at.fail(f"'checked_on' is {value!r}; expected an ISO date, YYYY-MM-DD")


@dataclass(frozen=True)
class WeightPreset:
    """A named weighting of the criteria and its must-have tags (``seeds/weight_presets.toml``).

    Criteria missing from ``weights`` weigh 0; weights are relative (normalised when ranking).
    """

    name: str
    weights: dict[str, float] = field(hash=False)
    must_have: tuple[str, ...] = ()
    description: str = ""
    source: str = ""

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> WeightPreset:
        """Validate one ``[[weight_presets]]`` entry: weights from 0 to :data:`MAX_WEIGHT`, not
        all zero."""
        name = _name(entry, "weight_presets.toml", "weight preset")
        at = _Where("weight_presets.toml", f"weight preset {name!r}")
        raw = entry.get("weights")
        if not isinstance(raw, Mapping) or not raw:
            raise at.fail(f"'weights' is {raw!r}; expected a table of criterion = weight")
        weights: dict[str, float] = {}
        for crit, w in raw.items():
            if not _is_number(w) or not 0 <= w <= MAX_WEIGHT:  # NaN fails too
                raise at.fail(
                    f"weight of {crit!r} is {w!r}; expected a number from 0 to {MAX_WEIGHT:g}"
                )
            weights[str(crit)] = float(w)
        if not any(w > 0 for w in weights.values()):
            raise at.fail("all weights are 0; give at least one criterion a weight above 0")
        return cls(
            name=name,
            weights=weights,
            must_have=at.texts(entry, "must_have"),
            description=at.text(entry, "description"),
            source=at.text(entry, "source"),
        )


# --- the catalog -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Catalog:
    """The checklist's validated, cross-checked catalog (build with :meth:`from_entries`)."""

    frameworks: tuple[Framework, ...]
    criteria: tuple[Criterion, ...]
    scores: tuple[Score, ...]
    presets: tuple[WeightPreset, ...]

    @classmethod
    def from_entries(
        cls,
        frameworks: Iterable[Mapping[str, Any]],
        criteria: Iterable[Mapping[str, Any]],
        scores: Iterable[Mapping[str, Any]],
        presets: Iterable[Mapping[str, Any]],
    ) -> Catalog:
        """Validate raw entries (e.g. ``seeds.entries("frameworks")``) one by one, then together."""
        return validate_catalog(
            [Framework.from_entry(e) for e in frameworks],
            [Criterion.from_entry(e) for e in criteria],
            [Score.from_entry(e) for e in scores],
            [WeightPreset.from_entry(e) for e in presets],
        )

    def framework_names(self) -> list[str]:
        """The frameworks' names, in catalog order."""
        return [f.name for f in self.frameworks]

    def criterion(self, name: str) -> Criterion:
        """One criterion by name; the error lists the valid names."""
        for c in self.criteria:
            if c.name == name:
                return c
        raise ConfigError(f"unknown criterion {name!r}; criteria: {_join(self._criteria())}")

    def preset(self, name: str) -> WeightPreset:
        """One weight preset by name; the error lists the valid names."""
        for p in self.presets:
            if p.name == name:
                return p
        raise ConfigError(
            f"unknown weight preset {name!r}; presets: {_join(p.name for p in self.presets)}"
        )

    def checklist_scores(self) -> dict[tuple[str, str], float]:
        """``(framework, criterion) → score`` of every checklist score (:func:`rank`'s input)."""
        return {(s.framework, s.criterion): s.score for s in self.scores}

    def tags_by_framework(self) -> dict[str, frozenset[str]]:
        """Every framework's tags (empty when none of its scores lists one)."""
        have = tags_by_framework(self.scores)
        return {f.name: have.get(f.name, frozenset()) for f in self.frameworks}

    def known_tags(self) -> frozenset[str]:
        """Every tag in some criterion's vocabulary (what must-have filters may ask for)."""
        return frozenset(tag_labels(self.criteria))

    def _criteria(self) -> list[str]:
        return [c.name for c in self.criteria]


def _unique(names: Iterable[str], what: str) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise ConfigError(f"{what} {n!r} is defined twice; each must be unique")
        seen.add(n)


def validate_catalog(
    frameworks: Sequence[Framework],
    criteria: Sequence[Criterion],
    scores: Sequence[Score],
    presets: Sequence[WeightPreset],
) -> Catalog:
    """Cross-check validated entries and return them as a :class:`Catalog`.

    Checks: unique names; a tag's label is the same in every criterion that defines it; a score's
    framework and criterion exist, the criterion is a checklist one, its tags are in the
    criterion's vocabulary, one score per pair; a preset's weights name known criteria and its
    must-have tags are in some criterion's vocabulary. Raises ConfigError (one line) on the first
    problem.
    """
    _unique((f.name for f in frameworks), "frameworks.toml: framework")
    _unique((c.name for c in criteria), "criteria.toml: criterion")
    _unique((p.name for p in presets), "weight_presets.toml: weight preset")
    _unique((s.name for s in scores), "scores.toml: score")
    labels: dict[str, tuple[str, str]] = {}
    for c in criteria:
        for tag, label in c.tags.items():
            if tag in labels and labels[tag][1] != label:
                other, first = labels[tag]
                raise ConfigError(
                    f"criteria.toml: criterion {c.name!r}: tag {tag!r} is labelled {label!r} "
                    f"but {first!r} in criterion {other!r}; a tag has one label"
                )
            labels.setdefault(tag, (c.name, label))
    fw_names = {f.name for f in frameworks}
    by_name = {c.name: c for c in criteria}
    checklist = [c.name for c in criteria if c.kind == "checklist"]
    for s in scores:
        at = _Where("scores.toml", s.name)
        if s.framework not in fw_names:
            raise at.fail(f"unknown framework {s.framework!r}; frameworks: {_join(fw_names)}")
        crit = by_name.get(s.criterion)
        if crit is None:
            raise at.fail(
                f"unknown criterion {s.criterion!r}; checklist criteria: {_join(checklist)}"
            )
        if crit.kind != "checklist":
            raise at.fail(
                f"criterion {s.criterion!r} is measured ({crit.metric}), fed from measurements; "
                f"scores are for checklist criteria: {_join(checklist)}"
            )
        for tag in s.tags:
            if tag not in crit.tags:
                raise at.fail(
                    f"tag {tag!r} is not in {crit.name}'s vocabulary; tags: {_join(crit.tags)}"
                )
    for p in presets:
        at = _Where("weight_presets.toml", f"weight preset {p.name!r}")
        for crit_name in p.weights:
            if crit_name not in by_name:
                raise at.fail(f"unknown criterion {crit_name!r}; criteria: {_join(by_name)}")
        for tag in p.must_have:
            if tag not in labels:
                raise at.fail(f"unknown must-have tag {tag!r}; tags: {_join(labels)}")
    return Catalog(tuple(frameworks), tuple(criteria), tuple(scores), tuple(presets))


def tags_by_framework(scores: Iterable[Score]) -> dict[str, frozenset[str]]:
    """Each scored framework's tags: the union of the tags its scores list (may be empty)."""
    out: dict[str, set[str]] = {}
    for s in scores:
        out.setdefault(s.framework, set()).update(s.tags)
    return {fw: frozenset(tags) for fw, tags in out.items()}


def tag_labels(criteria: Iterable[Criterion]) -> dict[str, str]:
    """Every tag of the criteria's vocabularies → its label (the first definition wins)."""
    out: dict[str, str] = {}
    for c in criteria:
        for tag, label in c.tags.items():
            out.setdefault(tag, label)
    return out


# --- measured evidence -------------------------------------------------------------------------


def measured_score(metric: str, value: float | None, best: float | None = None) -> float | None:
    """A measurement on the 0–5 scale of a ``measured`` criterion; None when there is none.

    - ``slo_capacity``: ``5 × value / best`` (``best`` the highest capacity among the frameworks;
      None when ``value`` is None or ``best`` is None or ≤ 0).
    - ``quality_retention``: ``5 × min(value, 1)`` (``value`` = candidate / reference accuracy).
    - ``verification``: ``5 × value`` (``value`` = share of the checks passed, 0–1).

    A NaN value counts as None. Raises ConfigError for an unknown metric, a negative value, a
    capacity above ``best`` or a share above 1.
    """
    if metric not in METRICS:
        raise ConfigError(f"unknown metric {metric!r}; metrics: {', '.join(METRICS)}")
    if value is None or math.isnan(value):
        return None
    if value < 0:
        raise ConfigError(f"{metric}: value {value!r} is negative; expected a value ≥ 0")
    if metric == "slo_capacity":
        if best is None or math.isnan(best) or best <= 0:
            return None
        if value > best:
            raise ConfigError(
                f"slo_capacity: value {value!r} is above best {best!r}; best is the highest value"
            )
        return SCORE_MAX * value / best
    if metric == "quality_retention":
        return SCORE_MAX * min(value, 1.0)
    if value > 1:
        raise ConfigError(f"verification: share {value!r} is above 1; expected a share 0–1")
    return SCORE_MAX * value


# --- ranking -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankedFramework:
    """One row of a :class:`Ranking`."""

    framework: str
    total: float  # 0–5
    rank: int  # 1-based position (ties are ordered by name)
    contributions: dict[str, float] = field(hash=False)  # criterion → w_c × s_fc / Σw
    missing: tuple[str, ...] = ()  # weighted criteria without a score (counted as 0)


@dataclass(frozen=True)
class Exclusion:
    """A framework left out of a ranking and the must-have tags it lacks."""

    framework: str
    lacking: tuple[str, ...]


@dataclass(frozen=True)
class Ranking:
    """Frameworks ordered by weighted total; those lacking a must-have tag in ``excluded``."""

    rows: tuple[RankedFramework, ...]
    excluded: tuple[Exclusion, ...] = ()
    must_have: tuple[str, ...] = ()

    @property
    def leader(self) -> str | None:
        """The first framework, None when none is ranked."""
        return self.rows[0].framework if self.rows else None

    @property
    def tied_for_first(self) -> tuple[str, ...]:
        """The frameworks whose total equals the leader's (the leader first by name when > 1)."""
        if not self.rows:
            return ()
        top = round(self.rows[0].total, TOTAL_DECIMALS)
        return tuple(r.framework for r in self.rows if round(r.total, TOTAL_DECIMALS) == top)

    def row(self, framework: str) -> RankedFramework:
        """The row of one ranked framework (KeyError when it is not ranked)."""
        for r in self.rows:
            if r.framework == framework:
                return r
        raise KeyError(framework)


@dataclass(frozen=True)
class _Problem:
    """Validated inputs of a ranking: the ranked frameworks (sorted by name), the criteria."""

    ranked: list[str]  # sorted by name: index order is the tie order
    excluded: tuple[Exclusion, ...]
    must_have: tuple[str, ...]
    criteria: list[str]  # every criterion in weights, in the mapping's order
    weights: np.ndarray  # (criteria,)
    matrix: np.ndarray  # (ranked, criteria), missing = 0
    present: np.ndarray  # (ranked, criteria) bool


def _check_weights(weights: Mapping[str, float]) -> None:
    for crit, w in weights.items():
        if not _is_number(w) or not math.isfinite(w) or w < 0:
            raise ConfigError(f"weight of {crit!r} is {w!r}; expected a finite number ≥ 0")
    if not any(w > 0 for w in weights.values()):
        raise ConfigError("all weights are 0; give at least one criterion a weight above 0")


def _problem(
    frameworks: Sequence[str],
    scores: Mapping[tuple[str, str], float | None],
    weights: Mapping[str, float],
    must_have: Iterable[str],
    tags: Mapping[str, frozenset[str]],
    known_tags: Iterable[str] | None,
) -> _Problem:
    if len(set(frameworks)) != len(frameworks):
        twice = sorted({f for f in frameworks if list(frameworks).count(f) > 1})
        raise ConfigError(f"framework {twice[0]!r} is listed twice; list each framework once")
    _check_weights(weights)
    wanted = tuple(dict.fromkeys(must_have))
    known: frozenset[str] = frozenset(known_tags if known_tags is not None else ())
    if known_tags is None:
        known = known.union(*tags.values())
    for tag in wanted:
        if tag not in known:
            raise ConfigError(f"unknown must-have tag {tag!r}; tags: {_join(known)}")
    ranked: list[str] = []
    excluded: list[Exclusion] = []
    for fw in sorted(frameworks):
        lacking = tuple(t for t in wanted if t not in tags.get(fw, frozenset()))
        if lacking:
            excluded.append(Exclusion(fw, lacking))
        else:
            ranked.append(fw)
    criteria = list(weights)
    matrix = np.zeros((len(ranked), len(criteria)))
    present = np.zeros((len(ranked), len(criteria)), dtype=bool)
    for i, fw in enumerate(ranked):
        for j, crit in enumerate(criteria):
            value = scores.get((fw, crit))
            if value is None or (_is_number(value) and math.isnan(value)):
                continue
            if not _is_number(value) or not (SCORE_MIN <= value <= SCORE_MAX):
                raise ConfigError(f"score of {fw}/{crit} is {value!r}; expected a number 0–5")
            matrix[i, j] = float(value)
            present[i, j] = True
    return _Problem(
        ranked=ranked,
        excluded=tuple(excluded),
        must_have=wanted,
        criteria=criteria,
        weights=np.array([float(weights[c]) for c in criteria]),
        matrix=matrix,
        present=present,
    )


def _order_key(total: float, name: str) -> tuple[float, str]:
    return (-round(total, TOTAL_DECIMALS), name)


def _ranking(p: _Problem, weights: np.ndarray) -> Ranking:
    total_w = float(weights.sum())
    rows: list[tuple[str, float, dict[str, float], tuple[str, ...]]] = []
    for i, fw in enumerate(p.ranked):
        contributions = {
            crit: float(weights[j] * p.matrix[i, j] / total_w)
            for j, crit in enumerate(p.criteria)
            if weights[j] > 0
        }
        missing = tuple(
            crit for j, crit in enumerate(p.criteria) if weights[j] > 0 and not p.present[i, j]
        )
        rows.append((fw, math.fsum(contributions.values()), contributions, missing))
    rows.sort(key=lambda r: _order_key(r[1], r[0]))
    return Ranking(
        rows=tuple(
            RankedFramework(framework=fw, total=t, rank=k + 1, contributions=c, missing=m)
            for k, (fw, t, c, m) in enumerate(rows)
        ),
        excluded=p.excluded,
        must_have=p.must_have,
    )


def rank(
    frameworks: Sequence[str],
    scores: Mapping[tuple[str, str], float | None],
    weights: Mapping[str, float],
    *,
    must_have: Iterable[str] = (),
    tags: Mapping[str, frozenset[str]] = _NO_TAGS,
    known_tags: Iterable[str] | None = None,
) -> Ranking:
    """Rank frameworks by the weighted total of their 0–5 scores.

    ``scores`` maps ``(framework, criterion)`` to 0–5 (measured criteria already converted with
    :func:`measured_score`); None, NaN or absent is no score (counted 0, listed in ``missing``).
    ``weights`` are relative (criteria left out weigh 0): finite, ≥ 0, not all 0. ``tags`` maps a
    framework to its tags (:func:`tags_by_framework`; absent = none); a framework lacking any of
    ``must_have`` is excluded. A must-have tag must be known: in ``known_tags`` when given (the
    criteria's vocabulary, :meth:`Catalog.known_tags`), else in the union of ``tags``' values.
    Raises ConfigError for bad weights, scores outside 0–5, unknown must-have tags or a framework
    listed twice.
    """
    p = _problem(frameworks, scores, weights, must_have, tags, known_tags)
    return _ranking(p, p.weights)


# --- sensitivity -------------------------------------------------------------------------------


@dataclass(frozen=True)
class WeightRange:
    """How far one criterion's weight can move, the others fixed, before the leader changes.

    The leader stays first for weights in ``[lower, upper]`` (``upper`` None: unbounded). ``below``
    takes the lead just below ``lower`` (None when ``lower`` is 0) and ``above`` just above
    ``upper`` (None when unbounded). At a bound itself the frameworks tie; the tie goes by name.
    """

    criterion: str
    weight: float
    leader: str
    lower: float
    upper: float | None
    below: str | None
    above: str | None

    @property
    def can_fall(self) -> float | None:
        """How far the weight can fall, as a fraction of it (0.35: 35 %); None for weight 0."""
        return (self.weight - self.lower) / self.weight if self.weight > 0 else None

    @property
    def can_rise(self) -> float | None:
        """How far the weight can rise, as a fraction of it; None when unbounded or weight 0."""
        if self.upper is None or self.weight <= 0:
            return None
        return (self.upper - self.weight) / self.weight

    @property
    def margin(self) -> float | None:
        """The smaller of :attr:`can_fall` and :attr:`can_rise` that flips the leader.

        None when neither bound changes the leader (weight 0 with no upper bound, or lower 0
        without a taker and no upper bound).
        """
        options = [
            m
            for m, who in ((self.can_fall, self.below), (self.can_rise, self.above))
            if m is not None and who is not None
        ]
        return min(options) if options else None


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def weight_sensitivity(
    frameworks: Sequence[str],
    scores: Mapping[tuple[str, str], float | None],
    weights: Mapping[str, float],
    *,
    must_have: Iterable[str] = (),
    tags: Mapping[str, frozenset[str]] = _NO_TAGS,
    known_tags: Iterable[str] | None = None,
) -> list[WeightRange]:
    """For each criterion in ``weights`` (weight 0 included), the exact range of its weight.

    Arguments as :func:`rank`. With the other weights fixed, ``total_f(x) = (A_f + x·s_f) /
    (W + x)``: the leader *L* stays first while ``A_L + x·s_L ≥ A_f + x·s_f`` for every *f*; the
    bounds are where those lines cross. The framework that takes over at a crossing is, among
    those tied there, the one with the smallest ``s_f`` just below and the largest just above
    (then by name). One :class:`WeightRange` per criterion in the mapping's order; empty when no
    framework is ranked.
    """
    p = _problem(frameworks, scores, weights, must_have, tags, known_tags)
    leader = _ranking(p, p.weights).leader
    if leader is None:
        return []
    li = p.ranked.index(leader)
    out: list[WeightRange] = []
    for j, crit in enumerate(p.criteria):
        x0 = float(p.weights[j])
        others = p.weights.copy()
        others[j] = 0.0
        a = p.matrix @ others  # A_f: the other criteria's weighted sum
        s = p.matrix[:, j]  # s_f: the slope in this weight
        lows: list[tuple[float, int]] = []
        highs: list[tuple[float, int]] = []
        for i in range(len(p.ranked)):
            d_a, d_s = float(a[li] - a[i]), float(s[li] - s[i])
            if i == li or d_s == 0:
                continue
            cross = -d_a / d_s
            if d_s > 0 and cross > 0:  # f leads below the crossing
                lows.append((min(cross, x0), i))
            elif d_s < 0:  # f leads above the crossing
                highs.append((max(cross, x0), i))
        lower = max((x for x, _ in lows), default=0.0)  # 0: nobody takes over below
        below: str | None = None
        if lower > 0:
            takers = [i for x, i in lows if _close(x, lower)]
            below = p.ranked[min(takers, key=lambda i: (s[i], p.ranked[i]))]
        upper: float | None = None
        above: str | None = None
        if highs:
            upper = min(x for x, _ in highs)
            takers = [i for x, i in highs if _close(x, upper)]
            above = p.ranked[min(takers, key=lambda i: (-s[i], p.ranked[i]))]
        out.append(WeightRange(crit, x0, leader, lower, upper, below, above))
    return out


def perturbation_shares(
    frameworks: Sequence[str],
    scores: Mapping[tuple[str, str], float | None],
    weights: Mapping[str, float],
    *,
    must_have: Iterable[str] = (),
    tags: Mapping[str, frozenset[str]] = _NO_TAGS,
    known_tags: Iterable[str] | None = None,
    spread: float = 0.2,
    samples: int = 2000,
    seed: int = 0,
) -> dict[str, float]:
    """The share of random weightings under which each ranked framework comes first.

    Every non-zero weight is multiplied by an independent factor uniform in ``[1 − spread,
    1 + spread]`` (``numpy.random.default_rng(seed)``; ``0 ≤ spread < 1``); a sample in which k
    frameworks tie for first (as :func:`rank` rounds totals) counts 1/k for each. Shares sum to
    1 over the ranked frameworks (each listed, 0 included); empty when none is ranked. Other
    arguments as :func:`rank`.
    """
    if not (0.0 <= spread < 1.0):
        raise ConfigError(f"spread {spread!r} is outside [0, 1); expected e.g. 0.2 (±20 %)")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ConfigError(f"samples {samples!r} is not a positive integer")
    p = _problem(frameworks, scores, weights, must_have, tags, known_tags)
    if not p.ranked:
        return {}
    rng = np.random.default_rng(seed)
    factors = rng.uniform(1.0 - spread, 1.0 + spread, size=(samples, len(p.criteria)))
    drawn = factors * p.weights  # zero weights stay zero
    totals = (drawn @ p.matrix.T) / drawn.sum(axis=1, keepdims=True)
    # a sample in which k frameworks tie for first counts 1/k for each: the name order that
    # breaks ties in a ranking's table is no reason to win a perturbation
    rounded = np.round(totals, TOTAL_DECIMALS)
    tied = rounded == rounded.max(axis=1, keepdims=True)
    counts = (tied / tied.sum(axis=1, keepdims=True)).sum(axis=0)
    return {fw: float(counts[i]) / samples for i, fw in enumerate(p.ranked)}
