"""One run from many hosts (``bench --shard I/N``): the clock arithmetic and the merge of the
hosts' shares into one run row. Pure: ``store.run_shards`` reads and writes, the load generator
(``collectors/loadgen/shards.py``) coordinates.

Clocks. Each host measures its offset to the store's clock (the database server's
``clock_timestamp()``): it reads its own clock before and after one query of the database's, and
takes ``offset = db − (before + after) / 2`` from the sample with the shortest round trip; the
offset is known to ± round trip / 2. The common start instant is agreed on the database's clock,
and each host converts it to its own (``local = db − offset``), so a host whose clock is wrong
still starts with the others. Latencies are differences on one host's clock and need no sync;
only the absolute instants of a host's rows are shifted by its clock's error, which is recorded
and warned about above ``CLOCK_WARN_MS``.

One load. Every host of a group must send the same load — workload (or the workload file's
hash, the dataset, the trace's sha256), the load level, requests or duration, max tokens, EOS,
arrival and burstiness, seed, API and the endpoint's model (``LOAD_FIELDS``): a host whose run
row differs from the group's first host's (``load_mismatches``) is refused before it sends
anything, so one run never mixes two loads under one label.

Merge. The run row is computed over every host's share (never the last writer's): the start is
the earliest host's, the end the latest's (both moved onto the database's clock), counts add up,
the client-bound verdict holds when any host was client-bound (each host's reason named), and a
run missing any host's share (a host failed, was lost or was stopped) ends ``interrupted``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

#: A host whose clock differs from the store's by more than this is warned about (its rows'
#: absolute instants are shifted by that much; its latencies are not).
CLOCK_WARN_MS: Final = 50.0

#: Statuses a shard ends with: it sent its share (``completed``: whatever its requests' own
#: outcomes), was stopped early (``interrupted``) or failed (an error, or lost: no heartbeat).
SHARD_FINAL: Final = frozenset({"completed", "interrupted", "failed"})


@dataclass(frozen=True)
class ClockSample:
    """One reading of the database's clock between two readings of the host's (epoch s)."""

    before: float
    db: float
    after: float

    @property
    def rtt_s(self) -> float:
        return self.after - self.before

    @property
    def offset_s(self) -> float:
        """database clock − host clock, at the midpoint of the round trip."""
        return self.db - (self.before + self.after) / 2.0


@dataclass(frozen=True)
class ClockOffset:
    """A host's clock against the store's: ``db_time ≈ host_time + offset_s`` ± ``rtt_s / 2``."""

    offset_s: float
    rtt_s: float

    @property
    def uncertainty_s(self) -> float:
        return self.rtt_s / 2.0

    @property
    def offset_ms(self) -> float:
        return self.offset_s * 1000.0

    @property
    def rtt_ms(self) -> float:
        return self.rtt_s * 1000.0

    def to_local(self, db_instant: float) -> float:
        """An instant on the database's clock, on this host's clock."""
        return db_instant - self.offset_s

    def to_db(self, local_instant: float) -> float:
        """An instant on this host's clock, on the database's clock."""
        return local_instant + self.offset_s


def clock_offset(samples: Sequence[ClockSample]) -> ClockOffset:
    """The offset from the sample with the shortest round trip (the least room for error)."""
    valid = [s for s in samples if s.rtt_s >= 0]
    if not valid:
        raise ValueError("no clock sample with a non-negative round trip")
    best = min(valid, key=lambda s: s.rtt_s)
    return ClockOffset(best.offset_s, best.rtt_s)


def clock_warning(
    host: str, offset_ms: float | None, *, limit_ms: float = CLOCK_WARN_MS
) -> str | None:
    """The warning recorded on the run when ``host``'s clock is more than ``limit_ms`` off."""
    if offset_ms is None or abs(offset_ms) <= limit_ms:
        return None
    side = "behind" if offset_ms > 0 else "ahead of"
    return (
        f"{host}'s clock is {abs(offset_ms):.0f} ms {side} the store's (> {limit_ms:g} ms): its "
        "rows' absolute instants are shifted by that much; its latencies (differences on its own "
        "clock) are not"
    )


def iso(epoch: float | None) -> str:
    """An epoch instant as UTC ``YYYY-MM-DD HH:MM:SS.mmm``."""
    if epoch is None:
        return "never"
    whole = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(epoch))
    return f"{whole}.{int((epoch % 1) * 1000):03d} UTC"


@dataclass(frozen=True)
class ShardShare:
    """What one host recorded of its share (a ``run_shards`` row)."""

    shard: int  # 0-based
    shards: int
    host: str
    status: str  # joined | ready | running | completed | interrupted | failed
    started_at: float | None = None  # the host's first send, on its own clock
    ended_at: float | None = None  # its last completion, on its own clock
    requests: int = 0
    ok: int = 0
    errors: int = 0
    client_bound: bool | None = None
    reason: str | None = None
    clock_offset_ms: float | None = None
    clock_rtt_ms: float | None = None
    heartbeat_at: float | None = None  # database clock
    error: str | None = None
    #: the host's own tool summary and run fields (``achieved_rate``, ``output_tokens_estimated``,
    #: ``status`` of its requests, ``max_error_rate`` …)
    summary: Mapping[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.host} (shard {self.shard + 1}/{self.shards})"

    def on_db_clock(self, instant: float | None) -> float | None:
        if instant is None:
            return None
        return instant + (self.clock_offset_ms or 0.0) / 1000.0


#: Summary counts that add up over hosts.
_SUMMED: Final = (
    "cancelled",
    "output_tokens",
    "token_gaps",
    "workers",
    "client_cpu_s",
)
#: Summary figures where the run's is the worst host's.
_WORST: Final = ("p99_lag_ms", "p99_loop_lag_ms")


def merged_status(shares: Sequence[ShardShare], *, max_error_rate: float = 1.0) -> str:
    """``interrupted`` when any host's share is missing (a host failed, was lost or stopped, or
    never finished); else ``failed`` when no request succeeded or the failed share is above
    ``max_error_rate`` (cancelled requests not counted); else ``completed``."""
    if any(s.status != "completed" for s in shares):
        return "interrupted"
    done = sum(s.requests for s in shares)
    cancelled = sum(int(s.summary.get("cancelled", 0) or 0) for s in shares)
    ok = sum(s.ok for s in shares)
    failures = sum(s.errors for s in shares) - cancelled
    measured = done - cancelled
    if measured <= 0 or ok == 0 or failures / measured > max_error_rate:
        return "failed"
    return "completed"


def merge_shares(
    shares: Sequence[ShardShare], *, shards: int, max_error_rate: float = 1.0
) -> dict[str, Any]:
    """The run row's own fields merged over the hosts' shares (see the module's docstring):
    status, started_at, ended_at, duration_s, achieved_rate, client_bound(+_reason),
    output_tokens_estimated, host, tool_summary (totals, plus ``hosts``: one entry per shard,
    ``failed_hosts`` and ``clock_warnings``) and ``notes_lines`` (what the run's notes add)."""
    ordered = sorted(shares, key=lambda s: s.shard)
    missing = sorted(set(range(shards)) - {s.shard for s in ordered})
    status = "interrupted" if missing else merged_status(ordered, max_error_rate=max_error_rate)
    starts = [t for s in ordered if (t := s.on_db_clock(s.started_at)) is not None]
    ends = [t for s in ordered if (t := s.on_db_clock(s.ended_at)) is not None]
    started = min(starts) if starts else None
    ended = max(ends) if ends else None
    duration = ended - started if started is not None and ended is not None else None
    if duration is not None and duration <= 0:
        duration = None
    rates = [s.summary.get("achieved_rate") for s in ordered]
    achieved = sum(float(r) for r in rates if r is not None) if any(rates) else None
    bound = [s for s in ordered if s.client_bound]
    totals: dict[str, Any] = {}
    for key in _SUMMED:
        found = [float(v) for s in ordered if (v := s.summary.get(key)) is not None]
        if found:
            total = sum(found)
            totals[key] = round(total, 3) if key == "client_cpu_s" else int(total)
    for key in ("requests", "ok", "errors"):  # a lost host's: as of its last heartbeat
        totals[key] = sum(getattr(s, key) for s in ordered)
    for key in _WORST:
        worst = [float(v) for s in ordered if (v := s.summary.get(key)) is not None]
        totals[key] = max(worst) if worst else None
    scheduled = [float(v) for s in ordered if (v := s.summary.get("scheduled_rate")) is not None]
    totals["scheduled_rate"] = sum(scheduled) if scheduled else None
    cancelled = int(totals.get("cancelled", 0))
    measured = totals["requests"] - cancelled
    totals["error_rate"] = (
        round((totals["errors"] - cancelled) / measured, 6) if measured > 0 else None
    )
    totals["max_error_rate"] = max_error_rate
    totals["timestamps"] = sorted(
        {t for s in ordered for t in s.summary.get("timestamps", ()) or ()}
    )
    totals["timestamps_notes"] = sorted(
        {t for s in ordered for t in s.summary.get("timestamps_notes", ()) or ()}
    )
    failed = [s for s in ordered if s.status == "failed"]
    stopped = [s for s in ordered if s.status == "interrupted"]
    unfinished = [s for s in ordered if s.status not in SHARD_FINAL]
    warnings = [w for s in ordered if (w := clock_warning(s.host, s.clock_offset_ms))]
    notes: list[str] = []
    for s in failed:
        notes.append(
            f"{s.label} failed: {s.error or 'no reason recorded'}; its rows so far are kept"
        )
    for s in stopped:
        notes.append(f"{s.label} was stopped before its share was sent")
    for s in unfinished:
        notes.append(f"{s.label} had not finished ({s.status}) when the run was merged")
    for i in missing:
        notes.append(f"shard {i + 1}/{shards} never joined")
    notes.extend(warnings)
    totals["shards"] = shards
    totals["hosts"] = [
        {
            "shard": s.shard + 1,
            "host": s.host,
            "status": s.status,
            "requests": s.requests,
            "ok": s.ok,
            "errors": s.errors,
            "started_at": s.started_at,
            "ended_at": s.ended_at,
            "client_bound": s.client_bound,
            "client_bound_reason": s.reason,
            "clock_offset_ms": s.clock_offset_ms,
            "clock_rtt_ms": s.clock_rtt_ms,
            "error": s.error,
            "summary": dict(s.summary),
        }
        for s in ordered
    ]
    totals["failed_hosts"] = [s.host for s in failed]
    totals["clock_warnings"] = warnings
    return {
        "status": status,
        "started_at": started,
        "ended_at": ended,
        "duration_s": duration,
        "achieved_rate": achieved,
        "client_bound": bool(bound),
        "client_bound_reason": "; ".join(f"{s.host}: {s.reason}" for s in bound) or None,
        "output_tokens_estimated": any(
            bool(s.summary.get("output_tokens_estimated")) for s in ordered
        ),
        "host": ", ".join(s.host for s in ordered),
        "tool_summary": totals,
        "notes_lines": notes,
    }


# --- one load for every host -----------------------------------------------------------------

#: What defines a sharded run's load, each as the flag that sets it: every host of one group must
#: give the same (``load_mismatches``), else the merged run would mix loads under one label.
LOAD_FIELDS: Final[tuple[tuple[str, str], ...]] = (
    ("workload", "--workload"),
    ("workload_sha256", "the workload file's content"),
    ("dataset", "--dataset"),
    ("trace", "--trace (its sha256)"),
    ("load", "the load (--concurrency/--rate)"),
    ("requests", "--requests"),
    ("duration_s", "--duration"),
    ("max_tokens", "--max-tokens"),
    ("ignore_eos", "--ignore-eos"),
    ("arrival", "--arrival"),
    ("burstiness", "--burstiness"),
    ("seed", "--seed"),
    ("api", "--api"),
    ("model", "the endpoint's model"),
)


def _params(run: Mapping[str, Any]) -> Mapping[str, Any]:
    raw = run.get("client_params")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return {}
    return raw if isinstance(raw, Mapping) else {}


def load_definition(run: Mapping[str, Any]) -> dict[str, Any]:
    """The load a sharded run's row says it sends (:data:`LOAD_FIELDS`), from its columns and its
    ``client_params`` (a dict or its JSON); a trace by its content's sha256."""
    params = _params(run)
    trace = params.get("trace")
    return {
        "workload": params.get("workload") or run.get("workload"),
        "workload_sha256": params.get("workload_sha256"),
        "dataset": params.get("dataset"),
        "trace": trace.get("sha256") if isinstance(trace, Mapping) else trace,
        "load": params.get("load"),
        "requests": params.get("requests"),
        "duration_s": params.get("duration_s"),
        "max_tokens": params.get("max_tokens"),
        "ignore_eos": params.get("ignore_eos"),
        "arrival": params.get("arrival") or run.get("arrival"),
        "burstiness": params.get("burstiness"),
        "seed": params.get("seed"),
        "api": params.get("api") or run.get("api"),
        "model": run.get("model"),
    }


def _shown(key: str, value: Any) -> str:
    if value is None:
        return "none"
    if key == "load" and isinstance(value, Mapping):
        return f"{value.get('kind')} {value.get('value')}"
    if key == "trace" and isinstance(value, str):
        return value[:12]
    return str(value)


def load_mismatches(first: Mapping[str, Any], mine: Mapping[str, Any]) -> list[str]:
    """How this host's run row (``mine``) defines a different load than the group's first host's
    (``first``), one phrase per differing field of :data:`LOAD_FIELDS` (``--max-tokens 64 here,
    8 on the first host``); empty when they agree."""
    a, b = load_definition(first), load_definition(mine)
    return [
        f"{flag} {_shown(key, b[key])} here, {_shown(key, a[key])} on the first host"
        for key, flag in LOAD_FIELDS
        if a[key] != b[key]
    ]
