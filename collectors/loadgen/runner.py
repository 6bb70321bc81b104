"""Coordinates a benchmark: discovery, calibration, one stored run per load level.

``run_benchmark(config, store, progress=...)`` is the Python API (the CLI and the demo call
it). For each load level it starts the measuring worker processes (``worker.py``; or measures
in this process with ``BenchConfig.in_process``), writes their rows through the store's
``BufferedWriter`` as they arrive (so an interrupted run keeps what completed), shows the live
progress bar, and finally stores the run row: status, duration, achieved rate and the
client-bound verdict. The API key is read from the environment variable named by
``api_key_env`` and only ever travels in request headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

from collectors.endpoint_identity import OWNED_BY, EndpointIdentity, identify
from collectors.loadgen.client import (
    HttpxEndpoint,
    auth_hint,
    build_body,
    connect_hint,
    split_endpoint,
)
from collectors.loadgen.config import BenchConfig, LoadLevel
from collectors.loadgen.cores import WorkerChoice, auto_workers
from collectors.loadgen.engine import (
    Driver,
    DriverSummary,
    ResultBatch,
    WorkerPlan,
    share_of,
)
from collectors.loadgen.progress import ProgressView
from collectors.loadgen.prompts import DEFAULT_CALIBRATION, PROBE_WORDS, Calibration, fit, words
from collectors.loadgen.results import RunCollector
from collectors.loadgen.shards import ShardCoordinator
from collectors.loadgen.sse import StreamAccumulator
from collectors.loadgen.traces import Trace, check_context
from collectors.loadgen.transport import SendTiming
from collectors.loadgen.worker import make_endpoint, raise_nofile_limit
from collectors.loadgen.workloads import (
    DatasetItem,
    TurnSpec,
    Workload,
    load_dataset,
    parse_workload,
)
from collectors.watch import LiveCollection, resolve_metrics_url
from errors import STOP_SIGNALS, CollectorError, EndpointError, InputError, StoreError
from store import catalog, ingest, run_shards
from store.db import Store

#: How long bench waits for the endpoint to say who it is before calling it unknown.
IDENTIFY_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class LevelOutcome:
    """How one load level's run ended, and where its rows are."""

    run_id: str
    status: str  # completed | interrupted | failed (runs.status)
    requests: int  # rows handed to the writer (every completed, failed or cancelled request)
    ok: int
    failures: int  # error or timeout (cancelled ones excluded)
    rows_spooled: int = 0  # rows (of every table, the run row included) left in the spool
    batches_spooled: int = 0
    spool_dir: Path | None = None
    #: a --shard host: the status of the run merged over every host (None while other hosts
    #: were still running when this one left the merge to them)
    merged_status: str | None = None


@dataclass
class BenchOutcome:
    """What ``run_bench`` did: one ``LevelOutcome`` per run, and the signal that stopped it."""

    levels: list[LevelOutcome] = field(default_factory=list)
    store_url: str = ""
    signum: int | None = None

    @property
    def run_ids(self) -> list[str]:
        return [lvl.run_id for lvl in self.levels]

    @property
    def failed(self) -> list[LevelOutcome]:
        return [lvl for lvl in self.levels if lvl.status == "failed"]

    @property
    def rows_spooled(self) -> int:
        return sum(lvl.rows_spooled for lvl in self.levels)

    @property
    def spool_dirs(self) -> list[Path]:
        return sorted({lvl.spool_dir for lvl in self.levels if lvl.rows_spooled and lvl.spool_dir})


class BenchInterrupted(KeyboardInterrupt):
    """Ctrl-C, SIGTERM or SIGHUP: the runs in ``run_ids`` were saved (the last one as 'interrupted')
    or spooled (``outcome`` says which); ``signum`` is the signal (SIGINT for a plain Ctrl-C)."""

    def __init__(
        self,
        run_ids: list[str],
        *,
        signum: int = signal.SIGINT,
        outcome: BenchOutcome | None = None,
    ) -> None:
        super().__init__("benchmark interrupted")
        self.run_ids = run_ids
        self.signum = signum
        self.outcome = outcome or BenchOutcome()


class StopSignals:
    """SIGINT, SIGTERM and SIGHUP during a benchmark (installed by ``run_bench`` in the main
    thread).

    Before measuring (discovery, calibration) the first signal raises KeyboardInterrupt: nothing
    is stored yet. From the first load level on, signals never raise: the first one asks the
    level to stop (its workers cancel what is in flight and send what completed), and it and
    any later one are only acknowledged on stderr — so the final flush of the rows and of the
    run row cannot be cut half-way; it completes, or spools when the store stays locked.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.raising = True
        self._on_stop: Callable[[], None] | None = None
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signals reach only the main thread; its owner handles them
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    def _say(self, text: str) -> None:
        # os.write: a handler may interrupt a buffered write to stderr (the progress bar)
        with contextlib.suppress(OSError):
            os.write(2, f"\nservescope: {text}\n".encode())

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.signum is None:
            self.signum = signum
            if self.raising:
                raise KeyboardInterrupt
            self._say(f"{name}: stopping; saving what completed (a second signal cannot stop that)")
            if self._on_stop is not None:
                self._on_stop()
        else:
            self._say(f"{name}: already stopping — saving what completed, please wait")

    @contextlib.contextmanager
    def on_stop(self, callback: Callable[[], None]) -> Iterator[None]:
        """Call ``callback`` on the first signal while inside (at once if one already came).
        The callback runs in a signal handler: it must only set flags or schedule work."""
        self._on_stop = callback
        try:
            if self.signum is not None:
                callback()
            yield
        finally:
            self._on_stop = None


@dataclass(frozen=True)
class Prepared:
    model: str
    framework: str
    calibration: Calibration
    workload: Workload | None
    dataset: tuple[DatasetItem, ...] | None
    endpoint_public: str
    api_key: str | None
    metrics_urls: tuple[str, ...] = ()
    framework_version: str | None = None
    #: the route that named the framework (``EndpointIdentity.source``), and what it named
    identity_source: str | None = None
    identity_framework: str | None = None
    trace: Trace | None = None  # --trace, scaled, windowed and cut to --requests/--duration


def public_endpoint(endpoint: str) -> str:
    """The endpoint without credentials or query string (what the store may keep)."""
    return split_endpoint(endpoint)[0]


def api_key_from_env(name: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """The API key in the environment variable ``name`` (``--api-key-env``; None: no key), from
    ``env`` (default ``os.environ``); an unset or empty variable is an InputError saying how to
    set it. bench, verify and quality read their keys here; the key is never stored."""
    if not name:
        return None
    import os

    source = os.environ if env is None else env
    key = source.get(name, "").strip()
    if not key:
        raise InputError(
            f"--api-key-env {name}: that environment variable is not set or empty",
            hint=f"export {name}=... (the key is sent as a Bearer token, never stored)",
        )
    return key


# --- discovery and calibration --------------------------------------------------------------


async def _discover(ep: HttpxEndpoint, cfg: BenchConfig) -> tuple[str, str | None]:
    try:
        listing = await ep.get_json("/v1/models")
    except httpx.HTTPStatusError as exc:
        listing = None
        problem = f"HTTP {exc.response.status_code}"
        if exc.response.status_code in (401, 403) and not cfg.model:
            raise EndpointError(
                f"{public_endpoint(cfg.endpoint)}/v1/models answered {problem}",
                hint=auth_hint(cfg.api_key_env),
            ) from None
    except httpx.HTTPError as exc:
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
            raise EndpointError(
                f"cannot reach {public_endpoint(cfg.endpoint)}: {ep.redact(str(exc))}",
                hint=connect_hint(exc),
            ) from None
        listing, problem = None, ep.redact(f"{type(exc).__name__}: {exc}")
    except ValueError as exc:  # json_of: deep nesting is a ValueError too
        listing, problem = None, f"the answer is not JSON: {exc}"
    data = listing.get("data") if isinstance(listing, dict) else None
    models = [m for m in data or () if isinstance(m, dict) and isinstance(m.get("id"), str)]
    if cfg.model:
        owned = next((m.get("owned_by") for m in models if m["id"] == cfg.model), None)
        if models and owned is None and all(m["id"] != cfg.model for m in models):
            served = ", ".join(m["id"] for m in models[:10])
            raise InputError(
                f"--model {cfg.model!r} is not served here; /v1/models lists: {served}"
            )
        return cfg.model, owned if isinstance(owned, str) else None
    if not models:
        why = problem if listing is None else "it lists no models"
        raise EndpointError(
            f"cannot pick a model from {public_endpoint(cfg.endpoint)}/v1/models ({why})",
            hint="pass --model NAME",
        )
    first = models[0]
    owned_by = first.get("owned_by")
    return str(first["id"]), owned_by if isinstance(owned_by, str) else None


async def _probe(ep: HttpxEndpoint, cfg: BenchConfig, model: str) -> Calibration:
    """Two requests of known word counts → tokens per word (and the template overhead)."""
    points: list[tuple[int, int]] = []
    rng = random.Random(f"probe-{cfg.seed}")
    note = "default (the server sent no usage)"
    for n in PROBE_WORDS:
        body, _ = build_body(cfg.api, model, TurnSpec(words(rng, n), 1))
        acc = StreamAccumulator()
        try:
            async with asyncio.timeout(min(cfg.timeout_s, 120.0)):
                status, error = await ep.stream(body, acc, SendTiming())
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise EndpointError(
                f"cannot reach {public_endpoint(cfg.endpoint)}: {ep.redact(str(exc))}",
                hint=connect_hint(exc),
            ) from None
        except (httpx.HTTPError, TimeoutError, OSError) as exc:
            note = f"default (probe failed: {type(exc).__name__})"
            break
        if status in (400, 401, 403, 404, 405, 422):
            hint = {
                401: auth_hint(cfg.api_key_env),
                403: auth_hint(cfg.api_key_env),
                404: "is this an OpenAI-compatible server? try --api completions or --api chat",
                405: "try --api completions or --api chat",
            }.get(status, "check --model and --api")
            raise EndpointError(
                f"{public_endpoint(cfg.endpoint)} refused a {cfg.api} request: {error}", hint=hint
            )
        if error is not None:
            note = f"default (probe got {error[:60]})"
            break
        prompt_tokens = acc.usage()[0]
        if prompt_tokens is None:
            break
        points.append((n, prompt_tokens))
    cal = fit(points)
    if cal is None:
        return Calibration(DEFAULT_CALIBRATION.tokens_per_word, 0.0, note)
    return cal


def config_trace(cfg: BenchConfig) -> Trace:
    """``cfg``'s trace as it will be replayed: windowed, scaled and cut by --requests/--duration
    (``traces.load_trace``, which keeps the last few read: checking it first costs nothing)."""
    from collectors.loadgen.traces import load_trace

    if not cfg.trace:
        raise InputError("no --trace given")
    return load_trace(
        cfg.trace,
        fmt=cfg.trace_format,
        speed=cfg.trace_speed,
        window=cfg.trace_window,
        requests=cfg.requests,
        duration_s=cfg.duration_s,
    )


def prepare(
    cfg: BenchConfig,
    store: Store,
    *,
    api_key: str | None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Prepared:
    """Resolve the workload/dataset, check the SLO name, find the model, calibrate prompts."""
    workload: Workload | None = None
    dataset: tuple[DatasetItem, ...] | None = None
    trace: Trace | None = None
    if cfg.trace:
        trace = config_trace(cfg)
    elif cfg.workload:
        workload = parse_workload(catalog.get(store, "workloads", cfg.workload))
    elif cfg.workload_spec:
        workload = parse_workload(cfg.workload_spec)
    else:
        assert cfg.dataset is not None
        dataset = tuple(load_dataset(cfg.dataset))
    if workload is not None and workload.api not in ("any", cfg.api):
        raise InputError(
            f"workload {workload.name!r} is for --api {workload.api}, not --api {cfg.api}"
        )
    if cfg.slo:
        catalog.get(store, "slo_profiles", cfg.slo)

    async def go() -> tuple[str, str | None, EndpointIdentity, Calibration]:
        ep = HttpxEndpoint(
            cfg.endpoint,
            api=cfg.api,
            api_key=api_key,
            timeout_s=min(cfg.timeout_s, 60.0),
            transport=transport,
        )
        try:
            model, owned_by = await _discover(ep, cfg)
            identity = await _identify(ep)
            if trace is not None and identity.max_model_len:  # before anything is sent
                where = f"{public_endpoint(cfg.endpoint)}/v1/models"
                check_context(trace, identity.max_model_len, where)
            cal = DEFAULT_CALIBRATION
            if (workload is not None or trace is not None) and cfg.calibrate:
                cal = await _probe(ep, cfg, model)
            return model, owned_by, identity, cal
        finally:
            await ep.aclose()

    model, owned_by, identity, cal = asyncio.run(go())
    metrics_urls = _live_metrics_urls(cfg, transport)
    framework, version = resolve_framework(cfg.framework, identity, owned_by)
    return Prepared(
        model=model,
        framework=framework,
        framework_version=version,
        identity_source=identity.source,
        identity_framework=identity.framework,
        calibration=cal,
        workload=workload,
        dataset=dataset,
        endpoint_public=public_endpoint(cfg.endpoint),
        api_key=api_key,
        metrics_urls=metrics_urls,
        trace=trace,
    )


async def _identify(ep: HttpxEndpoint) -> EndpointIdentity:
    """Who the endpoint says it is (``collectors.endpoint_identity``), through the endpoint's
    own client (its transport and credentials); unknown when it will not say in time."""
    try:
        async with asyncio.timeout(IDENTIFY_TIMEOUT_S):
            return await identify(ep.client, ep.base, ep.query)
    except (EndpointError, httpx.HTTPError, TimeoutError, ValueError):
        return EndpointIdentity(None, None, None)


def resolve_framework(
    given: str | None, identity: EndpointIdentity, owned_by: str | None = None
) -> tuple[str, str | None]:
    """(framework, framework_version) of the runs: ``--framework`` when given (its version only
    when the endpoint names the same framework), else the endpoint's identity, else the owner
    of the chosen model in ``/v1/models``, else ``unknown``."""
    if given:
        same = identity.framework is not None and identity.framework.lower() == given.lower()
        return given, identity.version if same else None
    if identity.framework:
        return identity.framework, identity.version
    return OWNED_BY.get((owned_by or "").lower(), "unknown"), None


def _live_metrics_urls(
    cfg: BenchConfig, transport: httpx.AsyncBaseTransport | None
) -> tuple[str, ...]:
    """The engine /metrics URLs to scrape during each run (``--metrics-url``). Of the hosts of a
    sharded run only the first (``--shard 1/N``) scrapes: the server's series once, not N times."""
    if cfg.metrics_url in (None, "off") or transport is not None:
        return ()  # an injected transport means no real server to scrape
    if cfg.shard is not None and cfg.shard[0] != 0:
        return ()
    if cfg.metrics_url == "auto":
        found = resolve_metrics_url(cfg.endpoint)
        return (found,) if found else ()
    return (cfg.metrics_url,)


# --- one load level ---------------------------------------------------------------------------


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def level_load(cfg: BenchConfig, prep: Prepared, level: LoadLevel) -> tuple[str, float, int | None]:
    """(kind, value, requests) of a level as the workers see it: a trace level is replayed at
    its mean rate, its length the number of requests; a shard's streams are its share."""
    if level.kind == "trace":
        assert prep.trace is not None, "a trace level needs Prepared.trace"
        return "trace", prep.trace.mean_rate, len(prep.trace)
    if level.kind == "concurrency" and cfg.shard is not None:
        index, count = cfg.shard
        return "concurrency", float(_split(int(level.value), count)[index]), cfg.requests
    return level.kind, level.value, cfg.requests


def choose_workers(cfg: BenchConfig, prep: Prepared, level: LoadLevel) -> WorkerChoice:
    """``--workers N`` as given, or (auto) what ``cores.auto_workers`` picks for this host's
    share of the level; never more workers than streams or requests, one when in process."""
    kind, value, requests = level_load(cfg, prep, level)
    if cfg.in_process:
        return WorkerChoice(1, "measured in this process (in_process)")
    if cfg.workers is not None:
        choice = WorkerChoice(cfg.workers, f"--workers {cfg.workers}")
    else:
        choice = auto_workers(kind, value)
    n = choice.workers
    if kind == "concurrency":
        n = min(n, max(1, int(value)))
    if requests is not None:
        n = min(n, max(1, requests))
    return choice if n == choice.workers else WorkerChoice(n, f"{choice.reason}; capped at {n}")


def worker_plans(
    cfg: BenchConfig, prep: Prepared, level: LoadLevel, choice: WorkerChoice | None = None
) -> list[WorkerPlan]:
    """The level's plan per worker; ``choice``: the workers already chosen (else chosen here)."""
    kind, value, requests = level_load(cfg, prep, level)
    workers = (choice or choose_workers(cfg, prep, level)).workers
    streams = _split(int(value), workers) if kind == "concurrency" else None
    warm = _split(cfg.warmup, workers)
    shard, shards = cfg.shard or (0, 1)
    return [
        WorkerPlan(
            endpoint=cfg.endpoint,
            api=cfg.api,
            model=prep.model,
            kind=kind,
            value=float(streams[w]) if streams is not None else value,
            arrival=cfg.arrival,
            burstiness=cfg.burstiness if cfg.burstiness is not None else 1.0,
            worker=w,
            workers=workers,
            requests=requests,
            duration_s=cfg.duration_s if kind != "trace" else None,
            warmup=warm[w],
            workload=prep.workload,
            dataset=prep.dataset,
            calibration=prep.calibration,
            max_tokens=cfg.max_tokens,
            ignore_eos=cfg.ignore_eos,
            seed=cfg.seed,
            timeout_s=cfg.timeout_s,
            api_key=prep.api_key,
            transport=cfg.transport,
            timestamps=cfg.timestamps,
            shard=shard,
            shards=shards,
            trace=prep.trace if kind == "trace" else None,
        )
        for w in range(workers)
    ]


def _client_params(
    cfg: BenchConfig, prep: Prepared, level: LoadLevel, bench_id: str, choice: WorkerChoice
) -> dict[str, Any]:
    return {
        "tool": "servescope bench",
        "bench_id": bench_id,
        "api": cfg.api,
        "workload": cfg.workload or (cfg.workload_spec or {}).get("name"),
        # a workload file's content, so hosts of one --shard group can tell theirs agree
        "workload_sha256": _spec_sha256(cfg.workload_spec) if cfg.workload_spec else None,
        "dataset": cfg.dataset,
        "load": {"kind": level.kind, "value": level.value},
        "concurrency_capped": cfg.capped_note(level),
        "arrival": _arrival(cfg, level),
        "burstiness": cfg.burstiness,
        "requests": cfg.requests,
        "duration_s": cfg.duration_s,
        "warmup": cfg.warmup,
        "max_tokens": cfg.max_tokens,
        "ignore_eos": cfg.ignore_eos,
        "slo": cfg.slo,
        "seed": cfg.seed,
        "workers": choice.workers,
        "workers_reason": choice.reason,
        "timeout_s": cfg.timeout_s,
        "transport": cfg.transport,
        "timestamps": cfg.timestamps,
        "trace": _trace_params(prep.trace) if level.kind == "trace" else None,
        "shard": {"index": cfg.shard[0] + 1, "count": cfg.shard[1], "group": cfg.group}
        if cfg.shard is not None
        else None,
        "auth": bool(prep.api_key),
        "identity_source": prep.identity_source,
        "identity_framework": prep.identity_framework,
        "calibration": {
            "tokens_per_word": round(prep.calibration.tokens_per_word, 4),
            "overhead_tokens": round(prep.calibration.overhead, 2),
            "source": prep.calibration.source,
        },
    }


def _spec_sha256(spec: Mapping[str, Any]) -> str:
    """The sha256 of a workload entry's canonical JSON."""
    text = json.dumps(spec, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _trace_params(trace: Trace | None) -> dict[str, Any] | None:
    """What the run records of its trace (never the file's folder)."""
    if trace is None:
        return None
    return {
        "file": trace.name,
        "format": trace.format,
        "sha256": trace.sha256,
        "speed": trace.speed,
        "window_s": list(trace.window) if trace.window is not None else None,
        "requests": len(trace),
        "span_s": round(trace.span_s, 6),
        "rows_read": trace.rows_read,
        "rows_skipped": trace.rows_skipped,
        "rows_unusable": trace.rows_unusable,
        "reordered": trace.reordered,
    }


def _arrival(cfg: BenchConfig, level: LoadLevel) -> str:
    """runs.arrival: concurrency | constant | poisson | gamma | trace."""
    if level.kind == "trace":
        return "trace"
    return cfg.arrival if level.kind == "rate" else "concurrency"


def run_host(cfg: BenchConfig) -> str:
    """The host name this process measures as (``--host-name``, else the machine's)."""
    return cfg.host_name or socket.gethostname()


def _base_run(
    cfg: BenchConfig,
    prep: Prepared,
    level: LoadLevel,
    run_id: str,
    bench_id: str,
    choice: WorkerChoice,
) -> dict[str, Any]:
    label = cfg.name or cfg.workload_label
    return {
        "run_id": run_id,
        "name": f"{label} {level.label}",
        "source": "servescope",
        "framework": prep.framework,
        "framework_version": prep.framework_version,
        "model": prep.model,
        "precision": cfg.precision,
        "kv_cache_dtype": cfg.kv_cache_dtype,
        "gpu_name": cfg.gpu_name,
        "gpu_count": cfg.gpu_count,
        "endpoint": prep.endpoint_public,
        "api": cfg.api,
        "host": run_host(cfg),
        "workload": cfg.workload_label,
        "arrival": _arrival(cfg, level),
        "source_sha256": prep.trace.sha256 if level.kind == "trace" and prep.trace else None,
        "target_rate": level.value
        if level.kind == "rate"
        else (prep.trace.mean_rate if level.kind == "trace" and prep.trace else None),
        "burstiness": (cfg.burstiness or 1.0)
        if level.kind == "rate" and cfg.arrival == "gamma"
        else None,
        "concurrency": int(level.value) if level.kind == "concurrency" else None,
        "engine_params": dict(cfg.engine_params),
        "client_params": _client_params(cfg, prep, level, bench_id, choice),
        "sweep_id": cfg.sweep_id,
        "tags": list(cfg.tags),
        "notes": cfg.notes,
        "status": "running",
        "started_at": time.time(),
    }


class _Live:
    """Collector + progress, fed one batch at a time."""

    def __init__(self, collector: RunCollector, view: ProgressView) -> None:
        self.collector = collector
        self.view = view

    def __call__(self, batch: ResultBatch) -> None:
        self.collector.add(batch)
        self.tick()

    def tick(self, force: bool = False) -> None:
        c = self.collector
        p50, p99 = c.ttft_p50_p99() if c.recent_ttft else (None, None)
        self.view.update(done=c.done, errors=c.errors, ttft_p50=p50, ttft_p99=p99, force=force)


#: blocks until the common start of a sharded run; returns it (epoch s on this host's clock), or
#: None when the level was stopped first (``ShardCoordinator.wait_start``)
StartAt = Callable[[], float | None]


def _drive_in_process(
    plan: WorkerPlan,
    live: _Live,
    transport: httpx.AsyncBaseTransport | None,
    stopper: StopSignals | None = None,
    start_at: StartAt | None = None,
) -> list[DriverSummary]:
    summaries: list[DriverSummary] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        endpoint = (
            HttpxEndpoint(
                plan.endpoint,
                api=plan.api,
                api_key=plan.api_key,
                timeout_s=plan.timeout_s,
                transport=transport,
            )
            if transport is not None
            else make_endpoint(plan)
        )
        driver = Driver(plan, endpoint, live)
        summaries.append(driver.summary)

        def stop() -> None:  # from a signal handler: schedule, do not act
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(driver.stop)

        guard = stopper.on_stop(stop) if stopper is not None else contextlib.nullcontext()
        try:
            with guard:
                await driver.warmup()
                if driver.summary.interrupted:
                    return
                if start_at is None:
                    await driver.run()
                    return
                start = await loop.run_in_executor(None, start_at)
                if start is None:
                    driver.summary.interrupted = True
                else:
                    await driver.run(start_perf=start - driver.clock.offset)
        finally:
            await endpoint.aclose()

    raise_nofile_limit()
    asyncio.run(main())
    return summaries


class _Workers:
    """The worker processes of one level and the pump that reads their pipes."""

    def __init__(
        self, plans: list[WorkerPlan], live: _Live, start_at: StartAt | None = None
    ) -> None:
        self.live = live
        self.start_at = start_at
        self.conns: list[Connection] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        for plan in plans:
            parent, child = socket.socketpair()
            # a new session: the terminal's Ctrl-C reaches only the coordinator, which stops
            # the workers itself after saving
            proc = subprocess.Popen(
                [sys.executable, "-m", "collectors.loadgen.worker", str(child.fileno())],
                pass_fds=(child.fileno(),),
                env=env,
                start_new_session=True,
            )
            child.close()
            conn = Connection(parent.detach())
            conn.send(plan)
            self.conns.append(conn)
            self.procs.append(proc)
        self.ready: set[int] = set()
        self.done: dict[int, DriverSummary] = {}
        self.failed: dict[int, str] = {}
        self.start_epoch: float | None = None
        self.stopped = False

    def _send(self, i: int, msg: tuple[Any, ...]) -> None:
        with contextlib.suppress(OSError, EOFError):
            self.conns[i].send(msg)

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            for i in range(len(self.conns)):
                if i not in self.done and i not in self.failed:
                    self._send(i, ("stop",))

    def pump(self, stopper: StopSignals | None = None, *, stop_grace_s: float = 60.0) -> None:
        """Read messages until every worker is done or failed. When ``stopper`` has been
        signalled, ask the workers to stop (they send what completed, then "done"); those
        still running ``stop_grace_s`` later are given up (``close`` ends them)."""
        n = len(self.conns)
        given_up_at: float | None = None
        while len(self.done) + len(self.failed) < n:
            if stopper is not None and stopper.requested and not self.stopped:
                self.stop()
                given_up_at = time.monotonic() + stop_grace_s
            if given_up_at is not None and time.monotonic() > given_up_at:
                for i in range(n):
                    if i not in self.done and i not in self.failed:
                        self.failed[i] = "the worker did not stop in time"
                break
            live = [
                c for i, c in enumerate(self.conns) if i not in self.done and i not in self.failed
            ]
            for conn in wait(live, timeout=0.25):
                assert isinstance(conn, Connection)
                i = self.conns.index(conn)
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    self.failed[i] = "the worker process exited without finishing"
                    continue
                kind = msg[0]
                if kind == "batch":
                    self.live(msg[1])
                elif kind == "ready":
                    self.ready.add(i)
                    if len(self.ready) == n and self.start_epoch is None and not self.stopped:
                        self._go()
                elif kind == "done":
                    self.done[i] = msg[1]
                elif kind == "error":
                    self.failed[i] = str(msg[1])
                    self.stop()
            for i, proc in enumerate(self.procs):
                if i not in self.done and i not in self.failed and proc.poll() is not None:
                    # drain what it sent before dying
                    if self.conns[i].poll():
                        continue
                    self.failed[i] = f"the worker process died (exit code {proc.returncode})"
            self.live.tick()

    def _go(self) -> None:
        """Every worker is warmed up: start them together (at the hosts' common start)."""
        if self.start_at is None:
            start: float | None = time.time() + 0.05
        else:
            try:
                start = self.start_at()
            except BaseException:
                self.stop()
                raise
        if start is None:
            self.stop()
            return
        self.start_epoch = start
        for j in range(len(self.conns)):
            self._send(j, ("go", start))

    def close(self, *, kill: bool = False) -> None:
        for proc in self.procs:
            if kill and proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for conn in self.conns:
            conn.close()


def _drive_workers(
    plans: list[WorkerPlan], live: _Live, stopper: StopSignals, start_at: StartAt | None = None
) -> tuple[list[DriverSummary], bool]:
    workers = _Workers(plans, live, start_at)
    try:
        # a signal only sets stopper.signum (see StopSignals): the pump sees it within 0.25 s,
        # so no exception ever lands half-way through handling a batch
        workers.pump(stopper)
        interrupted = stopper.requested or workers.stopped
        if workers.failed:
            first = next(iter(workers.failed.values()))
            if not stopper.requested:
                raise CollectorError(f"a load-generator worker failed: {first.strip()[-2000:]}")
            live.view.note(f"[yellow]while stopping: {first.strip()[-300:]}[/yellow]")
        return list(workers.done.values()), interrupted
    finally:
        workers.close()


def run_status(
    *, interrupted: bool, measured: int, ok: int, failures: int, max_error_rate: float
) -> str:
    """The stored status of a run: ``interrupted`` when stopped early; ``failed`` when no
    request succeeded, or when the share of failed requests (error or timeout, over those
    measured; cancelled ones are not measured) is above ``max_error_rate``; else ``completed``."""
    if interrupted:
        return "interrupted"
    if measured == 0 or ok == 0 or failures / measured > max_error_rate:
        return "failed"
    return "completed"


def run_level(
    cfg: BenchConfig,
    prep: Prepared,
    level: LoadLevel,
    store: Store,
    *,
    run_id: str,
    bench_id: str,
    view: ProgressView,
    transport: httpx.AsyncBaseTransport | None = None,
    max_error_rate: float = 1.0,
    stopper: StopSignals | None = None,
) -> LevelOutcome:
    """Measure one load level into one stored run (or spooled, when the store stays locked).

    The run row is always ended (``run_status``), whatever stops the level: the final flush of
    its rows and of the run row runs in a ``finally`` that signals cannot interrupt (see
    ``StopSignals``) and that spools what the store does not take.

    A ``--shard`` host (``cfg.shard``) measures its share of one run made by several hosts
    (``shards.ShardCoordinator``): it joins the run through the store before anything else
    (refused: nothing written), starts at the hosts' common start, and at the end records its
    share; the run row is merged over every host by the last to finish, never written whole by
    one host."""
    stopper = stopper or StopSignals()
    if transport is not None and not cfg.in_process:
        cfg = dataclasses.replace(cfg, in_process=True)  # an injected transport: this process
    choice = choose_workers(cfg, prep, level)  # once: the plans and the run record agree
    plans = worker_plans(cfg, prep, level, choice)
    run = _base_run(cfg, prep, level, run_id, bench_id, choice)
    counting: list[RunCollector] = []
    coord: ShardCoordinator | None = None
    if cfg.shard is not None:
        coord = ShardCoordinator(
            store,
            run,
            shard=cfg.shard[0],
            shards=cfg.shard[1],
            host=run_host(cfg),
            counts=lambda: (
                (counting[0].done, counting[0].ok, counting[0].errors) if counting else (0, 0, 0)
            ),
            say=view.note,
        )
        coord.join()  # refused → nothing was written
    writer = ingest.BufferedWriter(store, flush_interval_s=cfg.flush_interval_s, background=True)
    collector = RunCollector(run_id, writer, row_extra={"host": run_host(cfg)})
    counting.append(collector)
    live = _Live(collector, view)
    if coord is None:
        writer.add_run(run)
    start_at: StartAt | None = None
    if coord is not None:
        shard_coord = coord
        start_at = lambda: shard_coord.wait_start(lambda: stopper.requested)  # noqa: E731
    status = "failed"
    interrupted = False
    error: str | None = None
    summaries: list[DriverSummary] = []
    sampling: LiveCollection | None = None
    try:
        sampling = LiveCollection.start(
            metrics_urls=prep.metrics_urls,
            dcgm_urls=cfg.dcgm_urls if cfg.shard is None or cfg.shard[0] == 0 else (),
            gpu=cfg.gpu,
            interval_s=cfg.collect_interval_s,
            writer=writer,
        )
        view.level(
            run["name"],
            share_of(cfg.requests, *cfg.shard)
            if cfg.requests is not None and cfg.shard is not None
            else cfg.requests,
        )
        try:
            if stopper.requested:
                interrupted = True  # a signal came while the level was being set up
            elif cfg.in_process or transport is not None:
                summaries = _drive_in_process(plans[0], live, transport, stopper, start_at)
            else:
                summaries, interrupted = _drive_workers(plans, live, stopper, start_at)
        except KeyboardInterrupt:  # no StopSignals installed (another thread, a caller's own)
            interrupted = True
        interrupted = interrupted or stopper.requested or any(s.interrupted for s in summaries)
        status = run_status(
            interrupted=interrupted,
            measured=collector.done - collector.cancelled,
            ok=collector.ok,
            failures=collector.errors - collector.cancelled,
            max_error_rate=max_error_rate,
        )
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"[-2000:]
        raise
    finally:
        if sampling is not None:
            sources = sampling.stop()
            for note in sources.notes:
                view.note(f"[dim]{note}[/dim]")
            run["client_params"] = {**run["client_params"], "collectors": sources.to_json()}
        live.tick(force=True)
        started = min((s.started_at for s in summaries if s.started_at), default=None)
        if started is None:
            started = collector.first_sent or run["started_at"]
        ended = max(
            [s.ended_at for s in summaries if s.ended_at] + [collector.last_done or 0.0, started]
        )
        duration = ended - started if ended > started else None
        loop_lag = max(
            (s.loop_lag_p99_ms for s in summaries if s.loop_lag_p99_ms is not None), default=None
        )
        verdict = collector.verdict(
            open_loop=level.kind != "concurrency", duration_s=duration, loop_lag_p99_ms=loop_lag
        )
        cpu = sum(s.cpu_s for s in summaries)
        wall = max((s.wall_s for s in summaries), default=0.0)
        measured = collector.done - collector.cancelled
        failures = collector.errors - collector.cancelled
        final = {
            **run,
            "status": status,
            "started_at": started,
            "ended_at": ended,
            "duration_s": duration,
            "achieved_rate": verdict.achieved_rate,
            "client_bound": verdict.bound,
            "client_bound_reason": verdict.reason,
            "output_tokens_estimated": collector.estimated,
            "tool_summary": {
                "requests": collector.done,
                "ok": collector.ok,
                "errors": collector.errors,
                "cancelled": collector.cancelled,
                "error_rate": round(failures / measured, 6) if measured else None,
                "max_error_rate": max_error_rate,
                "output_tokens": collector.output_tokens,
                "token_gaps": collector.gap_rows,
                "scheduled_rate": verdict.scheduled_rate,
                "p99_lag_ms": verdict.p99_lag_ms,
                "p99_loop_lag_ms": loop_lag,
                "timestamps": sorted({s.timestamps for s in summaries if s.timestamps}),
                "timestamps_notes": sorted(
                    {s.timestamps_note for s in summaries if s.timestamps_note}
                ),
                "workers": len(plans),
                "client_cpu_s": round(cpu, 3),
                "client_cpu_per_worker": round(cpu / wall / len(plans), 3) if wall else None,
            },
        }
        merged: str | None = None
        if coord is None:
            writer.add_run(final)
            writer.close()
        else:
            writer.close()  # this host's rows are in the store before its share is recorded
            merged = _finish_shard(
                coord,
                final,
                shard_status="failed" if error else "interrupted" if interrupted else "completed",
                error=error,
                max_error_rate=max_error_rate,
                stopper=stopper,
                view=view,
            )
    if verdict.bound:
        view.note(f"[yellow]{run['name']}: client-bound — {verdict.reason}[/yellow]")
    batches_left, rows_left = writer.spooled()
    if rows_left:
        view.note(
            f"[yellow]{run['name']}: the store stayed locked: {rows_left} rows "
            f"({batches_left} batch(es)) spooled to {writer.spool_dir}[/yellow]"
        )
    return LevelOutcome(
        run_id=run_id,
        status=status,
        requests=collector.done,
        ok=collector.ok,
        failures=failures,
        rows_spooled=rows_left,
        batches_spooled=batches_left,
        spool_dir=writer.spool_dir,
        merged_status=merged,
    )


def _finish_shard(
    coord: ShardCoordinator,
    final: Mapping[str, Any],
    *,
    shard_status: str,
    error: str | None,
    max_error_rate: float,
    stopper: StopSignals,
    view: ProgressView,
) -> str | None:
    """Record this host's share of a sharded run and settle the run (a host stopped by a signal
    does not wait for the others); the merged run's status, when known."""
    try:
        settled = coord.finish(
            status=shard_status,
            fields=final,
            max_error_rate=max_error_rate,
            error=error,
            wait=shard_status != "interrupted",
            stopping=lambda: stopper.requested,
        )
    except StoreError as exc:
        view.note(f"[red]{coord.run_id}: could not record this host's share: {exc}[/red]")
        return None
    finally:
        coord.close()
    return settled.run_status


def run_bench(
    config: BenchConfig,
    store: Store,
    *,
    progress: bool = True,
    env: Mapping[str, str] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    max_error_rate: float = 1.0,
) -> BenchOutcome:
    """Run every load level of ``config`` against its endpoint; return how each run ended.

    Raises ``InputError``/``ConfigError`` for bad input (before any request), ``EndpointError``
    when the endpoint cannot be used at all, and ``BenchInterrupted`` (a KeyboardInterrupt
    carrying the outcome so far) after SIGINT or SIGTERM, handled alike (``StopSignals``): the
    current level stops and is saved as ``interrupted``, later levels do not start.
    ``max_error_rate`` (0..1): a run with a larger share of failed requests is stored as
    ``failed`` (one where no request succeeded always is). ``transport`` injects an httpx
    transport (measures in this process); ``env`` replaces ``os.environ`` for the API key.
    """
    if not 0.0 <= max_error_rate <= 1.0:
        raise InputError(f"max_error_rate {max_error_rate!r} is not a fraction between 0 and 1")
    cfg = config.validated()
    if cfg.shard is not None:
        run_shards.require_postgres(store)
    api_key = api_key_from_env(cfg.api_key_env, env)
    outcome = BenchOutcome(store_url=_store_hint(store))
    stopper = StopSignals()
    stopper.install()
    try:
        try:
            prep = prepare(cfg, store, api_key=api_key, transport=transport)
        except KeyboardInterrupt:  # nothing measured yet
            raise BenchInterrupted(
                [], signum=stopper.signum or signal.SIGINT, outcome=outcome
            ) from None
        stopper.raising = False  # from here on a signal stops a level, and never raises
        bench_id = uuid.uuid4().hex[:12]
        stamp = time.strftime("%Y%m%d-%H%M%S")
        with ProgressView(enabled=progress) as view:
            levels = cfg.levels()
            for i, level in enumerate(levels):
                if stopper.requested:
                    break
                # the random part first: DuckDB keeps min/max statistics of only the first
                # 8 bytes of a text column, so ids sharing a prefix ("ss-2026…") made every
                # per-run query scan every run's rows; distinct prefixes let it skip the others
                base = cfg.group or cfg.run_id or f"{bench_id[:8]}-{stamp}"
                outcome.levels.append(
                    run_level(
                        cfg,
                        prep,
                        level,
                        store,
                        run_id=f"{base}-{level.slug}",
                        bench_id=bench_id,
                        view=view,
                        transport=transport,
                        max_error_rate=max_error_rate,
                        stopper=stopper,
                    )
                )
                if outcome.levels[-1].status == "interrupted":
                    break
                if (
                    cfg.shard is not None
                    and outcome.levels[-1].merged_status == "interrupted"
                    and i + 1 < len(levels)
                ):
                    view.note(
                        f"[yellow]{outcome.levels[-1].run_id}: another host's share is missing "
                        "(see the run's notes); the next levels would wait for it: stopping"
                        "[/yellow]"
                    )
                    break
        if stopper.requested or (outcome.levels and outcome.levels[-1].status == "interrupted"):
            outcome.signum = stopper.signum or signal.SIGINT
            raise BenchInterrupted(outcome.run_ids, signum=outcome.signum, outcome=outcome)
        return outcome
    finally:
        stopper.restore()


def _store_hint(store: Store) -> str:
    """The store as a ``--db`` value that works from any folder (no password)."""
    return store.location if store.dialect == "duckdb" else store.url


def run_benchmark(
    config: BenchConfig,
    store: Store,
    *,
    progress: bool = True,
    env: Mapping[str, str] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> list[str]:
    """``run_bench`` returning only the stored run ids (the demo, benchmarks and tests)."""
    return run_bench(config, store, progress=progress, env=env, transport=transport).run_ids
