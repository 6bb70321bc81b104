"""Investigating a window from a Prometheus server's history: the histogram bucket series (latency
and lengths) fetched through ``/api/v1/query_range``, stored, and read back as windowed
percentiles by ``services.views.traffic.traffic``; ``watch --prometheus --since --slo`` judging
the history's windows.

The server is a real loopback HTTP server answering ``query_range`` as Prometheus does (form
POST; ``{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {...},
"values": [[ts, "value"], ...]}]}}``; evaluation steps start, start + step, … ≤ end). Its
series are those of the real vLLM /metrics capture in tests/fixtures/vllm (names, labels, the
bucket bounds), plus Prometheus' ``instance`` and ``job`` labels; the capture's counters are
all 0, so the values are a scripted history (a calm phase, then an incident), scaled over time.

The history, from T0 (a whole minute) on, 10 finished requests per second:

- calm, (T0, T0 + 300]: every TTFT in (0.04, 0.06] s, every prompt in (100, 200] tokens, every
  output in (50, 100] tokens, every request finished "stop";
- incident, after T0 + 300: TTFTs 40 % in (0.04, 0.06], 40 % in (0.06, 0.08], 15 % in
  (0.25, 0.5], 5 % in (2.5, 5] s; prompts in (1000, 2000]; 9/s "stop", 1/s "abort".

Hand-computed percentiles (linear inside the bucket, ``histogram_quantile``), independent of
the window's length since every bucket grows in proportion:

- calm: P50 = 0.04 + 0.02 × 0.5 = 0.05 s; P99 = 0.04 + 0.02 × 0.99 = 0.0598 s;
- incident: cumulative shares 0.4 (≤ 0.06), 0.8 (≤ 0.08 … ≤ 0.25), 0.95 (≤ 0.5 … ≤ 2.5), 1:
  P50 = 0.06 + 0.02 × (0.5 − 0.4) / 0.4 = 0.065 s;
  P90 = 0.25 + 0.25 × (0.9 − 0.8) / 0.15 = 0.41667 s;
  P99 = 2.5 + 2.5 × (0.99 − 0.95) / 0.05 = 4.5 s (inside the 2.5–5 s bucket);
  error rate = 1 / 10 = 10 %.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote_plus

import pytest

from collectors import engine_metrics, prometheus, watch
from collectors.prometheus_text import parse
from errors import ExitCode
from services.views.traffic import traffic
from store.ingest import BufferedWriter
from store.lifecycle import open_store

ROOT = Path(__file__).resolve().parents[2]
CAPTURE = (
    ROOT
    / "tests"
    / "fixtures"
    / "vllm"
    / "metrics_v1_full_qwen2.5-0.5b_k8s-ai-conformance_kops.prom"
)
INSTANCE = "vllm-0.prod:8000"
RATE = 10.0  # finished requests per second
CALM_S = 300.0

#: per-request shares by bucket upper bound (le), per phase
TTFT = {
    "calm": {0.06: 1.0},
    "incident": {0.06: 0.4, 0.08: 0.4, 0.5: 0.15, 5.0: 0.05},
}
PROMPT = {"calm": {200.0: 1.0}, "incident": {2000.0: 1.0}}
OUTPUT = {"calm": {100.0: 1.0}, "incident": {100.0: 1.0}}
HISTS = {
    "vllm:time_to_first_token_seconds": TTFT,
    "vllm:request_prompt_tokens": PROMPT,
    "vllm:request_generation_tokens": OUTPUT,
}


class History:
    """The scripted cumulative value of every series of the capture at time t."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.instance = INSTANCE
        self.series = [
            (s.name, dict(s.labels))
            for s in parse(CAPTURE.read_text()).samples
            if not s.name.endswith("_created")
        ]

    def requests(self, t: float) -> dict[str, float]:
        calm = RATE * min(max(t - self.t0, 0.0), CALM_S)
        incident = RATE * max(t - self.t0 - CALM_S, 0.0)
        return {"calm": calm, "incident": incident}

    def value(self, name: str, labels: dict[str, str], t: float) -> float:
        n = self.requests(t)
        for family, shares in HISTS.items():
            if name == f"{family}_bucket":
                le = float(labels["le"])
                return sum(
                    n[p] * sum(v for bound, v in shares[p].items() if bound <= le) for p in n
                )
            if name == f"{family}_count":
                return n["calm"] + n["incident"]
            if name == f"{family}_sum":  # the middle of each bucket
                return sum(n[p] * sum(v * _mid(bound) for bound, v in shares[p].items()) for p in n)
        if name == "vllm:request_success_total":
            reason = labels.get("finished_reason")
            if reason == "stop":
                return n["calm"] + 0.9 * n["incident"]
            if reason == "abort":
                return 0.1 * n["incident"]
            return 0.0
        return 0.0

    def matrix(self, query: str, start: float, end: float, step: float) -> list[dict[str, object]]:
        m = re.search(r'__name__=~"([^"]*)"', query)
        assert m is not None, query
        wanted = {n.replace("\\", "") for n in m.group(1).split("|")}
        job = re.search(r'job="([^"]*)"', query)
        steps = [start + k * step for k in range(math.floor((end - start) / step) + 1)]
        out: list[dict[str, object]] = []
        for name, labels in self.series:
            if name not in wanted or (job and job.group(1) != "vllm"):
                continue
            metric = {"__name__": name, **labels, "instance": self.instance, "job": "vllm"}
            values = [[t, repr(self.value(name, labels, t))] for t in steps if t >= self.t0]
            if values:
                out.append({"metric": metric, "values": values})
        return out


def _mid(le: float) -> float:
    lower = {0.06: 0.04, 0.08: 0.06, 0.5: 0.25, 5.0: 2.5, 200.0: 100.0, 2000.0: 1000.0, 100.0: 50.0}
    return (lower[le] + le) / 2


@pytest.fixture
def history() -> History:
    now = time.time()
    return History(t0=math.floor(now / 60) * 60 - 600)


#: seconds the server waits before answering each query, in order (then at once)
DELAYS: list[float] = []


@pytest.fixture
def prom(history: History) -> Iterator[tuple[str, list[str]]]:
    queries: list[str] = []
    DELAYS.clear()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
            if self.path != "/api/v1/query_range":
                self.send_response(404)
                self.end_headers()
                return
            queries.append(form["query"])
            if DELAYS:
                time.sleep(DELAYS.pop(0))
            result = history.matrix(
                form["query"], float(form["start"]), float(form["end"]), float(form["step"])
            )
            body = json.dumps(
                {"status": "success", "data": {"resultType": "matrix", "result": result}}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", queries
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_the_query_asks_for_every_bucket_series_including_the_lengths() -> None:
    names = set(engine_metrics.source_names())
    for family in (
        "vllm:time_to_first_token_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
        "vllm:request_prefill_time_seconds",
        "vllm:request_prompt_tokens",
        "vllm:request_generation_tokens",
        "sglang:time_to_first_token_seconds",
        "tgi_request_input_length",
        "tgi_request_generated_tokens",
    ):
        assert {f"{family}_bucket", f"{family}_sum", f"{family}_count"} <= names, family


def test_traffic_from_a_prometheus_history(
    prom: tuple[str, list[str]], history: History, tmp_path: Path
) -> None:
    url, queries = prom
    store = open_store(f"duckdb:///{tmp_path / 'prom.duckdb'}")
    writer = BufferedWriter(store, background=False)
    end = history.t0 + 600
    got = prometheus.import_window(
        writer, url, start=history.t0, end=end, step=15.0, match='job="vllm"'
    )
    writer.close()
    assert got.targets == {INSTANCE: "vllm"}
    assert "vllm:time_to_first_token_seconds_bucket" in queries[0]
    assert "vllm:request_prompt_tokens_bucket" in queries[0]

    t = traffic(store, targets=None, start=history.t0, end=end, window_s=60.0)
    assert t.targets == (INSTANCE,) and t.engine == "vllm"
    ttft = t.windows["ttft_seconds"].to_dict("records")
    assert len(ttft) == 10
    phases = []
    for row in ttft:
        w0 = float(row["window_start"])
        assert row["count"] == pytest.approx(RATE * 60), w0
        if w0 + 60 <= history.t0 + CALM_S:
            phases.append("calm")
            assert row["p50"] == pytest.approx(0.05)
            assert row["p99"] == pytest.approx(0.0598)
            assert row["p99_precision"] == "P99 inside the 0.04–0.06 s bucket"
        else:
            phases.append("incident")
            assert row["p50"] == pytest.approx(0.065)
            assert row["p90"] == pytest.approx(0.25 + 0.25 * 0.1 / 0.15)
            assert row["p99"] == pytest.approx(4.5)
            assert row["p99_precision"] == "P99 inside the 2.5–5 s bucket"
    assert phases == ["calm"] * 5 + ["incident"] * 5
    # the error rate from the finished counters by reason
    req = {float(r["window_start"]): r for r in t.requests.to_dict("records")}
    assert req[history.t0]["error_rate"] == pytest.approx(0.0)
    assert req[history.t0 + 540]["error_rate"] == pytest.approx(0.1)
    assert req[history.t0 + 540]["failed_by_reason"] == {"abort": pytest.approx(60.0)}
    # the span's length mix: 3000 calm prompts ≤ 200 tokens, 3000 incident ones in (1000, 2000]
    prompts = dict(t.lengths["prompt_length_tokens"])
    assert prompts[100.0] == 0 and prompts[200.0] == pytest.approx(3000)
    assert prompts[1000.0] == pytest.approx(3000) and prompts[2000.0] == pytest.approx(6000)
    assert prompts[math.inf] == pytest.approx(6000)
    outputs = dict(t.lengths["output_length_tokens"])
    assert outputs[50.0] == 0 and outputs[100.0] == pytest.approx(6000)
    # the window mean of the prompt lengths: the middle of the bucket, in tokens
    prompt_windows = t.windows["prompt_length_tokens"]
    assert prompt_windows["mean"].iloc[-1] == pytest.approx(1500)
    assert prompt_windows["mean"].iloc[0] == pytest.approx(150)
    store.dispose()


def test_watch_since_judges_the_history(
    prom: tuple[str, list[str]], history: History, tmp_path: Path
) -> None:
    url, _ = prom
    env = dict(os.environ, PYTHONPATH=str(ROOT), SERVESCOPE_SPOOL_DIR=str(tmp_path / "spool"))
    db = f"duckdb:///{tmp_path / 'watch.duckdb'}"
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "cli", "watch", "--db", db, "--prometheus", url),
            *("--match", 'job="vllm"', "--since", "12m", "--interval", "15s"),
            *("--duration", "1s", "--slo", "interactive-chat"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    breached = {}
    for line in proc.stdout.splitlines():
        m = re.search(r"from=(\d+)&to=(\d+)", line)
        assert line.startswith("BREACH ") and f" {INSTANCE} " in line and m, line
        breached[int(m.group(1))] = line
    incident = history.t0 + CALM_S
    # every window wholly inside the incident breaches (P99 4.5 s > 500 ms; errors 10 % > 1 %);
    # none of the calm ones (their baseline scrape is at most one 15 s step before them)
    for w0 in range(int(incident) + 60, int(history.t0) + 600, 60):
        assert w0 in breached, (w0, proc.stdout)
        assert "P99 TTFT 4.5 s > 500 ms (P99 inside the 2.5–5 s bucket)" in breached[w0]
        assert "error rate 10.0% > 1.0% (60 failed)" in breached[w0]
    assert all(w0 >= incident for w0 in breached), sorted(breached)
    judged = re.search(
        r"SLO 'interactive-chat': (\d+) window\(s\) of 1 target\(s\) judged", proc.stderr
    )
    assert judged is not None and int(judged.group(1)) >= 10, proc.stderr
    # the history's rows are counted among those added (before: "stored 672 of 0 rows")
    stored = re.search(r"^stored ([\d,]+) of ([\d,]+) rows", proc.stderr, re.M)
    assert stored is not None, proc.stderr
    assert stored.group(1) == stored.group(2) != "0", stored.group(0)
    # as a canary over the history: stops at the first breach instead of watching 60 s live
    started = time.monotonic()
    canary = subprocess.run(
        [*proc.args, "--fail-on-breach", "--duration", "60s"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )
    assert canary.returncode == ExitCode.FAILED, canary.stderr
    assert time.monotonic() - started < 30
    assert canary.stdout.startswith("BREACH ")


def test_a_newline_in_the_instance_label_cannot_forge_a_breach_line(
    prom: tuple[str, list[str]], history: History, tmp_path: Path
) -> None:
    # before: the instance's newline split the window's BREACH line in two on stdout
    forged = "BREACH 2026-01-01 00:00:00–00:01:00 UTC forged P99 TTFT 1 ms > 0 ms http://x/"
    history.instance = f"{INSTANCE}\n{forged}\r\x1b[2K"
    url, _ = prom
    env = dict(os.environ, PYTHONPATH=str(ROOT), SERVESCOPE_SPOOL_DIR=str(tmp_path / "spool"))
    db = f"duckdb:///{tmp_path / 'watch.duckdb'}"
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "cli", "watch", "--db", db, "--prometheus", url),
            *("--since", "3m", "--interval", "15s", "--duration", "1s"),
            *("--slo", "interactive-chat", "--fail-on-breach"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == ExitCode.FAILED, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines and "forged" not in proc.stdout.split(" ", 1)[0], proc.stdout
    for line in lines:  # one line per breaching window, each the real one
        # the target is one field, escaped: the forged text stays inside the real line
        target = line.split(" ")[4]
        assert target.startswith(f"{INSTANCE}\\nBREACH\\x20"), line
        assert target.endswith("\\r\\x1b[2K"), line
        assert "P99 TTFT 4.5 s > 500 ms" in line, line
        # the link still names the real target (URL-encoded)
        m = re.search(r"/incident\?target=(\S+)&from=", line)
        assert m is not None and unquote_plus(m.group(1)) == history.instance
    assert not any(" forged " in line.split("UTC", 1)[0] for line in lines)
    assert "\x1b" not in proc.stdout + proc.stderr and "\r" not in proc.stdout


class ListSink:
    def __init__(self) -> None:
        self.rows: dict[str, list[dict[str, Any]]] = {}

    def add(self, table: str, rows: Any) -> None:
        self.rows.setdefault(table, []).extend(dict(r) for r in rows)


def test_a_poll_the_watcher_gave_up_on_is_asked_again_not_skipped(
    prom: tuple[str, list[str]],
) -> None:
    url, queries = prom
    DELAYS.extend([3.0])  # the first answer outlasts the watcher's 2 s timeout (1 s interval)
    sink = ListSink()
    start = math.floor(time.time()) - 5.0
    src = watch.PrometheusSource(url, match='job="vllm"', step_s=1.0, start=start)
    watcher = watch.Watcher(sink, [src], interval_s=1.0)
    asyncio.run(watcher.run(duration_s=7.0))
    src.close()
    assert src.state.errors >= 1 and src.state.last_error is None, src.state
    assert len(queries) >= 3
    steps = sorted({r["ts"] for r in sink.rows["engine_samples"] if r["target"] == INSTANCE})
    # every step from the first asked for, none lost to the timed-out poll, none twice
    assert steps[0] == start and len(steps) >= 8
    assert steps == [start + k for k in range(len(steps))]
    counts = [r for r in sink.rows["engine_samples"] if r["metric"] == "ttft_seconds_count"]
    assert len(counts) == len(steps)
