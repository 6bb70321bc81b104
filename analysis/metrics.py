"""Metric definitions (ARCHITECTURE §5, docs/metrics.md), as pure functions.

Every collector and importer computes per-request metrics through these, so that one set of
definitions holds across sources.
"""

from __future__ import annotations


def request_tpot_ms(
    e2e_ms: float | None, ttft_ms: float | None, output_tokens: int | None
) -> float | None:
    """TPOT of one request: (E2E − TTFT) / (output_tokens − 1), defined for output_tokens ≥ 2."""
    if e2e_ms is None or ttft_ms is None or output_tokens is None or output_tokens < 2:
        return None
    return (e2e_ms - ttft_ms) / (output_tokens - 1)
