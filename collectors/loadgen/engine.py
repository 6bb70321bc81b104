"""The measuring loop of one load level in one process: schedule, send, time, emit rows.

Runs inside a worker process (``worker.py``) or in the caller's process. It never touches the
store: finished requests are emitted as compact ``ResultBatch``es (plain tuples and arrays) to a
sink, every ``batch_interval_s``, so the event loop only does I/O and timing.

Load shapes: closed loop (N streams, each sending its next request when the previous one
ends), open loop (arrivals from ``arrivals.offsets``) or a trace's own arrivals (``kind
"trace"``: ``WorkerPlan.trace``). The global plan (request specs and arrival times alike) is
shared out in two steps: shard s of S (``bench --shard s/S``, one per host) takes the requests
j ≡ s (mod S); worker w of that host's W takes the shard's k-th request when k ≡ w (mod W). So
the hosts and their processes together produce exactly the single-process load, and a host may
run any number of workers.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from collectors.loadgen import arrivals
from collectors.loadgen.client import build_body
from collectors.loadgen.prompts import Calibration
from collectors.loadgen.sse import StreamAccumulator
from collectors.loadgen.traces import Trace
from collectors.loadgen.transport import SendTiming
from collectors.loadgen.workloads import Conversation, DatasetItem, RequestFactory, Workload

ROW_FIELDS: tuple[str, ...] = (
    "seq",
    "scheduled_at",
    "sent_at",
    "first_token_at",
    "done_at",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "ttft_ms",
    "e2e_ms",
    "lag_ms",
    "status",
    "http_status",
    "error",
    "finish_reason",
    "conversation_id",
    "turn",
    "output_tokens_estimated",
    "chunks",
)


#: open loop: the last this many seconds before a request is due are waited loop turn by loop
#: turn instead of on a timer (see ``Driver._until``) ...
SPIN_S = 0.0015
#: ... when this worker's mean rate is at most this (req/s), so that turning costs at most a
#: tenth of its time; denser arrivals are waited on the timer alone
SPIN_MAX_RATE = 0.1 / SPIN_S


class Endpoint(Protocol):
    """What the engine needs from an inference endpoint (implemented by ``HttpxEndpoint``)."""

    async def stream(
        self, body: bytes, acc: StreamAccumulator, timing: SendTiming
    ) -> tuple[int, str | None]: ...

    async def prewarm(self, connections: int) -> int: ...

    async def aclose(self) -> None: ...

    def redact(self, text: str) -> str:
        """``text`` without the endpoint's credentials (every error text passes through)."""
        ...


class Clock:
    """perf_counter for intervals, mapped to Unix-epoch seconds for storage."""

    def __init__(self, perf: Callable[[], float] = time.perf_counter) -> None:
        self.perf = perf
        # the offset, taken as the tightest of a few samples
        best: tuple[float, float] | None = None
        for _ in range(5):
            a = perf()
            wall = time.time()
            b = perf()
            if best is None or b - a < best[0]:
                best = (b - a, wall - (a + b) / 2)
        assert best is not None
        self.offset = best[1]

    def epoch(self, t: float) -> float:
        return t + self.offset


def share_of(total: int, index: int, count: int) -> int:
    """How many of ``total`` requests j (0 ≤ j < total) have j ≡ ``index`` (mod ``count``):
    one shard's share of a run, or one worker's of its shard's."""
    return max(0, (total - index + count - 1) // count)


@dataclass(frozen=True)
class WorkerPlan:
    """Everything one worker needs for one load level (picklable)."""

    endpoint: str
    api: str
    model: str
    kind: str  # "concurrency" | "rate" | "trace"
    value: float  # streams of this worker, or the *global* rate (the trace's mean rate)
    arrival: str = "poisson"
    burstiness: float = 1.0
    worker: int = 0
    workers: int = 1
    requests: int | None = None  # global count
    duration_s: float | None = None
    warmup: int = 0  # this worker's warm-up requests (not recorded)
    workload: Workload | None = None
    dataset: tuple[DatasetItem, ...] | None = None
    calibration: Calibration = field(default_factory=Calibration)
    max_tokens: int | None = None
    ignore_eos: bool = False
    seed: int = 0
    timeout_s: float = 600.0
    api_key: str | None = field(default=None, repr=False)
    transport: str = "lean"  # lean | httpx
    timestamps: str = "auto"  # auto | kernel | loop (config.TIMESTAMPS)
    batch_interval_s: float = 0.25
    prewarm: bool = True
    #: this host's share of a multi-host run (``bench --shard shard/shards``; 0/1 = alone)
    shard: int = 0
    shards: int = 1
    #: kind "trace": the arrivals and lengths to replay (scaled and windowed already)
    trace: Trace | None = None

    def owns(self, index: int) -> bool:
        """Is request ``index`` of the global plan this worker's (shard first, then worker)?"""
        return index % self.shards == self.shard and (index // self.shards) % self.workers == (
            self.worker
        )

    def global_index(self, local: int) -> int:
        """The global index of this worker's ``local``-th request (closed loop, seq)."""
        return (local * self.workers + self.worker) * self.shards + self.shard

    def my_count(self) -> int | None:
        if self.requests is None:
            return None
        mine = share_of(self.requests, self.shard, self.shards)  # this shard's share
        return share_of(mine, self.worker, self.workers)


@dataclass
class ResultBatch:
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    gaps: list[array[float]] = field(default_factory=list)
    #: what the client-bound verdict needs besides the rows (``results.RunCollector``):
    #: the worker, its load kind (``WorkerPlan.kind``), its read-instant source ("kernel" |
    #: "loop" | None before any read) ...
    worker: int = 0
    kind: str = ""
    timestamps: str | None = None
    #: ... content events of the rows, and how many of them came in one read with the
    #: previous one (a 0 ms gap: the loop read later than the gap between them) ...
    events: int = 0
    same_read: int = 0
    #: rows whose first content event came in one read with the second (their TTFT is late
    #: by up to the loop's delay)
    first_same_read: int = 0
    #: ... how late the loop read the socket after the kernel got the data since the last
    #: batch (``rx_stamps.DELAY_EDGES_MS`` histogram; kernel stamps only) ...
    read_delays: list[int] | None = None
    #: ... and the worker's CPU and wall seconds since its run started
    cpu_s: float = 0.0
    wall_s: float = 0.0


@dataclass
class DriverSummary:
    started_at: float = 0.0  # epoch
    ended_at: float = 0.0
    sent: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    interrupted: bool = False
    warmup_done: int = 0
    # how late the event loop woke for a 5 ms probe timer: when it is late, every timestamp
    # taken on this loop is late too (the client, not the server, is slow)
    loop_lag_p50_ms: float | None = None
    loop_lag_p99_ms: float | None = None
    #: where this worker's read instants came from: "kernel" (the socket's receive stamps) or
    #: "loop" (the event loop's read), and why, when not the kernel
    timestamps: str | None = None
    timestamps_note: str | None = None


class Driver:
    """Runs one worker's share of a load level against an ``Endpoint``."""

    def __init__(
        self,
        plan: WorkerPlan,
        endpoint: Endpoint,
        emit: Callable[[ResultBatch], None],
        *,
        clock: Clock | None = None,
    ) -> None:
        self.plan = plan
        self.endpoint = endpoint
        self.emit = emit
        self.clock = clock or Clock()
        self.factory = RequestFactory(
            workload=plan.workload,
            dataset=plan.dataset,
            calibration=plan.calibration,
            seed=plan.seed,
            max_tokens=plan.max_tokens,
            trace=plan.trace,
        )
        self._batch = ResultBatch()
        self._local_seq = 0
        self._issued = 0
        self._quota = plan.my_count()
        self._deadline: float | None = None
        self._stopping = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._scheduler: asyncio.Task[Any] | None = None
        self._collect_text = bool(plan.workload and plan.workload.multi_turn)
        self.summary = DriverSummary()
        self._start = 0.0
        self._cpu0 = 0.0

    # --- control ------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop issuing requests and cancel those in flight (they become 'cancelled' rows)."""
        self._stopping = True
        self.summary.interrupted = True
        for task in list(self._tasks):
            task.cancel()
        if self._scheduler is not None and not self._scheduler.done():
            self._scheduler.cancel()

    def _may_issue(self) -> bool:
        if self._stopping:
            return False
        if self._quota is not None and self._issued >= self._quota:
            return False
        return not (self._deadline is not None and self.clock.perf() >= self._deadline)

    # --- the run ------------------------------------------------------------------------

    async def warmup(self) -> int:
        """Send this worker's warm-up requests (not recorded); open the connections."""
        plan = self.plan
        streams = (
            int(plan.value) if plan.kind == "concurrency" else min(256, max(1, int(plan.value)))
        )
        if plan.prewarm:
            await self.endpoint.prewarm(streams)
        if plan.warmup <= 0:
            return 0
        factory = RequestFactory(
            workload=plan.workload,
            dataset=plan.dataset,
            calibration=plan.calibration,
            seed=plan.seed + 7_919,
            max_tokens=plan.max_tokens,
            trace=plan.trace,
        )
        todo = iter(range(plan.warmup))
        done = 0

        async def loop() -> None:
            nonlocal done
            for i in todo:
                conv = factory.conversation(i * plan.workers + plan.worker)
                turn = conv.turns[0]
                body, _ = build_body(
                    plan.api, plan.model, turn, prefix=conv.prefix, ignore_eos=plan.ignore_eos
                )
                try:
                    async with asyncio.timeout(plan.timeout_s):
                        await self.endpoint.stream(body, StreamAccumulator(), SendTiming())
                except (httpx.HTTPError, TimeoutError, OSError):
                    pass
                done += 1

        await asyncio.gather(*(loop() for _ in range(max(1, min(streams, plan.warmup)))))
        self.summary.warmup_done = done
        return done

    async def run(self, start_perf: float | None = None) -> DriverSummary:
        plan = self.plan
        loop = asyncio.get_running_loop()
        if start_perf is not None:
            await self._until(start_perf, True)  # on the instant: the first arrivals are due now
        # the schedule's origin is the agreed instant, not when this worker's sleep ended: the
        # workers (and the hosts of a --shard run) share one schedule; a late worker's sends show
        # as lag behind it
        start = start_perf if start_perf is not None else self.clock.perf()
        cpu0 = time.process_time()
        self._start, self._cpu0 = start, cpu0
        self.summary.started_at = self.clock.epoch(start)
        if plan.duration_s is not None:
            self._deadline = start + plan.duration_s
        flusher = loop.create_task(self._flush_every(plan.batch_interval_s))
        lags = array("d")
        prober = loop.create_task(self._probe_loop(lags))
        try:
            if plan.kind == "concurrency":
                await self._closed(start, int(plan.value))
            else:
                await self._open(start)
        finally:
            flusher.cancel()
            prober.cancel()
            self._flush()
        if lags:
            ordered = sorted(lags)
            self.summary.loop_lag_p50_ms = ordered[len(ordered) // 2]
            self.summary.loop_lag_p99_ms = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        end = self.clock.perf()
        self.summary.ended_at = self.clock.epoch(end)
        self.summary.wall_s = end - start
        self.summary.cpu_s = time.process_time() - cpu0
        self.summary.sent = self._issued
        self.summary.timestamps, self.summary.timestamps_note = self._timestamp_source()
        return self.summary

    def _timestamp_source(self) -> tuple[str | None, str | None]:
        source = getattr(self.endpoint, "timestamp_source", None)
        return source() if callable(source) else (None, None)

    async def _closed(self, start: float, streams: int) -> None:
        conv_ids = self._my_conversations()
        loop = asyncio.get_running_loop()

        async def stream_loop() -> None:
            # closed loop: a request is due when its stream is free; the first one when the
            # stream starts (the loop starts every stream at once, and only then can send)
            scheduled = self.clock.perf()
            ready: list[tuple[Conversation, bytes]] = []

            def prepare() -> None:
                conv = self.factory.conversation(next(conv_ids))
                ready.append((conv, self._first_body(conv)))

            prepare()
            while self._may_issue():
                if not ready:  # its preparation failed (the error is raised here)
                    prepare()
                conv, body = ready.pop()
                # The next request is prepared while this one waits for its first token, not
                # when it ends: in a closed loop of equal lengths every stream ends in the same
                # few ms, and building all their requests then would hold the loop there.
                # (call_soon runs it once this stream's request has been written.)
                loop.call_soon(prepare)
                scheduled = await self._conversation(conv, scheduled, body)

        await self._guard(*(stream_loop() for _ in range(max(1, streams))))

    def _first_body(self, conv: Conversation) -> bytes:
        plan = self.plan
        body, _ = build_body(
            plan.api, plan.model, conv.turns[0], prefix=conv.prefix, ignore_eos=plan.ignore_eos
        )
        return body

    async def _open(self, start: float) -> None:
        plan = self.plan
        offsets: Iterable[float]
        if plan.kind == "trace":
            assert plan.trace is not None, "a trace level needs WorkerPlan.trace"
            offsets = plan.trace.offsets
        else:
            offsets = arrivals.offsets(plan.arrival, plan.value, plan.burstiness, seed=plan.seed)
        owns = plan.owns
        self._scheduler = asyncio.current_task()
        index = 0
        spin = plan.value / (plan.workers * plan.shards) <= SPIN_MAX_RATE
        pending: list[asyncio.Task[None]] = []
        for offset in offsets:
            mine = owns(index)
            index += 1
            if not mine:
                continue
            t = start + offset
            if self._deadline is not None and t >= self._deadline:
                break
            if not self._may_issue():
                break
            # ready before it is due: the request is built while waiting, not after
            conv = self.factory.conversation(index - 1)
            body = self._first_body(conv)
            try:
                await self._until(t, spin)
            except asyncio.CancelledError:
                if not self._stopping:
                    raise
                current = asyncio.current_task()
                if current is not None:
                    current.uncancel()
                break
            if not self._may_issue():
                break
            task = asyncio.get_running_loop().create_task(self._conversation_task(conv, t, body))
            pending.append(task)
            if len(pending) > 4096:
                pending = [p for p in pending if not p.done()]
        self._scheduler = None
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    async def _until(self, t: float, spin: bool) -> None:
        """Return at perf instant ``t``. The loop's timers wake up to 1 ms late (epoll waits
        whole milliseconds, rounded up), so with ``spin`` the last ``SPIN_S`` are waited turn
        by turn (``sleep(0)``: reads are still served in between)."""
        perf = self.clock.perf
        delay = t - perf() - (SPIN_S if spin else 0.0)
        if delay > 0:
            await asyncio.sleep(delay)
        if spin:
            while perf() < t:
                await asyncio.sleep(0)

    async def _conversation_task(
        self, conv: Conversation, scheduled: float, first_body: bytes | None = None
    ) -> None:
        await self._conversation(conv, scheduled, first_body)

    async def _guard(self, *coros: Any) -> None:
        results = await asyncio.gather(*coros, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError):
                raise r

    def _my_conversations(self) -> Iterator[int]:
        local = 0
        while True:
            yield self.plan.global_index(local)
            local += 1

    async def _conversation(
        self, conv: Conversation, scheduled: float, first_body: bytes | None = None
    ) -> float:
        """Send the conversation's turns in order; returns when the slot became free again.
        ``first_body``: the first turn's body, built ahead (``_first_body``)."""
        plan = self.plan
        history: list[dict[str, str]] = []
        carry = bool(plan.workload and plan.workload.multi_turn and plan.workload.history == "full")
        conv_id = f"{plan.worker}-{conv.index}" if len(conv.turns) > 1 else None
        for turn_no, turn in enumerate(conv.turns):
            if not self._may_issue():
                break
            self._issued += 1
            if turn_no == 0 and first_body is not None:
                body = first_body
            else:
                body, _ = build_body(
                    plan.api,
                    plan.model,
                    turn,
                    history=history,
                    prefix=conv.prefix,
                    ignore_eos=plan.ignore_eos,
                )
            seq = plan.global_index(self._local_seq)
            self._local_seq += 1
            task = asyncio.current_task()
            assert task is not None
            self._tasks.add(task)
            try:
                acc = await self._request(
                    seq, body, scheduled, conv_id, turn_no if conv_id else None
                )
            finally:
                self._tasks.discard(task)
            scheduled = self.clock.perf()
            if acc is None:
                break
            if carry:
                history.append({"role": "user", "content": turn.text})
                history.append({"role": "assistant", "content": acc.text()})
        return self.clock.perf()

    async def _request(
        self, seq: int, body: bytes, scheduled: float, conv_id: str | None, turn: int | None
    ) -> StreamAccumulator | None:
        """One request → one row. Returns the accumulator when it succeeded, else None."""
        plan = self.plan
        perf = self.clock.perf
        acc = StreamAccumulator(collect_text=self._collect_text)
        timing = SendTiming()
        status = "ok"
        http_status: int | None = None
        error: str | None = None
        cancelled = False
        try:
            async with asyncio.timeout(plan.timeout_s):
                http_status, error = await self.endpoint.stream(body, acc, timing)
            if error is None:
                # status rules (docs/metrics.md, "Request status"): an error event, malformed
                # events, no content and no usage, or a cut stream make a 2xx response an error
                error = acc.problem()
            if error is not None:
                status = "error"
            else:
                error = acc.note()  # e.g. completed without data: [DONE]: ok, but noted
        except TimeoutError:
            status, error = "timeout", f"no complete response within {plan.timeout_s:g} s"
        except asyncio.CancelledError:
            status, error = "cancelled", "cancelled: the run was stopped"
            cancelled = True
        except httpx.TimeoutException as exc:
            status, error = "timeout", f"{type(exc).__name__}: {exc}"
        except httpx.HTTPError as exc:
            status, error = "error", f"{type(exc).__name__}: {exc}"
        except OSError as exc:
            status, error = "error", f"{type(exc).__name__}: {exc}"
        if error is not None:
            error = self.endpoint.redact(error)
        end = perf()
        if http_status is None:
            http_status = timing.status
        self._record(seq, scheduled, timing, acc, status, http_status, error, conv_id, turn, end)
        if cancelled:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise asyncio.CancelledError
        return acc if status == "ok" else None

    def _record(
        self,
        seq: int,
        scheduled: float,
        timing: SendTiming,
        acc: StreamAccumulator,
        status: str,
        http_status: int | None,
        error: str | None,
        conv_id: str | None,
        turn: int | None,
        end: float,
    ) -> None:
        ep = self.clock.offset
        sent = timing.sent
        first = acc.first_t
        done = acc.last_byte_t if status == "ok" and acc.last_byte_t is not None else end
        prompt_tokens, completion_tokens, cached = acc.usage()
        estimated = completion_tokens is None
        output_tokens = completion_tokens if completion_tokens is not None else acc.chunks
        ttft_ms = (first - sent) * 1000.0 if first is not None and sent is not None else None
        e2e_ms = (done - sent) * 1000.0 if sent is not None else None
        self._batch.rows.append(
            (
                seq,
                scheduled + ep,
                sent + ep if sent is not None else None,
                first + ep if first is not None else None,
                done + ep,
                prompt_tokens,
                output_tokens,
                cached,
                ttft_ms,
                e2e_ms,
                (sent - scheduled) * 1000.0 if sent is not None else None,
                status,
                http_status,
                error,
                acc.finish_reason(),
                conv_id,
                turn,
                estimated,
                acc.chunks,
            )
        )
        gaps = acc.gaps_ms
        batch = self._batch
        batch.gaps.append(gaps)
        batch.events += acc.chunks
        if gaps:
            batch.same_read += gaps.count(0.0)
            if gaps[0] == 0.0:
                batch.first_same_read += 1

    # --- emitting -----------------------------------------------------------------------

    def _flush(self) -> None:
        batch = self._batch
        take = getattr(self.endpoint, "take_read_delays", None)
        delays = take() if callable(take) else None
        if delays is not None and any(delays):
            batch.read_delays = delays
        if batch.rows or batch.read_delays:
            batch.worker = self.plan.worker
            batch.kind = self.plan.kind
            batch.timestamps = self._timestamp_source()[0]
            if self._start:
                batch.cpu_s = time.process_time() - self._cpu0
                batch.wall_s = self.clock.perf() - self._start
            self._batch = ResultBatch()
            self.emit(batch)

    async def _probe_loop(self, lags: array[float], interval: float = 0.005) -> None:
        """Record how late the loop wakes for a timer (ms), every ``interval`` seconds."""
        perf = self.clock.perf
        while True:
            due = perf() + interval
            await asyncio.sleep(interval)
            lags.append(max(0.0, (perf() - due) * 1000.0))

    async def _flush_every(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            self._flush()


def rows_as_dicts(batch: ResultBatch) -> list[Mapping[str, Any]]:
    """The batch's rows as dicts keyed by ``ROW_FIELDS`` (tests, debugging)."""
    return [dict(zip(ROW_FIELDS, row, strict=True)) for row in batch.rows]
