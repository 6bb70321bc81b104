"""``servescope quality`` over real loopback sockets: an "oracle" server written here (it looks
every prompt up in the bundled set and answers it correctly) as the reference, the real sim as
the candidate, and a DuckDB file under tmp_path as the store. Also ``store.quality_results``."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import cli
from collectors.quality_probe import COMPLETION_TEMPLATE, load_prompt_set
from sim.engine import EngineConfig
from sim.server import SimHandle, start_in_thread
from store.lifecycle import memory_store, open_store
from store.quality_results import FIGURE_COLUMNS, add_quality_run, quality_answers, quality_runs

ORACLE_MODEL = "oracle-1"


class _Oracle(BaseHTTPRequestHandler):
    answers: dict[str, str]  # prompt text → its first accepted answer
    fail: frozenset[str] = frozenset()  # prompt texts answered with HTTP 500
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._send(200, {"data": [{"id": ORACLE_MODEL, "owned_by": "servescope-oracle"}]})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/v1/chat/completions":
            prompt = body["messages"][-1]["content"]
        elif self.path == "/v1/completions":
            head, tail = COMPLETION_TEMPLATE.split("{prompt}")
            prompt = body["prompt"].removeprefix(head).removesuffix(tail)
        else:
            self._send(404, {"error": "not found"})
            return
        assert body["temperature"] == 0 and body["max_tokens"] == 32
        if prompt in self.fail:
            self._send(500, {"error": "oracle refuses"})
            return
        text = self.answers.get(prompt, "I do not know")
        if self.path == "/v1/chat/completions":
            choice: dict[str, Any] = {"message": {"role": "assistant", "content": text}}
        else:
            choice = {"text": " " + text}
        self._send(200, {"choices": [choice | {"index": 0, "finish_reason": "stop"}]})


def _serve(fail: frozenset[str] = frozenset()) -> tuple[ThreadingHTTPServer, threading.Thread]:
    handler = type(
        "Oracle",
        (_Oracle,),
        {"answers": {p.prompt: p.answers[0] for p in load_prompt_set().prompts}, "fail": fail},
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


@pytest.fixture
def oracle() -> Iterator[str]:
    server, thread = _serve()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.fixture
def sim() -> Iterator[SimHandle]:
    handle = start_in_thread(
        EngineConfig.from_names("H100-SXM-80GB", "llama-3.1-8b"), time_scale=20.0
    )
    try:
        yield handle
    finally:
        handle.stop()


def _db(tmp_path: Path) -> str:
    return f"duckdb:///{tmp_path / 'q.duckdb'}"


def _read(db: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    store = open_store(db)
    try:
        runs = quality_runs(store)
        answers = (
            quality_answers(store, runs["quality_id"].iloc[0]) if len(runs) else pd.DataFrame()
        )
        return runs, answers
    finally:
        store.dispose()


def test_oracle_reference_vs_sim_candidate(
    oracle: str, sim: SimHandle, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _db(tmp_path)
    code = cli.main(
        [
            "quality",
            "--reference", oracle,
            "--reference-precision", "fp16",
            "--candidate", sim.url + "/v1",
            "--candidate-precision", "int4",
            "--db", db,
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    # the printed report: both sides labelled, every category, overall, an honest verdict
    assert "reference  unknown framework · oracle-1 · fp16" in out
    assert "candidate  sim (GET /v1/models (owned_by)) · llama-3.1-8b · int4" in out
    for row in ("factual", "arithmetic", "instruction", "code", "overall"):
        assert f"\n{row}" in out
    verdict = next(line for line in out.splitlines() if line.startswith("verdict"))
    assert verdict.endswith("NOT equivalent"), verdict
    assert "candidate retains 0 %" in verdict  # the sim's text answers nothing

    runs, answers = _read(db)
    assert len(runs) == 1  # stored once
    run = runs.iloc[0]
    assert run["prompts"] == 80 and run["prompt_set"] == "quality-v1"
    assert len(run["prompt_set_sha256"]) == 64
    assert run["reference_framework"] == "unknown" and run["reference_model"] == ORACLE_MODEL
    assert run["candidate_framework"] == "sim" and run["candidate_model"] == "llama-3.1-8b"
    assert (run["reference_precision"], run["candidate_precision"]) == ("fp16", "int4")
    assert run["candidate_endpoint"] == sim.url  # the base, without /v1
    assert run["reference_accuracy"] == 1.0
    assert run["reference_accuracy_lo"] > 0.95  # Wilson 80/80: [0.954, 1]
    assert run["candidate_accuracy"] <= 0.05
    assert run["agreement"] <= 0.05
    assert run["similarity"] < 0.2
    assert run["retention"] <= 0.05 and run["retention_hi"] < 1.0
    assert run["verdict"] == verdict.removeprefix("verdict").strip()
    summary = json.loads(run["summary"])
    assert set(summary["categories"]) == {"factual", "arithmetic", "instruction", "code"}
    assert summary["api"] == "chat"

    assert len(answers) == 80
    assert answers["reference_correct"].all()
    assert answers["reference_error"].isna().all() and answers["candidate_error"].isna().all()
    assert answers["candidate_answer"].str.len().gt(0).all()  # the sim did answer, wrongly


def test_completions_api_limit_categories_no_store(
    oracle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _db(tmp_path)
    code = cli.main(
        [
            "quality", "--reference", oracle, "--candidate", oracle, "--api", "completions",
            "--category", "arithmetic", "code", "--limit", "6", "--no-store", "--db", db,
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert "\narithmetic     3" in out and "\ncode           3" in out
    assert "\nfactual" not in out
    assert "candidate retains 100 % of the reference's accuracy" in out
    assert "within noise" in out and "only 6 prompts" in out  # 6 prompts prove little
    assert "stored" not in out
    assert not (tmp_path / "q.duckdb").exists()


def test_failed_requests_are_counted_wrong_and_stored(
    oracle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prompts = load_prompt_set().prompts
    server, thread = _serve(fail=frozenset(p.prompt for p in prompts[:4]))
    flaky = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        code = cli.main(
            ["quality", "--reference", oracle, "--candidate", flaky, "--db", _db(tmp_path)]
        )
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "errors     reference 0, candidate 4" in out
    assert "4 candidate and 0 reference requests of 80 failed" in out
    runs, answers = _read(_db(tmp_path))
    assert runs.iloc[0]["candidate_accuracy"] == pytest.approx(76 / 80)
    failed = answers[answers["candidate_error"].notna()]
    assert sorted(failed["prompt_id"]) == sorted(p.id for p in prompts[:4])
    assert failed["candidate_error"].str.startswith("HTTP 500").all()
    assert not failed["candidate_correct"].any() and failed["candidate_answer"].isna().all()


def test_unreachable_candidate_exits_2_and_stores_nothing(
    oracle: str, tmp_path: Path, free_port: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _db(tmp_path)
    dead = f"http://127.0.0.1:{free_port()}"
    code = cli.main(["quality", "--reference", oracle, "--candidate", dead, "--db", db])
    err = capsys.readouterr().err
    assert code == 2
    first = err.splitlines()[0]
    assert first.startswith(f"servescope: error: candidate: cannot reach {dead}"), err
    runs, _ = _read(db)
    assert runs.empty


def test_every_request_failing_is_an_endpoint_error(
    oracle: str, sim: SimHandle, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _db(tmp_path)
    code = cli.main(
        [
            "quality", "--reference", oracle, "--candidate", sim.url,
            "--candidate-model", "no-such-model", "--limit", "4", "--db", db,
        ]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert "candidate" in err and "all 4 requests failed" in err and "HTTP 404" in err
    runs, _ = _read(db)
    assert runs.empty


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--category", "poetry"], "unknown --category poetry; known: factual, arithmetic"),
        (["--limit", "0"], "--limit 0: give a whole number ≥ 1"),
        (["--timeout", "0"], "--timeout 0"),
    ],
)
def test_bad_input_exits_2(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = "http://127.0.0.1:9"
    code = cli.main(
        ["quality", "--reference", dead, "--candidate", dead, *args, "--db", _db(tmp_path)]
    )
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "q.duckdb").exists()


# --- store.quality_results ---------------------------------------------------------------------


def test_store_round_trip_and_replace() -> None:
    store = memory_store()
    header: dict[str, Any] = {
        "quality_id": "q-1",
        "prompt_set": "quality-v1",
        "started_at": 100.0,
        "prompts": 2,
        "candidate_framework": "vllm",
        "candidate_precision": "int4",
        "summary": {
            "overall": {"reference_accuracy": 0.0, "retention": None, "retention_lo": None},
            "verdict": "undefined",
        },
    }
    answers: list[dict[str, Any]] = [
        {"prompt_id": "a", "category": "code", "reference_correct": False, "similarity": 0.5},
        {"prompt_id": "b", "category": "code", "candidate_error": "timeout"},
    ]
    add_quality_run(store, header, answers)
    add_quality_run(store, header | {"prompts": 1}, answers[:1])  # same id: replaced
    add_quality_run(store, header | {"quality_id": "q-2", "started_at": 200.0}, [])
    runs = quality_runs(store)
    assert runs["quality_id"].tolist() == ["q-2", "q-1"]  # newest first
    assert set(FIGURE_COLUMNS) <= set(runs.columns)
    one = runs.set_index("quality_id").loc["q-1"]
    assert one["prompts"] == 1 and one["verdict"] == "undefined"
    assert one["reference_accuracy"] == 0.0 and pd.isna(one["retention"])
    assert pd.isna(one["agreement"])  # absent from the summary
    rows = quality_answers(store, "q-1")
    assert rows["prompt_id"].tolist() == ["a"] and rows["quality_id"].tolist() == ["q-1"]
    assert quality_answers(store, "nope").empty
    assert quality_runs(memory_store()).empty


def test_store_refuses_unknown_columns() -> None:
    from errors import StoreError

    store = memory_store()
    with pytest.raises(StoreError, match="quality_id"):
        add_quality_run(store, {}, [])
    with pytest.raises(StoreError, match="colour"):
        add_quality_run(store, {"quality_id": "q", "colour": "red"}, [])
    with pytest.raises(StoreError, match="prompt_id"):
        add_quality_run(store, {"quality_id": "q"}, [{"category": "code"}])
    assert quality_runs(store).empty
