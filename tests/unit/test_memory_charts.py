"""ui.memory_charts: one shared time axis for memory, KV, queue and preemptions; runs aligned
at their start. Compared through fig.to_dict() without layout.template."""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go

from ui import memory_charts

GIB = 2**30
T = ["1970-01-01 00:00:00", "1970-01-01 00:00:10"]


def _dict(fig: go.Figure) -> dict[str, Any]:
    d = fig.to_dict()
    d["layout"].pop("template", None)
    return d


def _engine() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "target": "t",
            "metric": [
                "kv_cache_usage",
                "kv_cache_usage",
                "preemptions_total",
                "preemptions_total",
                "requests_waiting",
            ],
            "ts": [0.0, 10.0, 0.0, 10.0, 0.0],
            "value": [0.5, 0.6, 1.0, 3.0, 2.0],
        }
    )


def _gpu() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "host": "h",
            "gpu_index": [0, 0],
            "ts": [0.0, 10.0],
            "mem_used_bytes": [1.0 * GIB, 2.0 * GIB],
            "mem_total_bytes": [4.0 * GIB, 4.0 * GIB],
        }
    )


def test_memory_timeline_shares_one_time_axis() -> None:
    d = _dict(memory_charts.memory_timeline(_engine(), _gpu(), cap_fraction=0.5))
    assert d["data"] == [
        {"type": "scatter", "mode": "lines", "name": "used · h:0", "x": T, "y": [1.0, 2.0],
         "xaxis": "x", "yaxis": "y"},
        {"type": "scatter", "mode": "lines", "name": "total · h:0", "x": T, "y": [4.0, 4.0],
         "line": {"dash": "dash"}, "xaxis": "x", "yaxis": "y"},
        {"type": "scatter", "mode": "lines", "name": "cap 50% · h:0", "x": T, "y": [2.0, 2.0],
         "line": {"dash": "dot"}, "xaxis": "x", "yaxis": "y"},
        {"type": "scatter", "mode": "lines", "name": "kv_cache_usage · t", "x": T,
         "y": [0.5, 0.6], "xaxis": "x2", "yaxis": "y2"},
        {"type": "scatter", "mode": "lines", "name": "waiting · t", "x": T[:1], "y": [2.0],
         "xaxis": "x3", "yaxis": "y3"},
        # the counter 1 → 3 drawn as its increase per bin
        {"type": "bar", "name": "preemptions · t", "x": T[1:], "y": [2.0], "xaxis": "x4",
         "yaxis": "y4"},
    ]  # fmt: skip
    layout = d["layout"]
    for axis in ("xaxis", "xaxis2", "xaxis3"):
        assert layout[axis]["matches"] == "x4"  # one shared time axis
    assert layout["yaxis2"]["range"] == [0, 1.05]
    assert [a["text"] for a in layout["annotations"]] == list(memory_charts.ROWS)


def test_memory_timeline_without_gpu_samples_says_so() -> None:
    d = _dict(memory_charts.memory_timeline(_engine(), _gpu().iloc[0:0]))
    assert "no GPU samples for this span" in [a["text"] for a in d["layout"]["annotations"]]
    assert next(t["name"] for t in d["data"]) == "kv_cache_usage · t"


def test_preemption_steps_count_restarts_from_zero() -> None:
    engine = pd.DataFrame(
        {
            "target": "t",
            "metric": "preemptions_total",
            "ts": [0.0, 1.0, 2.0],
            "value": [5.0, 7.0, 1.0],
        }
    )
    steps = memory_charts.preemption_steps(engine)
    assert steps["ts"].tolist() == [1.0, 2.0]
    assert steps["value"].tolist() == [2.0, 1.0]


def test_aligned_runs_overlay_kv_and_memory_by_run() -> None:
    aligned = pd.DataFrame(
        {
            "run_id": ["a", "a", "b", "a"],
            "series": ["kv_cache_usage", "kv_cache_usage", "kv_cache_usage", "gpu_mem_used_bytes"],
            "t": [0.0, 5.0, 0.0, 0.0],
            "value": [0.1, 0.2, 0.9, 3.0 * GIB],
        }
    )
    d = _dict(memory_charts.aligned_runs_chart(aligned, {"a": "run A", "b": "run B"}))
    got = [(t["name"], t["yaxis"], list(t["x"]), list(t["y"]), t["showlegend"]) for t in d["data"]]
    assert got == [
        ("run A", "y2", [0.0], [3.0], False),  # memory row; the legend entry is on the KV row
        ("run A", "y", [0.0, 5.0], [0.1, 0.2], True),
        ("run B", "y", [0.0], [0.9], True),
    ]
    assert d["layout"]["xaxis2"]["title"] == {"text": "seconds since run start"}
