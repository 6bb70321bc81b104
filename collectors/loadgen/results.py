"""From emitted result batches to store rows, live statistics and the client-bound verdict.

Runs in the coordinating process (never in the measuring event loop): it turns each
``ResultBatch`` into ``requests`` and ``token_gaps`` rows for a ``RowSink`` (the store's
``BufferedWriter``), keeps what the progress bar and the run row need, and decides whether the
client kept up (DESIGN §5/§6, docs/timing.md). A run is client-bound when

- it sent at < 95% of the scheduled rate, or its P99 client lag (send − schedule) exceeded
  10 ms (1 ms for a trace replay): the server saw a different load than asked;
- its worker used ≥ 95% of a core: what it sent and when was limited by the client;
- with the kernel's receive stamps: more than 1% of the content events were read in one read
  with the previous event while the loop read the socket over 1 ms late at P99 — their gaps are
  stored as 0 ms, so ITL below the loop's delay is not resolved (a late loop alone no longer
  makes stamps late);
- with the event loop's stamps (https, ``--timestamps loop``): the loop woke over 10 ms late at
  P99 — every read instant is that late.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from analysis.metrics import percentile, request_tpot_ms
from collectors.loadgen.engine import ROW_FIELDS, ResultBatch
from collectors.loadgen.rx_stamps import DELAY_EDGES_MS, delay_percentile
from collectors.row_sink import RowSink

RATE_TOLERANCE = 0.95
MAX_P99_LAG_MS = 10.0
#: a trace replay promises its arrivals within 1 ms at P99 (issue 16), so it is judged by that
MAX_P99_TRACE_LAG_MS = 1.0
MAX_P99_LOOP_LAG_MS = 10.0  # the measuring event loop's own wake-up delay (loop stamps)
MAX_CPU_SHARE = 0.95  # of one core, by one worker
MAX_SAME_READ_SHARE = 0.01  # content events read together with the previous one ...
MIN_READ_DELAY_MS = 1.0  # ... while the loop read the socket this late at P99 (kernel stamps)

_I = {name: i for i, name in enumerate(ROW_FIELDS)}


@dataclass(frozen=True)
class ClientBound:
    bound: bool
    reason: str | None
    achieved_rate: float | None
    scheduled_rate: float | None
    p99_lag_ms: float | None


def client_bound(
    sent_at: Sequence[float],
    scheduled_at: Sequence[float],
    lag_ms: Sequence[float],
    *,
    open_loop: bool,
    duration_s: float | None = None,
    loop_lag_p99_ms: float | None = None,
    timestamps: str | None = None,
    read_delay_p99_ms: float | None = None,
    events: int = 0,
    same_read: int = 0,
    cpu_share: float | None = None,
    first_same_read: int = 0,
    max_p99_lag_ms: float = MAX_P99_LAG_MS,
) -> ClientBound:
    """Did the client keep up? See the module docstring for the rules; ``timestamps`` is the
    read instants' source ("kernel" | "loop"; None: not known, judged as "loop"),
    ``read_delay_p99_ms`` how late the loop read the socket after the kernel got the data,
    ``same_read`` of ``events`` content events came in one read with the previous one (in
    ``first_same_read`` requests, the first one with the second: TTFT late by up to the
    loop's delay), ``cpu_share`` the busiest worker's CPU over its wall time,
    ``max_p99_lag_ms`` the send lag allowed at P99 (``MAX_P99_TRACE_LAG_MS`` for a trace).

    ``achieved_rate`` is requests sent per second: over the span of the sends for an open loop
    (compared with the schedule's own span, so that the randomness of a Poisson sample does not
    count against the client), over ``duration_s`` for a closed loop.
    """
    reasons: list[str] = []
    n = len(sent_at)
    achieved: float | None = None
    scheduled: float | None = None
    if open_loop and n >= 2:
        span = max(sent_at) - min(sent_at)
        sched_span = max(scheduled_at) - min(scheduled_at)
        achieved = (n - 1) / span if span > 0 else None
        scheduled = (n - 1) / sched_span if sched_span > 0 else None
        if achieved is not None and scheduled is not None and achieved < RATE_TOLERANCE * scheduled:
            reasons.append(
                f"sent {achieved:.2f} req/s, below {RATE_TOLERANCE:.0%} of the scheduled "
                f"{scheduled:.2f} req/s"
            )
    elif n and duration_s:
        achieved = n / duration_s
    p99 = percentile(lag_ms, 99.0) if len(lag_ms) else None
    if p99 is not None and p99 > max_p99_lag_ms:
        reasons.append(
            f"P99 client lag {p99:.1f} ms > {max_p99_lag_ms:g} ms: requests were sent that "
            "late after their scheduled instants"
        )
    if cpu_share is not None and cpu_share >= MAX_CPU_SHARE:
        reasons.append(
            f"a worker process used {cpu_share:.0%} of a core (≥ {MAX_CPU_SHARE:.0%}): the "
            "client limited how much and when it sent (--workers N spreads the streams)"
        )
    if timestamps == "kernel":
        share = same_read / events if events else 0.0
        if (
            share > MAX_SAME_READ_SHARE
            and read_delay_p99_ms is not None
            and read_delay_p99_ms > MIN_READ_DELAY_MS
        ):
            firsts = (
                f", the first token of {first_same_read} request(s) with the second, so their "
                "TTFT is late by up to that delay"
                if first_same_read
                else ""
            )
            reasons.append(
                f"{share:.1%} of the content events were read together with the previous one "
                f"(the event loop read the socket up to {_ms(read_delay_p99_ms)} after the data "
                f"arrived, at P99){firsts}: those token gaps are stored as 0 ms and ITL "
                "shorter than the loop's delay is not resolved"
            )
    elif loop_lag_p99_ms is not None and loop_lag_p99_ms > MAX_P99_LOOP_LAG_MS:
        reasons.append(
            f"the client's event loop woke {loop_lag_p99_ms:.1f} ms late at P99 "
            f"(> {MAX_P99_LOOP_LAG_MS:g} ms) and its reads are stamped by the loop"
            f"{'' if timestamps else ' (source unknown)'}: TTFT and ITL run late by as much"
        )
    return ClientBound(bool(reasons), "; ".join(reasons) or None, achieved, scheduled, p99)


def _ms(edge: float) -> str:
    return f"{edge:g} ms" if edge != float("inf") else f"over {DELAY_EDGES_MS[-1]:g} ms"


class RunCollector:
    """Consumes the result batches of one run: rows to the sink, statistics kept."""

    def __init__(
        self,
        run_id: str,
        sink: RowSink,
        *,
        recent: int = 2000,
        row_extra: Mapping[str, Any] | None = None,
    ) -> None:
        self.run_id = run_id
        self.sink = sink
        #: columns every request row of this collector carries (e.g. ``host`` of a shard)
        self.row_extra = dict(row_extra or {})
        self.done = 0
        self.ok = 0
        self.errors = 0  # every request not ok: error, timeout or cancelled
        self.cancelled = 0  # cancelled by a stop (not a failure of the endpoint)
        self.output_tokens = 0
        self.estimated = False
        self.sent_at = array("d")
        self.scheduled_at = array("d")
        self.lag_ms = array("d")
        self.first_sent: float | None = None
        self.last_done: float | None = None
        self.recent_ttft: deque[float] = deque(maxlen=recent)
        self.gap_rows = 0
        # what the batches say about the client itself (see ``client_bound``)
        self.timestamps: set[str] = set()
        self.kinds: set[str] = set()
        self.events = 0
        self.same_read = 0
        self.first_same_read = 0
        self.read_delays = [0] * (len(DELAY_EDGES_MS) + 1)
        self.worker_cpu: dict[int, tuple[float, float]] = {}  # worker → (cpu s, wall s)

    def _client_stats(self, batch: ResultBatch) -> None:
        if batch.timestamps:
            self.timestamps.add(batch.timestamps)
        if batch.kind:
            self.kinds.add(batch.kind)
        self.events += batch.events
        self.same_read += batch.same_read
        self.first_same_read += batch.first_same_read
        if batch.read_delays:
            for i, c in enumerate(batch.read_delays[: len(self.read_delays)]):
                self.read_delays[i] += c
        if batch.wall_s > 0:
            self.worker_cpu[batch.worker] = (batch.cpu_s, batch.wall_s)

    @property
    def read_delay_p99_ms(self) -> float | None:
        """How late the loop read the socket after the kernel got the data, P99 (upper edge
        of its histogram bin; kernel stamps only)."""
        return delay_percentile(self.read_delays, 99.0)

    @property
    def cpu_share(self) -> float | None:
        """The busiest worker's CPU seconds over its wall seconds, so far."""
        shares = [cpu / wall for cpu, wall in self.worker_cpu.values() if wall >= 0.5]
        return max(shares) if shares else None

    def add(self, batch: ResultBatch) -> None:
        self._client_stats(batch)
        if not batch.rows:
            return
        run_id = self.run_id
        i_seq, i_status = _I["seq"], _I["status"]
        i_sent, i_sched, i_lag = _I["sent_at"], _I["scheduled_at"], _I["lag_ms"]
        i_ttft, i_e2e, i_out = _I["ttft_ms"], _I["e2e_ms"], _I["output_tokens"]
        i_done, i_est = _I["done_at"], _I["output_tokens_estimated"]
        requests: list[dict[str, Any]] = []
        gaps: list[dict[str, Any]] = []
        extra = self.row_extra
        for row, row_gaps in zip(batch.rows, batch.gaps, strict=True):
            rec = dict(zip(ROW_FIELDS, row, strict=True))
            rec["run_id"] = run_id
            if extra:
                rec.update(extra)
            ok = row[i_status] == "ok"
            rec["tpot_ms"] = request_tpot_ms(row[i_e2e], row[i_ttft], row[i_out]) if ok else None
            requests.append(rec)
            seq = row[i_seq]
            if row_gaps:
                gaps.extend(
                    {"run_id": run_id, "seq": seq, "idx": k, "gap_ms": g}
                    for k, g in enumerate(row_gaps)
                )
            self.done += 1
            sent = row[i_sent]
            if sent is not None:
                self.sent_at.append(sent)
                self.scheduled_at.append(row[i_sched])
                self.lag_ms.append(row[i_lag])
                if self.first_sent is None or sent < self.first_sent:
                    self.first_sent = sent
            done_at = row[i_done]
            if done_at is not None and (self.last_done is None or done_at > self.last_done):
                self.last_done = done_at
            if ok:
                self.ok += 1
                self.output_tokens += row[i_out] or 0
                self.estimated = self.estimated or bool(row[i_est])
                if row[i_ttft] is not None:
                    self.recent_ttft.append(row[i_ttft])
            else:
                self.errors += 1
                if row[i_status] == "cancelled":
                    self.cancelled += 1
        self.sink.add("requests", requests)
        if gaps:
            self.gap_rows += len(gaps)
            self.sink.add("token_gaps", gaps)

    def ttft_p50_p99(self) -> tuple[float | None, float | None]:
        if not self.recent_ttft:
            return None, None
        values = list(self.recent_ttft)
        return percentile(values, 50.0), percentile(values, 99.0)

    def verdict(
        self,
        *,
        open_loop: bool,
        duration_s: float | None,
        loop_lag_p99_ms: float | None = None,
    ) -> ClientBound:
        source = "loop" if "loop" in self.timestamps else "kernel" if self.timestamps else None
        return client_bound(
            self.sent_at,
            self.scheduled_at,
            self.lag_ms,
            open_loop=open_loop,
            duration_s=duration_s,
            loop_lag_p99_ms=loop_lag_p99_ms,
            timestamps=source,
            read_delay_p99_ms=self.read_delay_p99_ms,
            events=self.events,
            same_read=self.same_read,
            cpu_share=self.cpu_share,
            first_same_read=self.first_same_read,
            max_p99_lag_ms=MAX_P99_TRACE_LAG_MS if "trace" in self.kinds else MAX_P99_LAG_MS,
        )
