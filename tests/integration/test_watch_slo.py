"""``servescope watch --slo``: the sim's real /metrics over loopback, judged window by window in a
``servescope watch`` subprocess; a BREACH line with its incident link, the canary's exit status."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from errors import ExitCode
from services.commands.slo_profiles import save_slo_profile
from sim.engine import EngineConfig
from sim.server import SimHandle, start_in_thread
from store.lifecycle import open_store

ROOT = Path(__file__).resolve().parents[2]
UI = "http://dash.example:8501"
BREACH_RE = re.compile(
    r"^BREACH (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)–(\d\d:\d\d:\d\d) UTC (\S+) (.*) (\S+)$"
)


@pytest.fixture
def sim() -> Iterator[SimHandle]:
    cfg = EngineConfig.from_names("H100-SXM-80GB", "llama-3.1-8b")
    handle = start_in_thread(cfg, port=0, time_scale=10.0)
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"duckdb:///{tmp_path / 'slo.duckdb'}"
    store = open_store(url)
    # a TTFT limit no request meets, and one every request meets
    save_slo_profile(store, {"name": "tight", "percentile": 99, "ttft_ms": 0.001})
    save_slo_profile(
        store,
        {"name": "lenient", "percentile": 90, "ttft_ms": 600_000.0, "max_error_rate": 0.5},
    )
    store.dispose()
    return url


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["SERVESCOPE_SPOOL_DIR"] = str(tmp_path / "spool")
    env["PYTHONPATH"] = str(ROOT)
    return env


def _watch(db: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "cli", "watch", "--db", db, *extra]


class Load:
    """Completions against the sim, one after the other, until stopped."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self._stop.is_set():
                r = client.post(
                    f"{self.url}/v1/completions",
                    json={"prompt": "hello " * 200, "max_tokens": 8, "ignore_eos": True},
                )
                assert r.status_code == 200
                self.sent += 1
                self._stop.wait(0.1)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def _run_under_load(sim: SimHandle, cmd: list[str], tmp_path: Path) -> tuple[int, str, str, float]:
    started = time.monotonic()
    with Load(sim.url) as load:
        proc = subprocess.run(
            cmd, cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, timeout=120
        )
    assert load.sent > 0
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started


def test_a_breaching_window_prints_its_line_and_the_canary_fails(
    sim: SimHandle, db: str, tmp_path: Path
) -> None:
    cmd = _watch(
        db,
        *("--metrics", f"127.0.0.1:{sim.port}", "--interval", "250ms"),
        *("--slo", "tight", "--slo-window", "2s", "--fail-on-breach", "--duration", "30s"),
        *("--ui-url", UI + "/"),
    )
    rc, out, err, took = _run_under_load(sim, cmd, tmp_path)
    assert rc == ExitCode.FAILED, err
    assert took < 25, f"the canary should stop at the first breach, ran {took:.0f} s"
    lines = [line for line in out.splitlines() if line.startswith("BREACH ")]
    assert lines, out + err
    m = BREACH_RE.match(lines[0])
    assert m is not None, lines[0]
    start_text, end_text, target, reason, link = m.groups()
    assert target == f"http://127.0.0.1:{sim.port}/metrics"
    # the percentile, its value against the limit, and where the buckets place it
    assert re.match(
        r"P99 TTFT [\d.]+ m?s > 0\.001 ms \(P99 inside the [\d.]+–[\d.]+ s bucket\)", reason
    ), reason
    # the link opens the incident view of that target over that window
    parts = urlsplit(link)
    assert f"{parts.scheme}://{parts.netloc}" == UI and parts.path == "/incident"
    query = parse_qs(parts.query)
    assert query["target"] == [target]
    t0, t1 = int(query["from"][0]), int(query["to"][0])
    assert t1 - t0 == 2 and t0 % 2 == 0
    assert time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t0)) == start_text
    assert time.strftime("%H:%M:%S", time.gmtime(t1)) == end_text
    assert f"a window breached the SLO profile 'tight' (exit {ExitCode.FAILED})" in err
    # what was scraped is stored all the same
    last_stored = next(line for line in err.splitlines() if line.startswith("stored "))
    stored, added = (int(x.replace(",", "")) for x in last_stored.split()[1:4:2])
    assert stored == added > 0


def test_no_breach_runs_to_the_end_and_exits_zero(sim: SimHandle, db: str, tmp_path: Path) -> None:
    cmd = _watch(
        db,
        *("--metrics", f"127.0.0.1:{sim.port}", "--interval", "250ms"),
        *("--slo", "lenient", "--slo-window", "1s", "--fail-on-breach", "--duration", "5s"),
    )
    rc, out, err, took = _run_under_load(sim, cmd, tmp_path)
    assert rc == 0, err
    assert "BREACH" not in out
    assert took >= 5
    judged = re.search(
        r"SLO 'lenient': (\d+) window\(s\) of 1 target\(s\) judged, 0 breach\(es\)", err
    )
    assert judged is not None, err
    # 5 s of 1 s windows: the first (partial) to the last closed one
    assert 3 <= int(judged.group(1)) <= 5


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--slo", "nope"), "unknown SLO profile 'nope'"),
        (("--slo", "tight", "--slo-window", "0"), "--slo-window must be above 0 seconds"),
        (("--slo", "tight", "--slo-window", "100ms"), "shorter than --interval"),
        (("--fail-on-breach",), "--fail-on-breach needs --slo PROFILE"),
        (("--slo-window", "5s"), "--slo-window needs --slo PROFILE"),
        (("--slo", "tight", "--ui-url", "dash:8501"), "--ui-url must be the dashboard's"),
        (("--since", "1h"), "--since reads a Prometheus server's history"),
    ],
)
def test_bad_slo_flags_exit_2_before_scraping(
    db: str, tmp_path: Path, flags: tuple[str, ...], message: str
) -> None:
    # nothing listens on the target: a bad flag must be refused before any scrape is tried
    proc = subprocess.run(
        _watch(db, "--metrics", "127.0.0.1:9", "--duration", "1s", *flags),
        cwd=ROOT,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == ExitCode.ERROR, proc.stderr
    assert message in proc.stderr
    assert "servescope watch →" not in proc.stderr  # refused before watching started
    if flags == ("--slo", "nope"):
        # the known profiles are listed, the seeded and the user's own
        assert "interactive-chat" in proc.stderr and "tight" in proc.stderr


class GarbageMetrics:
    """A loopback vLLM-looking /metrics whose request count grows while its histogram buckets
    are ``NaN`` or negative (and falling): windows that cannot be judged."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.t0 = time.monotonic()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = owner.page().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def page(self) -> str:
        n = int((time.monotonic() - self.t0) * 20)
        lines = []
        for fam in ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds"):
            lines.append(f"# TYPE {fam} histogram")
            for i, le in enumerate(("0.1", "1.0", "+Inf")):
                value = "NaN" if self.mode == "nan" else str(-n * (i + 1))
                lines.append(f'{fam}_bucket{{le="{le}",model_name="m"}} {value}')
            lines.append(f'{fam}_count{{model_name="m"}} {n}')
            lines.append(f'{fam}_sum{{model_name="m"}} {n * 0.05}')
        lines.append('vllm:num_requests_running{model_name="m"} 1')
        return "\n".join(lines) + "\n"

    def __enter__(self) -> GarbageMetrics:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("mode", ["nan", "negative"])
def test_a_canary_on_garbage_histograms_cannot_judge_and_fails(
    db: str, tmp_path: Path, mode: str
) -> None:
    # before: every window counted as judged with 0 breaches, and the canary exited 0
    from collectors.breach_monitor import UNJUDGED_LIMIT

    with GarbageMetrics(mode) as page:
        proc = subprocess.run(
            _watch(
                db,
                *("--metrics", f"127.0.0.1:{page.port}", "--interval", "250ms"),
                *("--slo", "lenient", "--slo-window", "500ms", "--fail-on-breach"),
                *("--duration", "20s"),
            ),
            cwd=ROOT,
            env=_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == ExitCode.FAILED, proc.stderr
    assert "BREACH" not in proc.stdout
    lines = proc.stdout.splitlines()
    # one UNJUDGED line per window, naming the target and why; the canary stops at the limit
    assert len(lines) == UNJUDGED_LIMIT, proc.stdout
    target = f"http://127.0.0.1:{page.port}/metrics"
    why = "no buckets exported" if mode == "nan" else "negative or non-finite counts"
    for line in lines:
        assert line.startswith("UNJUDGED ") and f" UTC {target} P90 TTFT: {why}" in line, line
    judged = re.search(
        r"SLO 'lenient': (\d+) window\(s\) of \d target\(s\) judged, 0 breach\(es\); "
        r"(\d+) window\(s\) could not be judged",
        proc.stderr,
    )
    assert judged is not None, proc.stderr
    assert int(judged.group(2)) == UNJUDGED_LIMIT
    assert "a canary that cannot judge fails (exit 3)" in proc.stderr
