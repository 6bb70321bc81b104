"""``servescope health`` end to end, in process (``cli.main``): a loopback HTTP server plays the
GitHub REST API (``--api-url``), the store is a real DuckDB file named by SERVESCOPE_DB; one
framework whose repository is missing (404) fails and the others are still stored (exit 1).
The store's project_health reads and writes also run on PostgreSQL (``store_url``)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import pandas as pd
import pytest

import cli
from errors import ExitCode
from store import catalog
from store.db import Store
from store.lifecycle import open_store
from store.project_health import add_project_health, latest_project_health

TOKEN = "ghp_INTEGRATIONsecret987"
TOKEN_ENV = "SERVESCOPE_TEST_HEALTH_TOKEN"


def ts(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _rel(tag: str, when: str, prerelease: bool = False) -> dict[str, Any]:
    return {"tag_name": tag, "published_at": when, "draft": False, "prerelease": prerelease}


def _issue(number: int, created: str, comments: int) -> dict[str, Any]:
    return {"number": number, "created_at": created, "comments": comments, "user": {"login": "u"}}


def _comment(created: str, association: str) -> dict[str, Any]:
    return {"created_at": created, "user": {"login": "m"}, "author_association": association}


# Releases are recent relative to any test date (the clock is the real one): 1, 3 and 7 days ago
# give gaps of 2 and 4 days → median 3; the issue answers take 1 h and 5 h → median 3 h.
def _days_ago(days: float) -> str:
    return datetime.fromtimestamp(_NOW - days * 86_400.0).astimezone().isoformat()


_NOW = datetime.now().timestamp()

ROUTES: dict[str, Any] = {
    "/repos/acme/alpha/releases": [
        _rel("a-1.2", _days_ago(1)),
        _rel("a-1.1", _days_ago(3), prerelease=True),
        _rel("a-1.0", _days_ago(7)),
    ],
    "/repos/acme/alpha/issues": [
        _issue(12, _days_ago(2), 2),
        {"number": 11, "created_at": _days_ago(2), "comments": 1, "pull_request": {}},
        _issue(10, _days_ago(4), 1),
        _issue(9, _days_ago(5), 0),
    ],
    "/repos/acme/alpha/issues/12/comments": [
        _comment(_days_ago(2 - 1 / 24), "MEMBER"),  # 1 h
        _comment(_days_ago(1), "OWNER"),
    ],
    "/repos/acme/alpha/issues/10/comments": [_comment(_days_ago(4 - 5 / 24), "COLLABORATOR")],
    "/repos/acme/beta/releases": [_rel("b-2.0", _days_ago(30))],
    "/repos/acme/beta/issues": [],
}


class FakeGitHub(BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, dict[str, list[str]], str | None]]] = []

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        path = url.path.removeprefix("/api")
        FakeGitHub.seen.append((path, parse_qs(url.query), self.headers.get("Authorization")))
        body = ROUTES.get(path)
        status = 200 if body is not None else 404
        data = json.dumps(body if body is not None else {"message": "Not Found"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def github_api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeGitHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    FakeGitHub.seen = []
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/api"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _catalog(db_url: str, frameworks: dict[str, str]) -> None:
    store = open_store(db_url)
    try:
        for name, repo in frameworks.items():
            catalog.save_user_entry(store, "frameworks", {"name": name, "repo": repo})
    finally:
        store.dispose()


def _latest(db_url: str) -> Any:
    store = open_store(db_url)
    try:
        return latest_project_health(store)
    finally:
        store.dispose()


def test_health_stores_the_frameworks_it_could_fetch(
    github_api: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db_url = f"duckdb:///{tmp_path / 'health.duckdb'}"
    _catalog(db_url, {"alpha": "acme/alpha", "beta": "acme/beta", "gone": "acme/gone"})
    monkeypatch.setenv("SERVESCOPE_DB", db_url)
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    args = ["health", "alpha", "gone", "beta", "--api-url", github_api, "--token-env", TOKEN_ENV]
    code = cli.main([*args, "--issues", "3"])
    out, err = capsys.readouterr()
    assert code == ExitCode.PARTIAL

    # what was asked of the API, with the token as a header
    paths = [p for p, _, _ in FakeGitHub.seen]
    assert paths == [
        "/repos/acme/alpha/releases",
        "/repos/acme/alpha/issues",
        "/repos/acme/alpha/issues/12/comments",
        "/repos/acme/alpha/issues/10/comments",
        "/repos/acme/gone/releases",
        "/repos/acme/beta/releases",
        "/repos/acme/beta/issues",
    ]
    assert FakeGitHub.seen[1][1] == {
        "state": ["all"],
        "sort": ["created"],
        "direction": ["desc"],
        "per_page": ["100"],
    }
    assert {auth for _, _, auth in FakeGitHub.seen} == {f"Bearer {TOKEN}"}

    # what was printed: a table row per stored framework, the failure on stderr
    assert TOKEN not in out + err
    assert "gone: GitHub repository 'acme/gone' not found" in err
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["framework", "releases/12mo"]
    alpha = next(line for line in lines if line.startswith("alpha "))
    assert alpha.split()[1:4] == ["3", "3.0", "3.0"]
    assert "3 (1 no answer)" in alpha and "a-1.2 (" in alpha
    beta = next(line for line in lines if line.startswith("beta "))
    assert beta.split()[1:5] == ["1", "-", "-", "0"]
    assert not any(line.startswith("gone ") for line in lines)
    assert f"stored 2 of 3 framework(s) in {db_url}" in out

    # what was stored
    df = _latest(db_url)
    assert df["framework"].tolist() == ["alpha", "beta"]
    rows = {r["framework"]: r for r in df.to_dict("records")}
    a = rows["alpha"]
    assert a["repo"] == "acme/alpha" and a["releases_12m"] == 3
    assert a["median_days_between_releases"] == pytest.approx(3.0, abs=1e-6)
    assert a["median_first_response_h"] == pytest.approx(3.0, abs=1e-6)
    assert a["issues_sampled"] == 3 and a["latest_release"] == "a-1.2"
    assert a["latest_release_at"] == pytest.approx(_NOW - 86_400.0, abs=1.0)
    detail = json.loads(a["detail"])
    assert detail["issues_unanswered"] == 1 and detail["prereleases_12m"] == 1
    assert TOKEN not in a["detail"]
    b = rows["beta"]
    assert b["releases_12m"] == 1 and pd.isna(b["median_days_between_releases"])
    assert b["issues_sampled"] == 0 and pd.isna(b["median_first_response_h"])

    # a second fetch adds rows; the latest one is read
    assert cli.main([*args[:2], "--api-url", github_api, "--token-env", TOKEN_ENV]) == 0
    assert _latest(db_url)["fetched_at"].iloc[0] > a["fetched_at"]


def test_health_defaults_to_every_framework_with_a_repo(
    github_api: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db_url = f"duckdb:///{tmp_path / 'health.duckdb'}"
    _catalog(db_url, {"alpha": "acme/alpha", "norepo": ""})
    code = cli.main(["health", "--db", db_url, "--api-url", github_api, "--token-env", TOKEN_ENV])
    out, err = capsys.readouterr()
    assert code == ExitCode.PARTIAL  # the seeded frameworks' repositories are not served here
    asked = {p.split("/")[3] for p, _, _ in FakeGitHub.seen if p.endswith("/releases")}
    assert "alpha" in asked and "vllm" in asked and "norepo" not in asked
    assert "norepo" not in out + err
    assert _latest(db_url)["framework"].tolist() == ["alpha"]
    assert cli.main(["health", "norepo", "--db", db_url, "--api-url", github_api]) == 2
    assert "no GitHub repo" in capsys.readouterr().err


def test_project_health_rows_on_both_dialects(store_url: str) -> None:
    store: Store = open_store(store_url)
    try:
        base = {
            "repo": "acme/alpha",
            "releases_12m": 3,
            "median_days_between_releases": None,
            "median_first_response_h": 2.5,
            "issues_sampled": 4,
            "latest_release": "v1",
            "latest_release_at": 1_700_000_000.0,
            "detail": {"issues_unanswered": 1},
        }
        add_project_health(
            store,
            [
                base | {"framework": "alpha", "fetched_at": 1_700_000_100.0},
                base | {"framework": "alpha", "fetched_at": 1_700_000_200.0, "releases_12m": 4},
                base | {"framework": "beta", "fetched_at": 1_700_000_050.0, "repo": "acme/b"},
            ],
        )
        df = latest_project_health(store)
    finally:
        store.dispose()
    assert df["framework"].tolist() == ["alpha", "beta"]
    assert df["releases_12m"].tolist() == [4, 3]
    assert df["fetched_at"].tolist() == [1_700_000_200.0, 1_700_000_050.0]
    assert df["median_days_between_releases"].isna().all()
    assert json.loads(df["detail"].iloc[1]) == {"issues_unanswered": 1}
