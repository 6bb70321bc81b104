"""Receive-stamp helpers and the client-bound rules that depend on the stamps' source."""

from __future__ import annotations

import socket
import sys

from collectors.loadgen.engine import ResultBatch
from collectors.loadgen.results import RunCollector, client_bound
from collectors.loadgen.rx_stamps import (
    DELAY_EDGES_MS,
    SCM_TIMESTAMPNS,
    ReadDelays,
    RealtimeMap,
    delay_percentile,
    stamp_of,
)


class _Sink:
    def __init__(self) -> None:
        self.tables: dict[str, int] = {}

    def add(self, table: str, rows: list[dict[str, object]]) -> None:
        self.tables[table] = self.tables.get(table, 0) + len(rows)


def test_stamp_of_reads_the_timespec_and_ignores_other_messages() -> None:
    spec = (1_700_000_000).to_bytes(8, sys.byteorder, signed=True) + (250_000_000).to_bytes(
        8, sys.byteorder, signed=True
    )
    other = (socket.SOL_SOCKET, SCM_TIMESTAMPNS + 1, b"\0" * 16)
    assert stamp_of([other, (socket.SOL_SOCKET, SCM_TIMESTAMPNS, spec)]) == 1_700_000_000.25
    assert stamp_of([other]) is None
    assert stamp_of([]) is None


def test_a_clock_step_is_counted_and_noted() -> None:
    now = {"perf": 100.0, "wall": 1_000.0}
    clock = RealtimeMap(lambda: now["perf"], lambda: now["wall"])
    assert clock.offset == 900.0
    now["perf"] += 0.5
    now["wall"] += 0.5
    clock.maybe_refresh(now["perf"])  # under a second since the last check: not measured
    assert clock.checked == 100.0
    now["perf"] += 1.0
    now["wall"] += 1.0 + 0.0000_02  # a slew of 2 µs: not a step
    clock.maybe_refresh(now["perf"])
    assert clock.steps == 0 and clock.note() is None
    now["perf"] += 1.0
    now["wall"] += 1.0 - 0.25  # stepped back 250 ms
    clock.maybe_refresh(now["perf"])
    assert clock.steps == 1
    assert clock.offset == 900.0 + 0.000_002 - 0.25
    note = clock.note()
    assert note is not None and "250.0 ms" in note


def test_read_delay_histogram_percentiles() -> None:
    delays = ReadDelays()
    for _ in range(98):
        delays.add(0.00008)  # 0.08 ms
    delays.add(0.015)
    delays.add(3.0)  # beyond the last edge
    counts = delays.take()
    assert sum(counts) == 100 and sum(delays.counts) == 0
    assert delay_percentile(counts, 50) == 0.1
    assert delay_percentile(counts, 99) == 20.0
    assert delay_percentile(counts, 100) == float("inf")
    assert delay_percentile([0] * (len(DELAY_EDGES_MS) + 1), 99) is None


SCHED = [float(i) for i in range(101)]


def test_with_kernel_stamps_a_late_loop_alone_is_not_client_bound() -> None:
    ok = client_bound(
        SCHED, SCHED, [0.5] * 101, open_loop=True, loop_lag_p99_ms=40.0, timestamps="kernel"
    )
    assert not ok.bound
    loop = client_bound(
        SCHED, SCHED, [0.5] * 101, open_loop=True, loop_lag_p99_ms=40.0, timestamps="loop"
    )
    assert loop.bound and loop.reason is not None and "stamped by the loop" in loop.reason


def test_with_kernel_stamps_coalesced_reads_with_a_late_loop_are_client_bound() -> None:
    def judge(same_read: int, delay_ms: float) -> tuple[bool, str | None]:
        v = client_bound(
            SCHED,
            SCHED,
            [0.5] * 101,
            open_loop=True,
            timestamps="kernel",
            events=1000,
            same_read=same_read,
            read_delay_p99_ms=delay_ms,
        )
        return v.bound, v.reason

    bound, reason = judge(60, 20.0)
    assert bound and reason is not None
    assert "6.0% of the content events" in reason and "20 ms" in reason
    # the server's own bursts, read promptly: not the client's doing
    assert judge(600, 0.5) == (False, None)


def test_a_saturated_worker_is_client_bound() -> None:
    busy = client_bound(SCHED, SCHED, [0.5] * 101, open_loop=True, cpu_share=0.97)
    assert busy.bound and busy.reason is not None and "97% of a core" in busy.reason


def test_run_collector_judges_from_its_batches() -> None:
    collector = RunCollector("r", _Sink())  # type: ignore[arg-type]
    delays = [0] * (len(DELAY_EDGES_MS) + 1)
    delays[DELAY_EDGES_MS.index(20.0)] = 100
    collector.add(
        ResultBatch(
            timestamps="kernel",
            events=1000,
            same_read=50,
            first_same_read=3,
            read_delays=delays,
            cpu_s=1,
            wall_s=4,
        )
    )
    assert collector.read_delay_p99_ms == 20.0
    assert collector.cpu_share == 0.25
    verdict = collector.verdict(open_loop=False, duration_s=4.0, loop_lag_p99_ms=30.0)
    assert verdict.bound and verdict.reason is not None
    assert "5.0% of the content events" in verdict.reason
    assert "first token of 3 request(s)" in verdict.reason
    assert "event loop woke" not in verdict.reason  # kernel stamps: the loop's lag is no reason
