"""AppTest: the Latency page's "Measurement" part — read instants, workers, client-bound verdict,
the replayed trace and the hosts of a run made by three hosts, one of which failed — and the view
model it renders (services.views.measurement) on a real DuckDB file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from services.views.measurement import run_measurement
from store import ingest
from store.lifecycle import open_store

PAGE = str(Path(__file__).resolve().parents[2] / "pages" / "latency.py")
T0 = 1_800_000_000.0
HOSTS = ("host-a", "host-b", "host-c")


def _seed(url: str) -> dict[str, np.ndarray]:
    """One sharded trace run: hosts a and b sent 60 requests each, c sent 15 and then failed."""
    store = open_store(url)
    rng = np.random.default_rng(3)
    ttfts: dict[str, np.ndarray] = {}
    rows = []
    seq = 0
    for host, n in zip(HOSTS, (60, 60, 15), strict=True):
        ttft = rng.uniform(40.0, 90.0, n)
        ttfts[host] = ttft
        for k in range(n):
            rows.append(
                {
                    "run_id": "g1-trace1",
                    "seq": seq,
                    "host": host,
                    "status": "ok" if k % 20 else "error",
                    "ttft_ms": float(ttft[k]),
                    "e2e_ms": float(ttft[k]) + 500.0,
                    "sent_at": T0 + seq * 0.05,
                    "done_at": T0 + seq * 0.05 + 0.6,
                    "input_tokens": 100 + k,
                    "output_tokens": 20,
                }
            )
            seq += 1
    ingest.add_run(
        store,
        {
            "run_id": "g1-trace1",
            "name": "trace:conv.csv trace ×2",
            "source": "servescope",
            "framework": "sim",
            "model": "m",
            "arrival": "trace",
            "status": "interrupted",
            "client_bound": True,
            "client_bound_reason": "host-b: P99 client lag 12.0 ms > 10 ms",
            "started_at": T0,
            "ended_at": T0 + 8,
            "client_params": {
                "workers": 1,
                "workers_reason": "2 requests/s: 1 worker(s) (1 needed, 1 of 2 cores free)",
                "trace": {
                    "file": "conv.csv",
                    "format": "azure",
                    "sha256": "ab" * 32,
                    "speed": 2.0,
                    "window_s": [60.0, 120.0],
                    "requests": 135,
                    "span_s": 7.5,
                    "rows_read": 400,
                    "rows_skipped": 3,
                },
                "shard": {"index": 1, "count": 3, "group": "g1"},
            },
            "tool_summary": {
                "timestamps": ["kernel"],
                "p99_loop_lag_ms": 3.2,
                "hosts": [
                    {"host": "host-a", "shard": 1, "status": "completed", "clock_offset_ms": 0.4},
                    {"host": "host-b", "shard": 2, "status": "completed", "clock_offset_ms": -1.1},
                    {
                        "host": "host-c",
                        "shard": 3,
                        "status": "failed",
                        "error": "no heartbeat since 12:00:03",
                    },
                ],
            },
        },
    )
    ingest.add_rows(store, "requests", rows)
    store.dispose()
    return ttfts


def test_view_model_has_each_hosts_share_figures_and_end(db_url: str) -> None:
    ttfts = _seed(db_url)
    m = run_measurement(open_store(db_url), "g1-trace1")
    assert m is not None and m.several_hosts and m.timestamps == ("kernel",)
    hosts = m.hosts.set_index("host")
    assert hosts["requests"].to_dict() == {"host-a": 60, "host-b": 60, "host-c": 15}
    assert hosts.loc["host-c", "status"] == "failed"
    for host, ttft in ttfts.items():
        ok = np.array([t for k, t in enumerate(ttft) if k % 20])
        assert hosts.loc[host, "ttft_p99_ms"] == pytest.approx(np.percentile(ok, 99), rel=1e-12)
    assert m.notes == ("host host-c (shard 3) failed: no heartbeat since 12:00:03",)
    assert m.trace is not None and m.trace["format"] == "azure"


def test_imported_runs_have_no_measurement_part(db_url: str) -> None:
    store = open_store(db_url)
    ingest.add_run(store, {"run_id": "imp", "source": "vllm", "status": "completed"})
    assert run_measurement(store, "imp") is None
    assert run_measurement(store, "nope") is None


def test_page_shows_how_the_run_was_measured(db_url: str) -> None:
    _seed(db_url)
    at = AppTest.from_file(PAGE, default_timeout=60)
    at.query_params["run"] = "g1-trace1"
    at.run()
    assert [e.value for e in at.exception] == []
    [part] = [e for e in at.expander if e.label.startswith("Measurement")]
    text = " ".join(m.value for m in part.markdown)
    assert "kernel's receive stamps" in text
    assert "Replayed trace" in text and "azure" in text and "3 rows skipped" in text
    assert "One run from 3 hosts" in text and "1/3 of the streams" in text
    assert "Measuring processes" in text and "over 3 hosts" in text
    warnings = [w.value.replace("\\", "") for w in part.warning]  # Markdown escapes
    assert any("Client-bound" in w and "host-b" in w for w in warnings)
    assert any("host-c" in w and "failed" in w for w in warnings)
    [table] = part.dataframe
    shown = table.value
    assert list(shown["host"]) == list(HOSTS)
    assert list(shown["requests"]) == [60, 60, 15]
    assert list(shown["ended"]) == ["completed", "completed", "failed"]
    p99 = shown["TTFT P99 (ms)"].astype(float)
    assert (p99 == p99.round(1)).all() and (p99 > 40).all()  # shown to 0.1 ms
