"""Real engines' ``/metrics`` captures replayed as a time series, for the On-call tests
(tests/integration/test_capture_replay.py).

A capture (tests/fixtures/vllm, tests/fixtures/sglang; SOURCES.md) is one scrape. The replay
turns it into ``n`` scrapes of the same page — every family, label, bucket bound, HELP and TYPE
line as captured — in which the histograms the watcher normalises (``collectors.engine_metrics``)
grow over time:

- scrape k carries the capture's own counts × k/n (for a capture with counts, SGLang's) plus
  the *calm* observations of every scrape so far (for an idle capture, vLLM's, whose counts are
  all 0);
- in the *surge* scrapes, extra observations land in the upper buckets;
- at the *reset* scrape the engine has restarted: every count starts again from that scrape's
  own increments.

Each scrape's increments are kept (``HistPlan.increments``): what the engine served between
two scrapes, so a test can hand-compute what a window's percentile must be. ``serve`` puts the
pages on a real loopback HTTP server, one page per request in order; ``watch_replay`` lets the
real watcher (``collectors.watch.Watcher``, its real HTTP scrape, normalisation and buffered
DuckDB writer) collect them, with its clock reading the scrape's place in the series
(``start + k × step_s``), so a test knows which page every stored sample came from.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from collectors import engine_metrics, watch
from collectors.prometheus_text import Sample, parse
from store.ingest import BufferedWriter
from store.lifecycle import open_store

FIXTURES = Path(__file__).resolve().parent / "fixtures"
VLLM_CAPTURE = FIXTURES / "vllm" / "metrics_v1_full_qwen2.5-0.5b_k8s-ai-conformance_kops.prom"
SGLANG_CAPTURE = FIXTURES / "sglang" / "production_metrics_doc_llama-3.1-8b.prom"

#: Observations per scrape (seconds, or tokens for the length histograms) of an idle capture's
#: families in calm scrapes, and the extra ones of a surge scrape (any capture).
CALM: dict[str, tuple[float, ...]] = {
    "ttft_seconds": (0.03,) * 6 + (0.07,) * 3 + (0.2,),
    "e2e_seconds": (0.8,) * 5 + (1.5,) * 4 + (3.0,),
    "queue_time_seconds": (0.005,) * 8 + (0.05,) * 2,
    "prefill_time_seconds": (0.02,) * 7 + (0.06,) * 3,
    "itl_seconds": (0.01,) * 60 + (0.03,) * 30 + (0.06,) * 10,
    "prompt_length_tokens": (150.0,) * 5 + (400.0,) * 4 + (1500.0,),
    "output_length_tokens": (80.0,) * 6 + (300.0,) * 4,
}
SURGE: dict[str, tuple[float, ...]] = {
    "ttft_seconds": (3.0,) * 4 + (12.0,) * 2,
    "e2e_seconds": (6.0,) * 4 + (25.0,) * 2,
    "queue_time_seconds": (2.0,) * 4 + (8.0,) * 2,
    "prefill_time_seconds": (0.5,) * 6,
    "itl_seconds": (0.2,) * 40,
    "prompt_length_tokens": (3000.0,) * 6,
    "output_length_tokens": (300.0,) * 6,
}
#: vLLM's finished-request counter: one finished request per e2e observation (reason
#: ``length``), and in a surge scrape this many aborted too (an error rate).
VLLM_SUCCESS = "vllm:request_success_total"
SURGE_ABORTS = 2


@dataclass(frozen=True)
class HistPlan:
    """One driven histogram family: its bounds (``le`` as exposed, ``inf`` last) and, per
    scrape k, the non-cumulative count per bucket served since scrape k − 1 (scrape 0: nothing,
    the engine just started)."""

    hist: str  # the normalised name (ttft_seconds, prompt_length_tokens, …)
    family: str  # the exposed family (vllm:time_to_first_token_seconds, …)
    edges: tuple[float, ...]
    increments: tuple[tuple[float, ...], ...] = field(repr=False)

    def served(self, first: int, last: int) -> list[tuple[float, float]]:
        """(le, cumulative count) of what was served in scrapes first+1 … last: a window
        (scrape first, scrape last]."""
        per_bucket = [0.0] * len(self.edges)
        for k in range(first + 1, last + 1):
            for j, v in enumerate(self.increments[k]):
                per_bucket[j] += v
        out, running = [], 0.0
        for le, v in zip(self.edges, per_bucket, strict=True):
            running += v
            out.append((le, running))
        return out


@dataclass(frozen=True)
class Replay:
    """The pages and what each scrape served."""

    engine: str
    pages: tuple[str, ...] = field(repr=False)
    hists: dict[str, HistPlan] = field(repr=False)
    surge: tuple[int, ...]  # scrape indices with surge observations
    reset_at: int | None  # the first scrape after the engine restarted
    # per scrape: requests finished since the previous one, and of them aborted
    finished: tuple[float, ...] = field(default=(), repr=False)
    failed: tuple[float, ...] = field(default=(), repr=False)


def _bucket_of(value: float, edges: Sequence[float]) -> int:
    """Prometheus' rule: an observation counts in every bucket with le ≥ value; its own bucket
    is the first such."""
    for j, le in enumerate(edges):
        if value <= le:
            return j
    raise AssertionError(f"{value} above +Inf")


def _family_series(by_name: Mapping[str, list[Sample]], family: str) -> tuple[float, ...]:
    """The bucket bounds of ``family``, which must have exactly one series."""
    buckets = by_name.get(f"{family}_bucket", [])
    series = {tuple((k, v) for k, v in s.labels if k != "le") for s in buckets}
    if len(series) != 1:
        raise AssertionError(f"{family}: {len(series)} series; the replay drives exactly one")
    return tuple(sorted(float(dict(s.labels)["le"]) for s in buckets))


def _base_counts(by_name: Mapping[str, list[Sample]], family: str) -> dict[float, float]:
    return {float(dict(s.labels)["le"]): s.value for s in by_name[f"{family}_bucket"]}


def build_replay(
    capture: Path,
    *,
    scrapes: int = 40,
    surge: Sequence[int] = tuple(range(17, 25)),
    reset_at: int | None = 31,
) -> Replay:
    """The ``scrapes`` pages of ``capture`` (see the module's docstring)."""
    text = capture.read_text()
    expo = parse(text)
    by_name = expo.by_name()
    engine = engine_metrics.detect_engine(by_name)
    if engine is None:
        raise AssertionError(f"{capture.name}: no known engine")
    if reset_at is not None and not 3 <= reset_at < scrapes:
        raise AssertionError("the reset must leave at least two scrapes before it")
    surge_set = set(surge)
    plans: dict[str, HistPlan] = {}
    for h in engine_metrics.MAPS[engine].hists:
        family = next((f for f in h.families if f"{f}_bucket" in by_name), None)
        if family is None or h.metric not in CALM:
            continue
        edges = _family_series(by_name, family)
        base = _base_counts(by_name, family)
        base_nc = [base[le] - (base[edges[j - 1]] if j else 0.0) for j, le in enumerate(edges)]
        has_counts = any(v > 0 for v in base_nc)
        calm = [0.0] * len(edges)
        if has_counts:  # the capture's own distribution, 1/n of it per scrape
            calm = [v / scrapes for v in base_nc]
        else:
            for v in CALM[h.metric]:
                calm[_bucket_of(v, edges)] += 1.0
        incs: list[tuple[float, ...]] = [tuple(0.0 for _ in edges)]
        for k in range(1, scrapes):
            inc = list(calm)
            if k in surge_set:
                for v in SURGE[h.metric]:
                    inc[_bucket_of(v, edges)] += 1.0
            incs.append(tuple(inc))
        plans[h.metric] = HistPlan(h.metric, family, edges, tuple(incs))
    if not plans:
        raise AssertionError(f"{capture.name}: no histogram the watcher normalises")
    finished: list[float] = []
    failed: list[float] = []
    has_success = VLLM_SUCCESS in by_name
    for k in range(scrapes):
        e2e = plans.get("e2e_seconds")
        ok = sum(e2e.increments[k]) if e2e is not None and has_success else 0.0
        aborts = float(SURGE_ABORTS) if has_success and k in surge_set else 0.0
        finished.append(ok + aborts)
        failed.append(aborts)
    if reset_at is not None:
        for plan in plans.values():
            before, after = plan.served(0, reset_at - 1), plan.served(reset_at - 1, reset_at)
            for (le, c0), (_, c1) in zip(before, after, strict=True):
                # the restart must show as a drop in every bucket that had counts (else no
                # reader could tell it from growth)
                if c0 > 0 and not c1 < c0:
                    raise AssertionError(f"{plan.family} le={le}: {c1} after the reset ≥ {c0}")
    pages = tuple(
        _page(text, expo.samples, plans, finished, failed, k, reset_at) for k in range(scrapes)
    )
    return Replay(
        engine=engine,
        pages=pages,
        hists=plans,
        surge=tuple(sorted(surge_set)),
        reset_at=reset_at,
        finished=tuple(finished),
        failed=tuple(failed),
    )


def _page(
    text: str,
    samples: Sequence[Sample],
    plans: Mapping[str, HistPlan],
    finished: Sequence[float],
    failed: Sequence[float],
    k: int,
    reset_at: int | None,
) -> str:
    """The capture with the driven samples' values as at scrape k."""
    first = reset_at if reset_at is not None and k >= reset_at else 1
    values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for plan in plans.values():
        served = plan.served(first - 1, k) if k >= first else [(le, 0.0) for le in plan.edges]
        total_sum = 0.0
        for i in range(first, k + 1):
            # the sum of the observations: each bucket's count at its upper bound (its lower
            # bound for +Inf); only the mean reads it, and it only has to grow
            for j, c in enumerate(plan.increments[i]):
                le = plan.edges[j]
                total_sum += c * (le if le != float("inf") else plan.edges[j - 1])
        by_le = dict(served)
        for s in samples:
            if s.name == f"{plan.family}_bucket":
                le = float(dict(s.labels)["le"])
                values[(s.name, s.labels)] = by_le[le]
            elif s.name == f"{plan.family}_count":
                values[(s.name, s.labels)] = served[-1][1]
            elif s.name == f"{plan.family}_sum":
                values[(s.name, s.labels)] = total_sum
    ok = sum(finished[first : k + 1]) - sum(failed[first : k + 1]) if k >= first else 0.0
    bad = sum(failed[first : k + 1]) if k >= first else 0.0
    for s in samples:
        if s.name == VLLM_SUCCESS:
            reason = dict(s.labels).get("finished_reason")
            values[(s.name, s.labels)] = (
                ok if reason == "length" else bad if reason == "abort" else 0.0
            )
    out: list[str] = []
    it = iter(samples)
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            out.append(line)
            continue
        s = next(it)
        key = (s.name, s.labels)
        if key in values:
            head = line[: line.rindex("}") + 1] if "{" in line else s.name
            out.append(f"{head} {values[key]!r}")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


@dataclass
class ReplayServer:
    """A loopback HTTP server answering ``/metrics`` with the next page (the last one again
    once they are all served)."""

    pages: Sequence[str]
    served: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _httpd: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/metrics"

    def next_page(self) -> str:
        with self._lock:
            page = self.pages[min(self.served, len(self.pages) - 1)]
            self.served += 1
            return page


@contextlib.contextmanager
def serve(pages: Sequence[str]) -> Iterator[ReplayServer]:
    server = ReplayServer(pages)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/metrics":
                self.send_error(404)
                return
            body = server.next_page().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return None

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server._httpd = httpd
    thread = threading.Thread(target=httpd.serve_forever, name="replay-metrics", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@dataclass(frozen=True)
class WatchedReplay:
    replay: Replay = field(repr=False)
    url: str  # the DuckDB store
    target: str  # the replay server's /metrics URL as stored
    start: float  # the timestamp of scrape 0
    step_s: float  # stored seconds between two scrapes

    def ts(self, k: int) -> float:
        return self.start + k * self.step_s


def watch_replay(
    replay: Replay,
    db_path: Path,
    *,
    start: float = 1_790_000_000.0,
    step_s: float = 15.0,
    interval_s: float = 0.25,
    timeout_s: float = 60.0,
) -> WatchedReplay:
    """Serve the pages and let the real watcher scrape each once into a DuckDB file at
    ``db_path``; scrape k is stored at ``start + k × step_s``."""
    url = f"duckdb:///{db_path}"
    store = open_store(url)
    try:
        with serve(replay.pages) as server:
            sources, _notes = watch.build_sources(
                watch.SourceSpec(metrics_urls=[server.url], gpu=False), interval_s=interval_s
            )
            writer = BufferedWriter(store, flush_interval_s=0.5, background=True)
            # the clock reads the place of the page about to be served: one client, in order
            watcher = watch.Watcher(
                writer,
                sources,
                interval_s=interval_s,
                clock=lambda: start + server.served * step_s,
                # a page given up on would be lost from the series: wait for it on a busy machine
                timeout_s=10.0,
            )
            thread = threading.Thread(target=lambda: asyncio.run(watcher.run()), daemon=True)
            thread.start()
            deadline = time.monotonic() + timeout_s
            try:
                while server.served < len(replay.pages):
                    if time.monotonic() > deadline or not thread.is_alive():
                        raise AssertionError(
                            f"the watcher scraped {server.served} of {len(replay.pages)} pages:"
                            f" {watcher.states[0].last_error}"
                        )
                    time.sleep(0.05)
            finally:
                watcher.request_stop()
                thread.join(10)
                watch.close_sources(sources)
                writer.close()
            state = watcher.states[0]
            if state.errors:
                raise AssertionError(f"scrape errors: {state.last_error}")
            target = server.url
    finally:
        store.dispose()
    return WatchedReplay(replay=replay, url=url, target=target, start=start, step_s=step_s)
