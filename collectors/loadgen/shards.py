"""One run from many hosts: this host's side of ``bench --shard I/N --group NAME``.

``ShardCoordinator`` drives one host's share of one load level through the shared PostgreSQL
store (``store.run_shards``; the arithmetic is ``analysis.shards``):

1. ``join``: measure this host's clock against the database's, register the shard (refused with
   nothing written for a finished group, a different N, a taken index or a start already
   fixed) and start heartbeating every ``HEARTBEAT_S`` from a thread.
2. ``wait_start`` (once this host's workers are warmed up): mark the shard ready; the host that
   makes the last shard ready fixes the start ``START_LEAD_S`` ahead on the database's clock;
   every host converts it to its own clock with its measured offset, so clock skew does not move
   it. Bounded by ``start_wait_s``; Ctrl-C or the bound leaves the run as if never joined.
3. ``finish``: record this host's share, then settle: under the run's row lock, hosts silent for
   ``STALE_S`` are marked failed and, once no shard is still running, the run row is merged over
   every shard. Each finished host waits up to ``finish_wait_s`` for the others (a host stopped
   by a signal does not wait), so whichever finishes last — or outlives a dead one — merges.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from analysis.shards import ClockOffset, clock_offset, clock_warning, iso
from errors import CollectorError, StoreError
from store import run_shards
from store.db import Store

log = logging.getLogger("servescope.shards")

HEARTBEAT_S: Final = 1.0
#: a shard whose last heartbeat is older than this (database clock) is taken as failed
STALE_S: Final = 5.0
#: the start is fixed this far ahead of the instant the last host became ready (every host
#: polls every POLL_S, so each sees it well before it comes)
START_LEAD_S: Final = 1.0
POLL_S: Final = 0.1
#: how long a host waits for the others to join and warm up (SERVESCOPE_SHARD_WAIT_S)
START_WAIT_S: Final = 600.0
#: how long a finished host waits for hosts still heartbeating before leaving the merge to them
FINISH_WAIT_S: Final = 120.0


def start_wait_s(env: Mapping[str, str] | None = None) -> float:
    """SERVESCOPE_SHARD_WAIT_S (seconds), else ``START_WAIT_S``."""
    text = (os.environ if env is None else env).get("SERVESCOPE_SHARD_WAIT_S", "").strip()
    if not text:
        return START_WAIT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise CollectorError(
            f"SERVESCOPE_SHARD_WAIT_S={text!r} is not a positive number of seconds",
            hint="e.g. SERVESCOPE_SHARD_WAIT_S=900, or unset it for 600",
        )
    return value


Counts = Callable[[], tuple[int, int, int]]


class ShardCoordinator:
    """This host's share of one sharded run (see the module's docstring)."""

    def __init__(
        self,
        store: Store,
        run: Mapping[str, Any],
        *,
        shard: int,
        shards: int,
        host: str,
        counts: Counts,
        say: Callable[[str], None] = lambda text: None,
        start_wait: float | None = None,
        finish_wait_s: float = FINISH_WAIT_S,
        stale_s: float = STALE_S,
    ) -> None:
        self.store = store
        self.run = dict(run)
        self.run_id = str(run["run_id"])
        self.shard = shard
        self.shards = shards
        self.host = host
        self.counts = counts
        self.say = say
        self.start_wait = start_wait_s() if start_wait is None else start_wait
        self.finish_wait_s = finish_wait_s
        self.stale_s = stale_s
        self.clock: ClockOffset | None = None
        self.start_db: float | None = None
        self.lost = False  # another host found this one silent and marked it failed
        self.left = False  # left the run before its start (stopped, or the others never came)
        self._status: str | None = None  # the status the next heartbeat sets
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def label(self) -> str:
        return f"{self.host} (shard {self.shard + 1}/{self.shards})"

    # --- join and start ---------------------------------------------------------------------

    def join(self) -> None:
        self.clock = clock_offset(run_shards.clock_samples(self.store))
        try:
            run_shards.join(
                self.store,
                self.run,
                shard=self.shard,
                shards=self.shards,
                host=self.host,
                clock_offset_ms=round(self.clock.offset_ms, 3),
                clock_rtt_ms=round(self.clock.rtt_ms, 3),
                stale_s=self.stale_s,
            )
        except CollectorError:
            # too late: the run started without this host. When every host of it has gone
            # silent (all died), nobody is left to end it: end it here (interrupted).
            settled = run_shards.settle(self.store, self.run_id, stale_s=self.stale_s)
            if settled.state == "merged":
                self.say(
                    f"[yellow]{self.run_id}: every host of it had stopped heartbeating: ended "
                    f"it as {settled.run_status}[/yellow]"
                )
            raise
        warning = clock_warning(self.host, self.clock.offset_ms)
        self.say(
            f"{self.run_id}: joined as {self.label}; clock offset to the store "
            f"{self.clock.offset_ms:+.1f} ms ± {self.clock.rtt_ms / 2:.1f} ms"
        )
        if warning:
            self.say(f"[yellow]{warning}[/yellow]")
        self._thread = threading.Thread(target=self._beat, name="servescope-heartbeat", daemon=True)
        self._thread.start()

    def wait_start(self, stopping: Callable[[], bool] = lambda: False) -> float | None:
        """Block until the agreed start; return it on this host's clock (epoch s), or None when
        ``stopping()`` turned true first (the shard then leaves the run). Raises CollectorError
        when the others are not all ready within the bound (also leaving)."""
        assert self.clock is not None, "join first"
        fixed = run_shards.ready(self.store, self.run_id, self.shard, lead_s=START_LEAD_S)
        deadline = time.monotonic() + self.start_wait
        told: tuple[str, ...] = ()
        while fixed is None:
            if stopping():
                self._leave()
                return None
            state = run_shards.start_state(self.store, self.run_id, self.shard)
            fixed = state.start_at
            if fixed is not None:
                break
            if state.waiting_for != told:
                told = state.waiting_for
                self.say(f"{self.run_id}: waiting for {', '.join(told)}")
            if time.monotonic() > deadline:
                self._leave()
                raise CollectorError(
                    f"run {self.run_id}: not every host was ready within "
                    f"{self.start_wait:g} s (waiting for {', '.join(told) or 'the start'})",
                    hint="start `bench --shard I/N --group NAME` on every host, with the same "
                    "N and group; SERVESCOPE_SHARD_WAIT_S sets how long to wait",
                )
            time.sleep(POLL_S)
        self.start_db = fixed
        self._status = "running"
        local = self.clock.to_local(fixed)
        self.say(f"{self.run_id}: every host ready; starting at {iso(fixed)} (store's clock)")
        return local

    def _leave(self) -> None:
        self.left = True
        self._stop_beat()
        try:
            run_shards.leave(self.store, self.run_id, self.shard)
        except StoreError as exc:
            log.warning("could not leave run %s: %s", self.run_id, exc)

    # --- heartbeat --------------------------------------------------------------------------

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            requests, ok, errors = self.counts()
            try:
                alive = run_shards.heartbeat(
                    self.store,
                    self.run_id,
                    self.shard,
                    requests=requests,
                    ok=ok,
                    errors=errors,
                    status=self._status,
                )
            except StoreError as exc:  # the next beat retries; others mark us if it lasts
                log.warning("heartbeat of %s failed: %s", self.label, exc)
                continue
            if not alive and not self.lost and not self._stop.is_set():
                self.lost = True
                self.say(
                    f"[yellow]{self.run_id}: another host marked {self.label} failed (no "
                    "heartbeat): its rows are still written[/yellow]"
                )

    def _stop_beat(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def close(self) -> None:
        self._stop_beat()

    # --- finish -----------------------------------------------------------------------------

    def finish(
        self,
        *,
        status: str,
        fields: Mapping[str, Any],
        max_error_rate: float,
        error: str | None = None,
        wait: bool = True,
        stopping: Callable[[], bool] = lambda: False,
    ) -> run_shards.Settled:
        """Record this host's share (``status``: completed | interrupted | failed; ``fields``:
        the run fields it measured) and settle the run (see the module's docstring). A shard
        that left before the start has nothing to record (``Settled("left")``)."""
        if self.left:
            self._stop_beat()
            return run_shards.Settled("left")
        summary = dict(fields.get("tool_summary") or {})
        summary.update(
            status=fields.get("status"),
            achieved_rate=fields.get("achieved_rate"),
            output_tokens_estimated=fields.get("output_tokens_estimated"),
            duration_s=fields.get("duration_s"),
        )
        try:
            run_shards.finish(
                self.store,
                self.run_id,
                self.shard,
                status=status,
                started_at=fields.get("started_at"),
                ended_at=fields.get("ended_at"),
                requests=int(summary.get("requests") or 0),
                ok=int(summary.get("ok") or 0),
                errors=int(summary.get("errors") or 0),
                client_bound=fields.get("client_bound"),
                reason=fields.get("client_bound_reason"),
                summary=summary,
                error=error,
            )
        finally:
            self._stop_beat()
        deadline = time.monotonic() + (self.finish_wait_s if wait else 0.0)
        told: tuple[str, ...] = ()
        while True:
            settled = run_shards.settle(
                self.store, self.run_id, stale_s=self.stale_s, max_error_rate=max_error_rate
            )
            for name in settled.marked_failed:
                self.say(f"[yellow]{self.run_id}: {name} sent no heartbeat: marked failed[/yellow]")
            if settled.state != "waiting" or time.monotonic() >= deadline or stopping():
                break
            if settled.waiting_for != told:
                told = settled.waiting_for
                self.say(f"{self.run_id}: waiting for {', '.join(told)} to finish")
            time.sleep(0.5)
        if settled.state == "merged":
            self.say(f"{self.run_id}: merged over {self.shards} hosts: {settled.run_status}")
        elif settled.state == "waiting":
            self.say(
                f"{self.run_id}: left the merge to the hosts still running "
                f"({', '.join(settled.waiting_for)})"
            )
        return settled
