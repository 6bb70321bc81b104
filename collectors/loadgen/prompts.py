"""Prompts synthesised to target token lengths without a tokenizer.

A prompt is a run of words drawn (seeded) from a fixed vocabulary of common English words. The
words → tokens ratio is calibrated against the server itself: two probe requests of known word
counts return ``usage.prompt_tokens``, which gives tokens ≈ overhead + tokens_per_word · words
(the overhead is the chat template's). The stored request rows always carry the server's
actual counts; the targets only shape the load.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

VOCAB: tuple[str, ...] = tuple(
    dict.fromkeys(
        """
    the of and to in is was for that with as on by at from his an were are which this be
    has had have not but one their its first new after also who they two been more other all
    time there when into may would year she can only over most world later about city during
    some many such school made three team where these then than state known system used well
    both people between under part called being until since work while before each through
    national what university life family season number film including because film government
    game second series several back music include company area water house around early public
    history club member high group life long best large power small general four south north
    west east river under again place among common light story often name field center point
    order course report market travel early garden simple water quiet bright yellow window
    table letter paper music doctor island forest mountain village bridge station engine planet
    window kitchen summer winter spring autumn morning evening language science nature animal
    energy signal memory network machine library theory pattern picture question answer reason
    student teacher reader writer market budget office design method result effect process
    season weather travel journey harbor valley desert ocean silver golden purple orange green
    simple careful gentle honest modern ancient quick slow happy strong clever useful famous
    follow change return believe explain develop consider continue provide remember describe
    measure compare improve increase reduce prepare produce support receive imagine discover
    """.split()  # noqa: SIM905 (a word list reads best as text)
    )
)


@dataclass(frozen=True)
class Calibration:
    """tokens ≈ overhead + tokens_per_word · words (per request, for one API and server)."""

    tokens_per_word: float = 1.33
    overhead: float = 0.0
    source: str = "default"

    def words_for(self, tokens: float, *, with_overhead: bool = True) -> int:
        body = tokens - (self.overhead if with_overhead else 0.0)
        return max(1, round(body / self.tokens_per_word))

    def tokens_for(self, words: int) -> float:
        return self.overhead + self.tokens_per_word * words


DEFAULT_CALIBRATION = Calibration()
PROBE_WORDS: tuple[int, int] = (32, 288)


def fit(points: list[tuple[int, int]]) -> Calibration | None:
    """Fit tokens = overhead + k · words from (words, prompt_tokens) probes; None if implausible."""
    if len(points) < 2:
        return None
    (w1, t1), (w2, t2) = points[0], points[-1]
    if w2 == w1:
        return None
    k = (t2 - t1) / (w2 - w1)
    overhead = t1 - k * w1
    if not 0.3 <= k <= 6.0 or overhead < -16:
        return None
    return Calibration(tokens_per_word=k, overhead=max(0.0, overhead), source="server-usage")


def words(rng: random.Random, count: int) -> str:
    """``count`` words from the vocabulary, space-separated (seeded by ``rng``)."""
    return " ".join(rng.choices(VOCAB, k=max(1, count)))


def synthesise(
    rng: random.Random, tokens: int, cal: Calibration, *, with_overhead: bool = True
) -> str:
    """A prompt of about ``tokens`` tokens under calibration ``cal``."""
    return words(rng, cal.words_for(tokens, with_overhead=with_overhead))
