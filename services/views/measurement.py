"""How a ServeScope run was measured: the view model of the Latency page's "Measurement" part.

A reader of a P99 wants to know whether the client could be trusted: where the read instants
came from (the kernel's receive stamps or the event loop's reads), how many measuring processes
sent the load and why, whether the run was client-bound and why, the trace it replayed (file,
format, hash, speed, window), and — for one run made by several hosts (``bench --shard``) —
each host's share, its figures, its clock check and how it ended. Built from the run row and
``store.request_hosts``; None for imported runs (their tool measured them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import pandas as pd

from store import request_hosts, runs_table
from store.db import Store

#: Per-host keys taken from the merged run's ``tool_summary["hosts"]`` (bench --shard).
SHARD_KEYS: Final = ("shard", "status", "clock_offset_ms", "clock_rtt_ms", "error")


@dataclass(frozen=True)
class RunMeasurement:
    run_id: str
    timestamps: tuple[str, ...] = ()  # "kernel" and/or "loop" (one per worker, deduplicated)
    timestamp_notes: tuple[str, ...] = ()
    workers: int | None = None
    workers_reason: str | None = None
    client_bound: bool = False
    client_bound_reason: str | None = None
    loop_lag_p99_ms: float | None = None
    arrival: str | None = None
    trace: Mapping[str, Any] | None = None  # client_params["trace"]
    shard: Mapping[str, Any] | None = None  # client_params["shard"]: group, count
    hosts: pd.DataFrame = field(default_factory=pd.DataFrame)  # request_hosts + shard keys
    notes: tuple[str, ...] = ()  # what a reader must know (a failed host, a clock warning)

    @property
    def several_hosts(self) -> bool:
        return len(self.hosts) > 1 or self.shard is not None


def _strings(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Sequence):
        return tuple(str(v) for v in value if v)
    return ()


def _host_entries(summary: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    hosts = summary.get("hosts")
    if isinstance(hosts, Mapping):
        return [{"host": k, **v} for k, v in hosts.items() if isinstance(v, Mapping)]
    if isinstance(hosts, Sequence) and not isinstance(hosts, str):
        return [h for h in hosts if isinstance(h, Mapping) and h.get("host") is not None]
    return []


def hosts_table(figures: pd.DataFrame, entries: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """``request_hosts.host_figures`` joined with each host's shard entry (how it ended, its
    clock); hosts that joined but sent nothing appear with zero requests."""
    table = figures.copy()
    if entries:
        shards = pd.DataFrame(
            [{"host": str(e["host"]), **{k: e.get(k) for k in SHARD_KEYS}} for e in entries]
        )
        table["host"] = table["host"].astype("object")
        table = table.merge(shards, on="host", how="outer")
        for col in ("requests", "ok", "errors", "cancelled"):
            table[col] = pd.to_numeric(table[col]).fillna(0).astype("int64")
    return table.sort_values("host", na_position="last").reset_index(drop=True)


def run_measurement(store: Store, run_id: str) -> RunMeasurement | None:
    """How ``run_id`` was measured; None when it does not exist or was imported."""
    run = runs_table.run_record(store, run_id)
    if run is None or run.get("source") != "servescope":
        return None
    params = run.get("client_params") if isinstance(run.get("client_params"), Mapping) else {}
    summary = run.get("tool_summary") if isinstance(run.get("tool_summary"), Mapping) else {}
    assert isinstance(params, Mapping) and isinstance(summary, Mapping)
    entries = _host_entries(summary)
    notes: list[str] = []
    for e in entries:
        status = e.get("status")
        if status not in (None, "completed"):
            why = f": {e['error']}" if e.get("error") else ""
            notes.append(f"host {e['host']} (shard {e.get('shard', '?')}) {status}{why}")
    notes.extend(_strings(summary.get("clock_warnings")))
    workers = summary.get("workers", params.get("workers"))
    lag = summary.get("p99_loop_lag_ms")
    return RunMeasurement(
        run_id=run_id,
        timestamps=_strings(summary.get("timestamps")),
        timestamp_notes=_strings(summary.get("timestamps_notes")),
        workers=int(workers) if isinstance(workers, int | float) else None,
        workers_reason=params.get("workers_reason"),
        client_bound=bool(run.get("client_bound")),
        client_bound_reason=run.get("client_bound_reason"),
        loop_lag_p99_ms=float(lag) if isinstance(lag, int | float) else None,
        arrival=run.get("arrival"),
        trace=params.get("trace") if isinstance(params.get("trace"), Mapping) else None,
        shard=params.get("shard") if isinstance(params.get("shard"), Mapping) else None,
        hosts=hosts_table(request_hosts.host_figures(store, run_id), entries),
        notes=tuple(notes),
    )
