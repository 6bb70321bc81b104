"""Generated text of the reference engine: real-looking English, one word-piece per token.

A seeded stream of tokens (``" the"``, ``" cache"``, ``"."``, ``" Then"``, …) is built once; each
request reads it from its own seeded offset. Every token is JSON-safe ASCII, so the server can
splice tokens into pre-encoded JSON without escaping.
"""

from __future__ import annotations

import random

_WORDS = (  # noqa: SIM905 (a word list reads better as text)
    "the of and to in is that for it as with was on be by this are from at or an which have "
    "not but can all more one their has its they were also these been will would when there "
    "into other some time may than first then two new only over such most used many where "
    "each system model data memory cache batch request latency token throughput server engine "
    "queue block prefix decode prefill kernel layer attention weight tensor compute bandwidth "
    "budget schedule sequence context window length output input user answer question result "
    "value point number level rate load capacity result process state method function step "
    "small large fast slow high low early late simple common useful clear important possible "
    "different similar better general specific practical careful measured expected typical "
    "shows gives makes keeps takes grows holds reads writes moves starts returns depends "
    "because while after before during without between across under within through about "
    "however therefore instead usually often rarely quickly directly roughly exactly nearly "
    "people team engineer operator cluster node device card region service client stream "
    "experiment benchmark figure table note report summary reason example case choice plan"
).split()
_WEIGHTS = [1.0 / (1 + i) ** 0.6 for i in range(len(_WORDS))]  # Zipf-like: "the" is common


def token_stream(seed: int, length: int = 8192) -> list[str]:
    """A deterministic stream of tokens forming sentences of 6–22 words."""
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < length:
        n = rng.randint(6, 22)
        words = rng.choices(_WORDS, weights=_WEIGHTS, k=n)
        out.append(" " + words[0].capitalize())
        for j, w in enumerate(words[1:], start=1):
            out.append(" " + w)
            if j < n - 2 and rng.random() < 0.06:
                out.append(",")
        out.append(".")
    return out[:length]
