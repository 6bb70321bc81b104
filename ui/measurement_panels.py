"""The "Measurement" part of a run's page: how the run was measured (read instants, workers,
client-bound verdict, replayed trace, hosts of a multi-host run), from
``services.views.measurement.RunMeasurement``. Every stored text is escaped for Markdown."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd
import streamlit as st

from services.views.measurement import RunMeasurement
from ui import display

#: The hosts table's columns as shown (view column → header).
HOST_HEADERS = {
    "host": "host",
    "shard": "shard",
    "status": "ended",
    "requests": "requests",
    "ok": "ok",
    "errors": "errors",
    "ttft_p50_ms": "TTFT P50 (ms)",
    "ttft_p99_ms": "TTFT P99 (ms)",
    "e2e_p99_ms": "E2E P99 (ms)",
    "clock_offset_ms": "clock vs store (ms)",
    "clock_rtt_ms": "clock check RTT (ms)",
}

_SOURCES = {
    "kernel": "the kernel's receive stamps (SO_TIMESTAMPNS): a busy client delays processing, "
    "not the measurement",
    "loop": "the client's event loop reads: a busy loop stamps reads late",
}


def hosts_frame(m: RunMeasurement) -> pd.DataFrame:
    """The hosts table with readable headers (only the columns the run has), times to 0.1 ms
    (clock figures to 0.01 ms)."""
    cols = [c for c in HOST_HEADERS if c in m.hosts.columns]
    table = m.hosts[cols].copy()
    for col in cols:
        if col.endswith("_ms"):
            digits = 2 if col.startswith("clock") else 1
            table[col] = pd.to_numeric(table[col], errors="coerce").round(digits)
    return table.rename(columns=HOST_HEADERS)


def render_measurement(m: RunMeasurement) -> None:
    """How the run was measured, collapsed unless something needs the reader's attention."""
    attention = m.client_bound or bool(m.notes)
    with st.expander("Measurement: how this run was measured", expanded=attention):
        if m.client_bound:
            st.warning(
                "Client-bound: "
                + display.md_escape(m.client_bound_reason or "the client did not keep up"),
                icon=":material/warning:",
            )
        for note in m.notes:
            st.warning(display.md_escape(note), icon=":material/dns:")
        lines: list[str] = []
        if m.timestamps:
            sources = "; ".join(_SOURCES.get(t, display.md_escape(t)) for t in m.timestamps)
            lines.append(f"**Read instants**: {sources}.")
        for note in m.timestamp_notes:
            lines.append(f"- {display.md_escape(note)}")
        if m.workers is not None:
            why = display.md_escape(m.workers_reason) if m.workers_reason else ""
            if m.shard is not None:
                hosts = f"{m.shard.get('count', '?')} hosts"
                why = f"; each host chose for its share: {why}" if why else ""
                lines.append(f"**Measuring processes**: {m.workers} over {hosts}{why}.")
            else:
                why = f" ({why})" if why else ""
                lines.append(f"**Measuring processes**: {m.workers}{why}.")
        if not m.client_bound and m.loop_lag_p99_ms is not None:
            lines.append(
                f"**Not client-bound**; the client's event loop woke {m.loop_lag_p99_ms:,.1f} ms "
                "late at P99."
            )
        if m.trace is not None:
            lines.append(_trace_line(m.trace))
        if m.shard is not None:
            n = m.shard.get("count", "?")
            lines.append(
                f"**One run from {n} hosts** (group "
                f"{display.md_escape(str(m.shard.get('group', '')))}): from a common start "
                f"agreed through the store, each host sent its share of one schedule (1/{n} of "
                "the streams, or of the arrivals); latencies are differences on each host's own "
                "clock."
            )
        st.markdown("\n\n".join(lines) or "Nothing was recorded about this run's measurement.")
        if m.several_hosts and not m.hosts.empty:
            st.dataframe(hosts_frame(m), hide_index=True, key="measurement_hosts")


def _trace_line(trace: Mapping[str, Any]) -> str:
    window = trace.get("window_s")
    where = f", window {window[0]:g}–{window[1]:g} s of the trace" if window else ""
    skipped = trace.get("rows_skipped") or 0
    skip = f"; {skipped:,} rows skipped" if skipped else ""
    sha = str(trace.get("sha256") or "")[:12]
    return (
        f"**Replayed trace** {display.md_escape(str(trace.get('file', '')))} "
        f"({display.md_escape(str(trace.get('format', '')))}, sha256 {sha}…, "
        f"×{trace.get('speed', 1):g}{where}): {trace.get('requests', 0):,} requests over "
        f"{trace.get('span_s', 0):,.1f} s{skip}."
    )
