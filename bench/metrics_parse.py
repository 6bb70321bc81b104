"""Benchmark: parsing (and normalising) the 52 KB vLLM /metrics page. Target: parse < 5 ms.

Prints the median and P95 of ServeScope's parser cold (label cache cleared before each parse:
a new target's first scrape) and warm (the steady state of a watcher scraping the same target),
the normalisation step, the whole per-scrape row building, and — when the ``prometheus_client``
package is importable — its parser on the same page for comparison (``PROMCLIENT_PATH`` may point
at a folder where it is installed, e.g. ``pip install --target /tmp/promclient prometheus_client``).

    .venv/bin/python bench/metrics_parse.py [--repeat 300]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from collectors import engine_metrics, prometheus_text  # noqa: E402
from collectors.watch import ScrapeSource  # noqa: E402

PAGE = ROOT / "tests/fixtures/vllm/metrics_v1_full_qwen2.5-0.5b_k8s-ai-conformance_kops.prom"


def _timed(
    fn: Callable[[], object], repeat: int, before: Callable[[], None] | None = None
) -> list[float]:
    out = []
    for _ in range(repeat):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def _line(name: str, ms: list[float]) -> str:
    ms = sorted(ms)
    p95 = ms[int(0.95 * (len(ms) - 1))]
    return f"{name:<44} median {statistics.median(ms):7.3f} ms   p95 {p95:7.3f} ms"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=300)
    args = ap.parse_args()
    text = PAGE.read_text()
    expo = prometheus_text.parse(text)
    lines = len(text.splitlines())
    print(f"page: {PAGE.name}: {len(text):,} bytes, {lines} lines, {len(expo)} samples")
    clear = prometheus_text._LABEL_CACHE.clear
    results = [
        _line(
            "parse, cold (label cache cleared)",
            _timed(lambda: prometheus_text.parse(text), args.repeat, clear),
        ),
        _line(
            "parse, warm (same target again)",
            _timed(lambda: prometheus_text.parse(text), args.repeat),
        ),
        _line(
            "normalise (vLLM map)",
            _timed(lambda: engine_metrics.normalise(expo, "vllm"), args.repeat),
        ),
    ]
    src = ScrapeSource("http://127.0.0.1:1/metrics")
    results.append(
        _line(
            "parse + rows for the store (raw=engine)",
            _timed(lambda: src.rows(prometheus_text.parse(text), 0.0), args.repeat),
        )
    )
    extra = os.environ.get("PROMCLIENT_PATH", "/tmp/promclient")
    if Path(extra).is_dir():
        sys.path.append(extra)
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        results.append("prometheus_client: not installed (comparison skipped)")
    else:
        results.append(
            _line(
                "prometheus_client text_string_to_metric_families",
                _timed(lambda: list(text_string_to_metric_families(text)), args.repeat),
            )
        )
    print("\n".join(results))
    print("target: parse < 5 ms")


if __name__ == "__main__":
    main()
