"""Quality retention: is a candidate deployment as good as a reference on the same prompts?

Pure: the prompt set's entries (already parsed from TOML) and both sides' answers in, a
``QualitySummary`` out. ``servescope quality`` (``services.commands.quality``) runs the prompts;
the store keeps the summary as JSON (``store.quality_results``).

The rules, each tested in ``tests/unit/test_quality.py``:

- **Normalisation** (``normalise``): the first non-empty line only; punctuation (any Unicode
  ``P*`` character and ``string.punctuation``) becomes a space; lowercase (unless the prompt is
  ``case_sensitive``); the articles *a*, *an*, *the* are dropped as whole words; whitespace is
  collapsed. ``"The answer is: Paris.\\nMore"`` → ``"answer is paris"``.
- **Correctness** (``is_correct``): an answer is correct when some accepted answer, normalised
  the same way, is non-empty and either equals the normalised answer or appears in it as a
  whole-word sequence (its words, contiguous and in order: ``"paris"`` is in
  ``"capital is paris"``, not in ``"parisian"``). Lenient on purpose — a model that says
  "The capital is Paris." is right — so an answer listing several candidates ("4 or 5") is
  counted right for each of them; the prompts ask for the answer alone to keep this rare. A
  ``case_sensitive`` prompt (e.g. "in capital letters") compares without lowercasing.
- **Agreement** (``agrees``): both normalised answers (lowercased) are equal and neither side
  failed.
- **Similarity** (``token_f1``): SQuAD-style token-overlap F1 of the two normalised answers
  (multiset overlap; 1.0 when both are empty); 0 when either side failed.
- **Intervals**: Wilson score 95 % intervals for the accuracies and the agreement
  (``wilson``); a seeded percentile bootstrap (``BOOTSTRAP_RESAMPLES`` resamples of the prompts,
  paired: each resample keeps a prompt's reference and candidate results together) for the mean
  similarity and for the retention (candidate accuracy ÷ reference accuracy). Retention is None
  when the reference's accuracy is 0; its interval is None when fewer than half the resamples
  have a reference accuracy above 0 (those resamples are dropped from the percentiles).
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from errors import ConfigError

CATEGORIES: tuple[str, ...] = ("factual", "arithmetic", "instruction", "code")
#: two-sided 95 %: the 0.975 quantile of the standard normal
Z95 = 1.959963984540054
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
#: a retention interval wider than this, or fewer prompts than that, is not called equivalent
WIDE_CI = 0.2
FEW_PROMPTS = 40
ARTICLES = frozenset({"a", "an", "the"})
#: the summary's headline figures, each stored with ``_lo`` and ``_hi`` (store.quality_results)
FIGURES: tuple[str, ...] = (
    "reference_accuracy",
    "candidate_accuracy",
    "agreement",
    "similarity",
    "retention",
)

_PUNCT = set(string.punctuation)
_SPACE = re.compile(r"\s+")


# --- the prompt set ------------------------------------------------------------------------------


@dataclass(frozen=True)
class QualityPrompt:
    """One prompt of the set: ``answers`` are the accepted answers (as written)."""

    id: str
    category: str
    prompt: str
    answers: tuple[str, ...]
    case_sensitive: bool = False


def parse_prompts(
    entries: Iterable[Mapping[str, Any]], *, source: str
) -> tuple[QualityPrompt, ...]:
    """The ``[[prompts]]`` entries of a prompt set, checked: each has an ``id`` (unique), a known
    ``category``, a ``prompt`` and at least one non-empty accepted answer. ``ConfigError`` names
    the entry otherwise (``source``: the file, for the message)."""
    out: list[QualityPrompt] = []
    seen: set[str] = set()
    for i, e in enumerate(entries, start=1):
        where = f"{source}: [[prompts]] entry {i}"
        pid, category, prompt = e.get("id"), e.get("category"), e.get("prompt")
        if not isinstance(pid, str) or not pid.strip():
            raise ConfigError(f"{where} needs an 'id' (a string)")
        if pid in seen:
            raise ConfigError(f"{where}: id {pid!r} is used twice")
        seen.add(pid)
        if category not in CATEGORIES:
            raise ConfigError(
                f"{where} ({pid}): category {category!r} is not one of {', '.join(CATEGORIES)}"
            )
        if not isinstance(prompt, str) or not prompt.strip():
            raise ConfigError(f"{where} ({pid}) needs a 'prompt' (a string)")
        answers = e.get("answers")
        if (
            not isinstance(answers, list)
            or not answers
            or not all(isinstance(a, str) and normalise(a) for a in answers)
        ):
            raise ConfigError(f"{where} ({pid}) needs 'answers': a list of non-empty strings")
        case = e.get("case_sensitive", False)
        if not isinstance(case, bool):
            raise ConfigError(f"{where} ({pid}): 'case_sensitive' must be true or false")
        out.append(QualityPrompt(pid, category, prompt, tuple(answers), case))
    if not out:
        raise ConfigError(f"{source} holds no [[prompts]]")
    return tuple(out)


def select_prompts(
    prompts: Sequence[QualityPrompt], categories: Sequence[str] = (), limit: int | None = None
) -> tuple[QualityPrompt, ...]:
    """The prompts of ``categories`` (all when empty), at most ``limit`` of them taken in turn
    from each category (so a small limit still samples every category), in set order."""
    chosen = [p for p in prompts if not categories or p.category in categories]
    if limit is None or limit >= len(chosen):
        return tuple(chosen)
    by_cat: dict[str, list[QualityPrompt]] = {}
    for p in chosen:
        by_cat.setdefault(p.category, []).append(p)
    keep: set[str] = set()
    depth = 0
    while len(keep) < limit:
        for items in by_cat.values():
            if depth < len(items) and len(keep) < limit:
                keep.add(items[depth].id)
        depth += 1
    return tuple(p for p in chosen if p.id in keep)


# --- answers -------------------------------------------------------------------------------------


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line
    return ""


def normalise(text: str | None, *, keep_case: bool = False) -> str:
    """The answer as compared (module docstring, "Normalisation"); None → ``""``."""
    if not text:
        return ""
    line = _first_line(text)
    line = "".join(
        " " if ch in _PUNCT or unicodedata.category(ch).startswith("P") else ch for ch in line
    )
    if not keep_case:
        line = line.lower()
    words = [w for w in _SPACE.split(line) if w and w.lower() not in ARTICLES]
    return " ".join(words)


def _contains(words: Sequence[str], part: Sequence[str]) -> bool:
    n = len(part)
    return any(list(words[i : i + n]) == list(part) for i in range(len(words) - n + 1))


def is_correct(
    answer: str | None, accepted: Iterable[str], *, case_sensitive: bool = False
) -> bool:
    """Whether ``answer`` matches one of the ``accepted`` answers (module docstring,
    "Correctness"). None (a failed request) is never correct."""
    got = normalise(answer, keep_case=case_sensitive)
    if not got:
        return False
    words = got.split()
    for a in accepted:
        want = normalise(a, keep_case=case_sensitive)
        if want and (want == got or _contains(words, want.split())):
            return True
    return False


def agrees(reference: str | None, candidate: str | None) -> bool:
    """Both sides answered and their normalised answers are equal."""
    if reference is None or candidate is None:
        return False
    return normalise(reference) == normalise(candidate)


def token_f1(a: str | None, b: str | None) -> float:
    """SQuAD-style token-overlap F1 of two answers, after normalisation; 0 when either is None
    (a failed request), 1.0 when both normalise to nothing."""
    if a is None or b is None:
        return 0.0
    ta, tb = normalise(a).split(), normalise(b).split()
    if not ta or not tb:
        return float(ta == tb)
    common = sum((Counter(ta) & Counter(tb)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(ta), common / len(tb)
    return 2 * precision * recall / (precision + recall)


# --- intervals -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """A figure and its 95 % interval; all None when there is nothing to estimate."""

    value: float | None
    lo: float | None = None
    hi: float | None = None

    def covers(self, x: float) -> bool:
        return self.lo is not None and self.hi is not None and self.lo <= x <= self.hi


def wilson(successes: int, n: int, z: float = Z95) -> Estimate:
    """The proportion ``successes / n`` with its Wilson score interval (None for n = 0)."""
    if n <= 0:
        return Estimate(None)
    if not 0 <= successes <= n:
        raise ValueError(f"successes {successes} outside 0..{n}")
    p = successes / n
    z2 = z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    lo = 0.0 if successes == 0 else max(0.0, centre - half)  # exact at the ends
    hi = 1.0 if successes == n else min(1.0, centre + half)
    return Estimate(p, lo, hi)


def _resamples(n: int, resamples: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, size=(resamples, n))


def bootstrap_mean(
    values: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> Estimate:
    """The mean of ``values`` with a seeded percentile-bootstrap 95 % interval."""
    if not values:
        return Estimate(None)
    x = np.asarray(values, dtype=float)
    means = x[_resamples(len(x), resamples, seed)].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return Estimate(float(x.mean()), float(lo), float(hi))


def retention(
    reference_correct: Sequence[bool],
    candidate_correct: Sequence[bool],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Estimate:
    """Candidate accuracy ÷ reference accuracy over the same prompts, with a seeded, paired
    percentile-bootstrap 95 % interval. None when the reference got nothing right; the interval
    None when fewer than half the resamples have a reference accuracy above 0."""
    if len(reference_correct) != len(candidate_correct):
        raise ValueError("reference and candidate results differ in length")
    ref = np.asarray(reference_correct, dtype=float)
    cand = np.asarray(candidate_correct, dtype=float)
    if ref.size == 0 or ref.sum() == 0:
        return Estimate(None)
    point = float(cand.mean() / ref.mean())
    idx = _resamples(ref.size, resamples, seed)
    ref_means, cand_means = ref[idx].mean(axis=1), cand[idx].mean(axis=1)
    ok = ref_means > 0
    if ok.sum() < resamples / 2:
        return Estimate(point)
    lo, hi = np.percentile(cand_means[ok] / ref_means[ok], [2.5, 97.5])
    return Estimate(point, float(lo), float(hi))


# --- the summary ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScoredAnswer:
    """One prompt's result on both sides (a ``None`` answer: the request failed, ``*_error``)."""

    prompt_id: str
    category: str
    reference_answer: str | None
    candidate_answer: str | None
    reference_correct: bool
    candidate_correct: bool
    agree: bool
    similarity: float
    reference_error: str | None = None
    candidate_error: str | None = None


def score(
    prompt: QualityPrompt,
    reference: str | None,
    candidate: str | None,
    *,
    reference_error: str | None = None,
    candidate_error: str | None = None,
) -> ScoredAnswer:
    """One prompt's two answers scored: correctness of each, agreement, similarity."""
    if reference_error is not None:
        reference = None
    if candidate_error is not None:
        candidate = None
    return ScoredAnswer(
        prompt.id,
        prompt.category,
        reference,
        candidate,
        is_correct(reference, prompt.answers, case_sensitive=prompt.case_sensitive),
        is_correct(candidate, prompt.answers, case_sensitive=prompt.case_sensitive),
        agrees(reference, candidate),
        token_f1(reference, candidate),
        reference_error,
        candidate_error,
    )


@dataclass(frozen=True)
class QualityFigures:
    """The figures of one group of prompts (a category, or all of them)."""

    prompts: int
    reference_correct: int
    candidate_correct: int
    agreed: int
    reference_errors: int
    candidate_errors: int
    reference_accuracy: Estimate
    candidate_accuracy: Estimate
    agreement: Estimate
    similarity: Estimate
    retention: Estimate

    def flat(self) -> dict[str, Any]:
        """``{"prompts": …, "reference_accuracy": …, "reference_accuracy_lo": …, …}``: what the
        store keeps (``summary`` JSON) and flattens into columns."""
        out: dict[str, Any] = {
            k: getattr(self, k)
            for k in (
                "prompts",
                "reference_correct",
                "candidate_correct",
                "agreed",
                "reference_errors",
                "candidate_errors",
            )
        }
        for name in FIGURES:
            est: Estimate = getattr(self, name)
            out[name], out[f"{name}_lo"], out[f"{name}_hi"] = est.value, est.lo, est.hi
        return out


def figures(
    answers: Sequence[ScoredAnswer],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> QualityFigures:
    """Accuracies, agreement (Wilson), mean similarity and retention (bootstrap) of ``answers``."""
    n = len(answers)
    ref = [a.reference_correct for a in answers]
    cand = [a.candidate_correct for a in answers]
    agreed = sum(a.agree for a in answers)
    return QualityFigures(
        prompts=n,
        reference_correct=sum(ref),
        candidate_correct=sum(cand),
        agreed=agreed,
        reference_errors=sum(a.reference_error is not None for a in answers),
        candidate_errors=sum(a.candidate_error is not None for a in answers),
        reference_accuracy=wilson(sum(ref), n),
        candidate_accuracy=wilson(sum(cand), n),
        agreement=wilson(agreed, n),
        similarity=bootstrap_mean([a.similarity for a in answers], resamples=resamples, seed=seed),
        retention=retention(ref, cand, resamples=resamples, seed=seed),
    )


@dataclass(frozen=True)
class QualitySummary:
    """Everything ``servescope quality`` reports: the overall figures, each category's, and the
    verdict line."""

    overall: QualityFigures
    categories: dict[str, QualityFigures] = field(default_factory=dict)
    verdict: str = ""

    @property
    def category_accuracy(self) -> dict[str, tuple[float | None, float | None]]:
        """``{category: (reference accuracy, candidate accuracy)}``."""
        return {
            c: (f.reference_accuracy.value, f.candidate_accuracy.value)
            for c, f in self.categories.items()
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``overall`` and each of ``categories`` flattened (``QualityFigures.flat``),
        the ``verdict`` and the ``method`` (how the intervals were computed)."""
        return {
            "overall": self.overall.flat(),
            "categories": {c: f.flat() for c, f in self.categories.items()},
            "verdict": self.verdict,
            "method": {
                "accuracy_ci": "wilson 95%",
                "agreement_ci": "wilson 95%",
                "similarity": "token-overlap F1 (SQuAD)",
                "similarity_ci": f"percentile bootstrap 95%, {BOOTSTRAP_RESAMPLES} resamples, "
                f"seed {BOOTSTRAP_SEED}",
                "retention_ci": "paired percentile bootstrap 95% (same resamples)",
            },
        }


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}"


def verdict(overall: QualityFigures) -> str:
    """One honest line: what the candidate retains of the reference's accuracy, and whether the
    interval allows calling it equivalent."""
    ret = overall.retention
    errors = ""
    if overall.candidate_errors or overall.reference_errors:
        errors = (
            f" ({overall.candidate_errors} candidate and {overall.reference_errors} reference "
            f"requests of {overall.prompts} failed, counted wrong)"
        )
    if ret.value is None:
        return (
            "the reference answered no prompt correctly: retention is undefined and says nothing "
            f"about the candidate (agreement {_pct(overall.agreement.value)} %)" + errors
        )
    head = f"candidate retains {_pct(ret.value)} % of the reference's accuracy"
    if ret.lo is None or ret.hi is None:
        return f"{head} (no interval: too few correct reference answers): inconclusive" + errors
    ci = f"(95 % CI {_pct(ret.lo)}–{_pct(ret.hi)} %)"
    if ret.hi < 1.0:
        return f"{head} {ci}: NOT equivalent" + errors
    if ret.lo > 1.0:
        return f"{head} {ci}: better than the reference" + errors
    if ret.hi - ret.lo > WIDE_CI:
        tail = "; the interval is wide: more prompts are needed to call it equivalent"
    elif overall.prompts < FEW_PROMPTS:
        tail = f"; only {overall.prompts} prompts: more are needed to call it equivalent"
    else:
        tail = ""
    return f"{head} {ci}: within noise (the CI covers 100 %){tail}" + errors


def summarise(
    answers: Sequence[ScoredAnswer],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> QualitySummary:
    """The summary of a quality run: overall, per category (in ``CATEGORIES`` order, those
    present), and the verdict."""
    overall = figures(answers, resamples=resamples, seed=seed)
    cats = {
        c: figures([a for a in answers if a.category == c], resamples=resamples, seed=seed)
        for c in CATEGORIES
        if any(a.category == c for a in answers)
    }
    return QualitySummary(overall, cats, verdict(overall))
