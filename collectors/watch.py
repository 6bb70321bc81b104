"""The live watcher: scrape engines' /metrics, DCGM exporters, NVML and Prometheus on an interval,
and write the samples through a buffered writer (DESIGN §4, §6).

Each source runs its own loop on one asyncio event loop, so a slow or dead target never delays
the others; ticks are scheduled on a fixed grid (no drift), and a tick missed because a scrape
overran is counted and skipped, never queued. Rows go to a ``RowSink`` (``store.ingest.
BufferedWriter``: one transaction every ~2 s, lock retry, spool). The watcher counts every row it
hands over, so tests compare "scraped" with "stored" (zero lost samples).

Two ways to use it:

- ``servescope watch`` (``services.commands.watch``) runs :func:`watch` in the foreground with a
  one-line live status; Ctrl-C flushes and exits 0.
- :class:`LiveCollection` runs the same watcher on a background thread while something else
  (``servescope bench``, the demo) runs, and hands back a :class:`CollectionSummary` of which
  sources and hosts it saw, to be recorded with the run::

      live = LiveCollection.start(store, metrics_urls=["http://127.0.0.1:8000/metrics"],
                                  dcgm_urls=[], gpu=None, interval_s=1.0)
      ...                      # the benchmark runs
      summary = live.stop()    # flushes; summary.to_json() → runs.client_params["collectors"]
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx

from analysis.printable import printable
from collectors import engine_metrics, gpu, http_client, prometheus
from collectors.prometheus_text import Exposition, PrometheusTextError, labels_key, parse
from collectors.row_sink import RowSink
from errors import CollectorError, InputError

log = logging.getLogger("servescope.watch")

#: Raw-series modes: every series, the engine's (and DCGM's) own families, or none.
RAW_MODES = ("engine", "all", "none")
MIN_INTERVAL_S = 0.25
#: The most Prometheus steps one poll asks for: a watcher that fell behind (a slow server, a
#: long stall) catches up this many steps per tick instead of asking for everything at once.
MAX_STEPS_PER_FETCH = 600


# --- sources ----------------------------------------------------------------------------------


@dataclass
class SourceState:
    """What one source has done so far (shown in the status line, returned in summaries)."""

    kind: str  # metrics | dcgm | nvml | prometheus
    key: str  # the URL, or the host for NVML
    engine: str | None = None
    hosts: set[str] = field(default_factory=set)
    scrapes: int = 0
    errors: int = 0
    missed_ticks: int = 0
    last_ts: float | None = None
    last_error: str | None = None
    rows: dict[str, int] = field(default_factory=dict)
    latest: dict[str, float] = field(default_factory=dict)  # a few normalised values
    gpus: int = 0

    def count(self, table: str, n: int) -> None:
        self.rows[table] = self.rows.get(table, 0) + n

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "key": self.key,
            "engine": self.engine,
            "hosts": sorted(self.hosts),
            "scrapes": self.scrapes,
            "errors": self.errors,
            "missed_ticks": self.missed_ticks,
            "last_error": self.last_error,
            "rows": dict(self.rows),
        }


def _netloc(url: str) -> str:
    return urlsplit(url).netloc or url


def metrics_url(url: str) -> str:
    """``host:port`` or an endpoint URL → its /metrics URL (a path given is kept)."""
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    path = parts.path if parts.path not in ("", "/") else "/metrics"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def split_credentials(url: str) -> tuple[str, httpx.BasicAuth | None]:
    """``http://user:pw@host/metrics`` → (``http://host/metrics``, Basic auth): the URL that is
    stored, shown and logged never carries the password; the credentials travel as a header."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port is not None else "")
    public = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return public, httpx.BasicAuth(unquote(parts.username or ""), unquote(parts.password or ""))


class ScrapeSource:
    """An engine's /metrics or a DCGM exporter's page (both may be on one page: the sim)."""

    def __init__(self, url: str, *, kind: str = "metrics", raw: str = "engine") -> None:
        if raw not in RAW_MODES:
            raise InputError(f"unknown raw mode {raw!r}; choose one of {', '.join(RAW_MODES)}")
        self.url, self._auth = split_credentials(metrics_url(url))
        self.raw = raw
        self.state = SourceState(kind, self.url)
        self._hist_counts: dict[str, float] = {}  # histogram → its _count last stored in full

    async def collect(
        self, client: httpx.AsyncClient, ts: float
    ) -> dict[str, list[dict[str, Any]]]:
        try:
            resp = await client.get(self.url, auth=self._auth or httpx.USE_CLIENT_DEFAULT)
        except httpx.HTTPError as exc:
            raise CollectorError(f"{self.url}: {type(exc).__name__}: {exc}") from exc
        if resp.status_code != 200:
            hint = " (llama.cpp needs --metrics)" if resp.status_code == 501 else ""
            raise CollectorError(f"{self.url}: HTTP {resp.status_code}{hint}")
        try:
            expo = parse(resp.text)
        except PrometheusTextError as exc:
            raise CollectorError(f"{self.url}: not Prometheus text: {exc.message}") from exc
        return self.rows(expo, ts)

    def _drop_unchanged_buckets(self, values: dict[str, float]) -> None:
        """A histogram whose count did not move since its last full scrape has the same buckets:
        keep its ``_count`` and ``_sum`` rows, drop the bucket rows (readers carry buckets
        forward; ``store.sample_series.engine_histogram_series`` fetches the last full scrape)."""
        for hist in (*engine_metrics.HISTOGRAMS, *engine_metrics.LENGTH_HISTOGRAMS):
            count = values.get(f"{hist}_count")
            if count is None:
                continue
            if self._hist_counts.get(hist) == count:
                prefix = f"{hist}_bucket:"
                for key in [k for k in values if k.startswith(prefix)]:
                    del values[key]
            else:
                self._hist_counts[hist] = count

    def rows(self, expo: Exposition, ts: float) -> dict[str, list[dict[str, Any]]]:
        """Store rows of one parsed page (public for the tests and the benchmark)."""
        by_name = expo.by_name()
        out: dict[str, list[dict[str, Any]]] = {}
        engine = engine_metrics.detect_engine(by_name) if self.state.kind == "metrics" else None
        target = self.url
        if engine is not None:
            self.state.engine = engine
            values = engine_metrics.normalise(expo, engine, by_name=by_name)
            self._drop_unchanged_buckets(values)
            out["engine_samples"] = [
                {"target": target, "ts": ts, "metric": m, "engine": engine, "value": v}
                for m, v in values.items()
            ]
            self.state.latest = {
                k: values[k]
                for k in ("requests_running", "requests_waiting", "kv_cache_usage")
                if k in values
            }
        if engine_metrics.has_dcgm(by_name):
            is_sim = engine == "sim"
            gpu_rows = gpu.dcgm_rows(
                expo,
                ts=ts,
                default_host=_netloc(self.url),
                source="sim" if is_sim else "dcgm",
                # every sim says Hostname="servescope-sim": key its GPUs by its address
                host_override=f"sim@{_netloc(self.url)}" if is_sim else None,
            )
            out["gpu_samples"] = gpu_rows
            self.state.hosts.update(str(r["host"]) for r in gpu_rows)
            self.state.gpus = len(gpu_rows)
        if self.raw != "none":
            raw: dict[tuple[str, str], dict[str, Any]] = {}
            for s in expo.samples:
                if engine_metrics.keep_raw(s.name, self.raw):
                    lk = labels_key(s.labels)
                    raw[(s.name, lk)] = {
                        "target": target,
                        "ts": ts,
                        "name": s.name,
                        "labels": lk,
                        "value": s.value,
                    }
            out["engine_raw_samples"] = list(raw.values())
        return out


class NvmlSource:
    """This host's GPUs through NVML (the sampler runs on a worker thread)."""

    def __init__(self, sampler: gpu.NvmlSampler) -> None:
        self.sampler = sampler
        self.state = SourceState("nvml", sampler.host, hosts={sampler.host})
        self.state.gpus = sampler.gpu_count

    async def collect(
        self, client: httpx.AsyncClient, ts: float
    ) -> dict[str, list[dict[str, Any]]]:
        sample = await asyncio.to_thread(self.sampler.sample)
        return sample.rows()


class PrometheusSource:
    """Normalised series from a Prometheus server, fetched as range queries step by step."""

    def __init__(
        self,
        url: str,
        *,
        match: str | None,
        step_s: float,
        raw: str = "engine",
        client: httpx.Client | None = None,
        start: float | None = None,
    ) -> None:
        prometheus.parse_match(match)  # fail early on bad matchers
        self.prom = prometheus.PrometheusClient(url, client=client)
        self.query = prometheus.default_query(match)
        self.step_s = step_s
        self.raw = raw
        self.next_start = start
        self.state = SourceState("prometheus", url.rstrip("/"))

    def _fetch(self, now: float) -> tuple[dict[str, list[dict[str, Any]]], float | None]:
        """The rows of the steps from ``next_start`` to ``now`` (at most
        ``MAX_STEPS_PER_FETCH`` of them) and where the next fetch starts (None: nothing due)."""
        start = self.next_start if self.next_start is not None else now - self.step_s
        if start > now:
            return {}, None
        end = min(now, start + (MAX_STEPS_PER_FETCH - 1) * self.step_s)
        series = self.prom.query_range(self.query, start=start, end=end, step=self.step_s)
        result = prometheus.rows_from_series(series, raw=self.raw)
        self.state.hosts.update(result.hosts)
        if result.targets:
            engines = sorted({e for e in result.targets.values() if e})
            self.state.engine = ",".join(engines) or None
        # the next query starts one step after the last step asked for
        steps = math.floor((end - start) / self.step_s)
        return result.rows, start + (steps + 1) * self.step_s

    async def collect(
        self, client: httpx.AsyncClient, ts: float
    ) -> dict[str, list[dict[str, Any]]]:
        rows, next_start = await asyncio.to_thread(self._fetch, ts)
        # advanced only once the rows are handed back: a fetch the watcher gave up on (timed
        # out) is asked for again at the next tick, never skipped
        if next_start is not None:
            self.next_start = next_start
        return rows

    def close(self) -> None:
        self.prom.close()


Source = ScrapeSource | NvmlSource | PrometheusSource


# --- the watcher ------------------------------------------------------------------------------


def _raw_first(item: tuple[str, Any]) -> bool:
    """Sort key handing a scrape's raw series over before its normalised samples: the SLO
    monitor (``collectors.breach_monitor``) judges a window when the histograms that close it
    arrive, and reads the finished-request counters of the same scrape."""
    return item[0] != "engine_raw_samples"


class Watcher:
    """Runs every source on its own fixed-interval loop and hands rows to ``sink``."""

    def __init__(
        self,
        sink: RowSink,
        sources: Sequence[Source],
        *,
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout_s: float | None = None,
    ) -> None:
        if interval_s < MIN_INTERVAL_S:
            raise InputError(
                f"--interval must be at least {MIN_INTERVAL_S:g} s, got {interval_s:g}"
            )
        self.sink = sink
        self.sources = list(sources)
        self.interval_s = interval_s
        self._clock = clock
        self._monotonic = monotonic
        self._transport = transport
        self.timeout_s = timeout_s or max(1.0, min(10.0, 2 * interval_s))
        self.rows_added: dict[str, int] = {}
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stop_requested = threading.Event()

    # stop from any thread (signal handler, LiveCollection.stop)
    def request_stop(self) -> None:
        self._stop_requested.set()
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)

    @property
    def states(self) -> list[SourceState]:
        return [s.state for s in self.sources]

    def _hand_over(self, state: SourceState, rows: Mapping[str, list[dict[str, Any]]]) -> None:
        for table, batch in sorted(rows.items(), key=_raw_first):
            if not batch:
                continue
            self.sink.add(table, batch)
            self.rows_added[table] = self.rows_added.get(table, 0) + len(batch)
            state.count(table, len(batch))

    async def _source_loop(
        self, src: Source, client: httpx.AsyncClient, stop: asyncio.Event
    ) -> None:
        state = src.state
        interval = self.interval_s
        if isinstance(src, PrometheusSource):
            interval = max(interval, src.step_s)
        next_tick = self._monotonic()
        while not stop.is_set():
            ts = self._clock()
            try:
                rows = await asyncio.wait_for(src.collect(client, ts), self.timeout_s)
            except (CollectorError, TimeoutError) as exc:
                state.errors += 1
                msg = exc.message if isinstance(exc, CollectorError) else "timed out"
                if msg != state.last_error:
                    log.warning("%s: %s", state.key, msg)
                state.last_error = msg
            except Exception as exc:  # a bug in one source must not stop the others
                state.errors += 1
                state.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("%s failed", state.key)
            else:
                state.scrapes += 1
                state.last_ts = ts
                state.last_error = None
                self._hand_over(state, rows)
            next_tick += interval
            now = self._monotonic()
            if now > next_tick:  # overran: skip the ticks that passed, never queue them
                skipped = math.floor((now - next_tick) / interval) + 1
                state.missed_ticks += skipped
                next_tick += skipped * interval
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, next_tick - self._monotonic()))

    async def run(
        self,
        *,
        duration_s: float | None = None,
        on_status: Callable[[Watcher], None] | None = None,
        status_every_s: float = 1.0,
    ) -> None:
        """Run until ``duration_s`` passes or :meth:`request_stop` is called."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if self._stop_requested.is_set():
            self._stop.set()
        self.started_at = self._clock()
        async with http_client.async_client(
            self.timeout_s,
            max_bytes=http_client.MAX_METRICS_BYTES,
            transport=self._transport,
            max_connections=max(4, 2 * len(self.sources)),
        ) as client:
            tasks = [
                asyncio.create_task(self._source_loop(s, client, self._stop), name=s.state.key)
                for s in self.sources
            ]
            deadline = None if duration_s is None else self._monotonic() + duration_s
            try:
                while not self._stop.is_set():
                    wait = status_every_s
                    if deadline is not None:
                        wait = min(wait, deadline - self._monotonic())
                        if wait <= 0:
                            break
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stop.wait(), wait)
                    if on_status is not None:
                        on_status(self)
            finally:
                self._stop.set()
                await asyncio.gather(*tasks, return_exceptions=True)
                self.ended_at = self._clock()
        for s in self.sources:
            if isinstance(s, PrometheusSource):
                s.close()

    # --- the one-line status -----------------------------------------------------------------

    def status_line(self, width: int = 160) -> str:
        """``watch 0:01:23 | 3/3 ok | 2 GPUs | 12,345 rows | <target> run 4 wait 0 kv 13% …``"""
        elapsed = (self._clock() - self.started_at) if self.started_at else 0.0
        h, rem = divmod(int(elapsed), 3600)
        m, s = divmod(rem, 60)
        ok = sum(1 for st in self.states if st.scrapes and st.last_error is None)
        gpus = sum(st.gpus for st in self.states)
        rows = sum(self.rows_added.values())
        parts = [f"watch {h}:{m:02d}:{s:02d}", f"{ok}/{len(self.states)} ok"]
        if gpus:
            parts.append(f"{gpus} GPU{'s' if gpus != 1 else ''}")
        parts.append(f"{rows:,} rows")
        for st in self.states:
            name = printable(_netloc(st.key)) if st.kind != "nvml" else "nvml"
            if st.last_error:
                parts.append(f"{name} ERR")
            elif st.latest:
                kv = st.latest.get("kv_cache_usage")
                bits = [
                    f"run {st.latest.get('requests_running', math.nan):g}",
                    f"wait {st.latest.get('requests_waiting', math.nan):g}",
                ]
                if kv is not None:
                    bits.append(f"kv {100 * kv:.0f}%")
                parts.append(f"{name} " + " ".join(bits))
        line = " | ".join(parts)
        return line if len(line) <= width else line[: width - 1] + "…"


# --- building sources -------------------------------------------------------------------------


@dataclass
class SourceSpec:
    """What to watch (the CLI's flags and LiveCollection's arguments)."""

    metrics_urls: Sequence[str] = ()
    dcgm_urls: Sequence[str] = ()
    gpu: bool | None = False  # True: NVML required; None: when present; False: off
    prometheus_url: str | None = None
    match: str | None = None
    raw: str = "engine"
    nvml: ModuleType | Any | None = None  # injectable pynvml module (tests)
    prometheus_client: httpx.Client | None = None
    prometheus_start: float | None = None


def build_sources(spec: SourceSpec, *, interval_s: float) -> tuple[list[Source], list[str]]:
    """The sources for ``spec`` and the notes to print (e.g. the no-driver line).

    A missing NVML never fails the watch: the note says GPU samples are off and the other
    sources go on.
    """
    notes: list[str] = []
    sources: list[Source] = []
    seen: set[str] = set()
    for url in spec.metrics_urls:
        src = ScrapeSource(url, kind="metrics", raw=spec.raw)
        if src.url not in seen:
            seen.add(src.url)
            sources.append(src)
    for url in spec.dcgm_urls:
        src = ScrapeSource(url, kind="dcgm", raw=spec.raw)
        if src.url not in seen:
            seen.add(src.url)
            sources.append(src)
    if spec.gpu is not False:
        sampler = gpu.NvmlSampler(spec.nvml)
        try:
            sampler.open()
        except CollectorError as exc:
            notes.append(exc.message)
        else:
            if sampler.gpu_count:
                sources.append(NvmlSource(sampler))
                notes.append(f"NVML: {sampler.gpu_count} GPU(s) on {sampler.host}")
            else:
                sampler.close()
                notes.append("NVML found no GPU: GPU samples off")
    if spec.prometheus_url:
        sources.append(
            PrometheusSource(
                spec.prometheus_url,
                match=spec.match,
                step_s=max(interval_s, 1.0),
                raw=spec.raw,
                client=spec.prometheus_client,
                start=spec.prometheus_start,
            )
        )
    return sources, notes


def close_sources(sources: Sequence[Source]) -> None:
    for s in sources:
        if isinstance(s, NvmlSource):
            s.sampler.close()
        elif isinstance(s, PrometheusSource):
            s.close()


# --- the background API for bench / demo --------------------------------------------------------


@dataclass
class CollectionSummary:
    """What a live collection saw: record it with the run (``to_json``) to join samples by time."""

    started_at: float
    ended_at: float
    interval_s: float
    sources: list[SourceState]
    notes: list[str]
    rows_added: dict[str, int]
    rows_written: int
    batches_spooled: int

    @property
    def targets(self) -> list[str]:
        """Engine targets (the ``engine_samples.target`` values) that answered at least once."""
        return [s.key for s in self.sources if s.engine and s.scrapes]

    @property
    def hosts(self) -> list[str]:
        """GPU hosts (the ``gpu_samples.host`` values) seen."""
        return sorted({h for s in self.sources for h in s.hosts})

    def to_json(self) -> dict[str, Any]:
        return {
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "interval_s": self.interval_s,
            "targets": self.targets,
            "hosts": self.hosts,
            "sources": [s.to_json() for s in self.sources],
            "notes": list(self.notes),
            "rows": dict(self.rows_added),
            "batches_spooled": self.batches_spooled,
        }


class _Writer(Protocol):
    rows_written: int
    batches_spooled: int

    def add(self, table: str, rows: Sequence[Mapping[str, Any]]) -> None: ...

    def close(self) -> None: ...


class LiveCollection:
    """A watcher on a background thread (its own event loop) for the length of a benchmark.

    ``start`` returns once the sources are set up (NVML opened or noted off); the first scrape
    happens at once. ``stop`` ends the loops, flushes the writer (spooling if the store stays
    locked) and returns a :class:`CollectionSummary`. Use it as a context manager or call
    ``stop`` in a ``finally``.
    """

    def __init__(self, watcher: Watcher, writer: _Writer, notes: list[str], *, own_writer: bool):
        self.watcher = watcher
        self.writer = writer
        self.notes = notes
        self._own_writer = own_writer
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="servescope-live", daemon=True)
        self._summary: CollectionSummary | None = None

    @classmethod
    def start(
        cls,
        store: Any = None,
        *,
        metrics_urls: Sequence[str] = (),
        dcgm_urls: Sequence[str] = (),
        gpu: bool | None = None,
        interval_s: float = 1.0,
        raw: str = "engine",
        prometheus_url: str | None = None,
        match: str | None = None,
        writer: _Writer | None = None,
        flush_interval_s: float = 2.0,
        nvml: ModuleType | Any | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> LiveCollection:
        """Start collecting into ``store`` (a ``store.db.Store``) or into ``writer``.

        ``gpu``: True requires NVML (a note when absent), None uses it when present, False
        skips it. With no source at all the collection still starts (and stores nothing).
        """
        spec = SourceSpec(
            metrics_urls=metrics_urls,
            dcgm_urls=dcgm_urls,
            gpu=gpu,
            prometheus_url=prometheus_url,
            match=match,
            raw=raw,
            nvml=nvml,
        )
        sources, notes = build_sources(spec, interval_s=interval_s)
        own = writer is None
        if writer is None:
            if store is None:
                raise InputError("LiveCollection.start needs a store or a writer")
            from store.ingest import BufferedWriter

            writer = BufferedWriter(store, flush_interval_s=flush_interval_s, background=True)
        watcher = Watcher(writer, sources, interval_s=interval_s, transport=transport)
        live = cls(watcher, writer, notes, own_writer=own)
        live._thread.start()
        return live

    def _main(self) -> None:
        try:
            asyncio.run(self.watcher.run())
        except BaseException as exc:  # reported by stop()
            self._error = exc

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout_s: float = 30.0) -> CollectionSummary:
        """Stop, flush and summarise (idempotent)."""
        if self._summary is not None:
            return self._summary
        self.watcher.request_stop()
        self._thread.join(timeout_s)
        close_sources(self.watcher.sources)
        if self._own_writer:
            self.writer.close()
        if self._error is not None:
            log.error("live collection failed: %s", self._error)
        w = self.watcher
        self._summary = CollectionSummary(
            started_at=w.started_at or time.time(),
            ended_at=w.ended_at or time.time(),
            interval_s=w.interval_s,
            sources=w.states,
            notes=list(self.notes),
            rows_added=dict(w.rows_added),
            rows_written=int(getattr(self.writer, "rows_written", 0)),
            batches_spooled=int(getattr(self.writer, "batches_spooled", 0)),
        )
        return self._summary

    def __enter__(self) -> LiveCollection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def resolve_metrics_url(
    endpoint: str, *, timeout_s: float = 2.0, transport: httpx.BaseTransport | None = None
) -> str | None:
    """``--metrics-url auto``: the endpoint's /metrics URL when it answers Prometheus text of a
    known engine (or a DCGM page), else None. ``http://host:8000/v1`` → ``http://host:8000/metrics``.
    """
    parts = urlsplit(endpoint if "://" in endpoint else "http://" + endpoint)
    url = urlunsplit((parts.scheme, parts.netloc, "/metrics", "", ""))
    try:
        with http_client.sync_client(
            timeout_s, max_bytes=http_client.MAX_METRICS_BYTES, transport=transport
        ) as client:
            resp = client.get(url)
    except httpx.HTTPError:
        return None
    if resp.status_code != 200:
        return None
    try:
        names = parse(resp.text).names()
    except PrometheusTextError:
        return None
    if engine_metrics.detect_engine(names) or engine_metrics.has_dcgm(names):
        return url
    return None


def watch(
    sink: RowSink,
    spec: SourceSpec,
    *,
    interval_s: float = 1.0,
    duration_s: float | None = None,
    on_status: Callable[[Watcher], None] | None = None,
    on_notes: Callable[[str], None] | None = None,
    on_watcher: Callable[[Watcher], None] | None = None,
    install_signal_handlers: bool = True,
) -> Watcher:
    """Run a watcher in the foreground until ``duration_s`` or SIGINT/SIGTERM (then return).

    ``on_watcher`` gets the watcher before it starts (e.g. to ``request_stop`` it from another
    thread). The caller flushes/closes its sink afterwards. Returns the watcher (counters,
    states).
    """
    sources, notes = build_sources(spec, interval_s=interval_s)
    for note in notes:
        if on_notes is not None:
            on_notes(note)
    if not sources:
        raise InputError(
            "nothing to watch",
            hint="give --metrics URL, --dcgm URL, --gpu (with an NVIDIA driver) or --prometheus",
        )
    watcher = Watcher(sink, sources, interval_s=interval_s)
    if on_watcher is not None:
        on_watcher(watcher)

    async def _main() -> None:
        if install_signal_handlers:
            import signal

            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.add_signal_handler(sig, watcher.request_stop)
        await watcher.run(duration_s=duration_s, on_status=on_status)

    try:
        asyncio.run(_main())
    finally:
        close_sources(sources)
    return watcher
