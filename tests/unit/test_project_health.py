"""Project health: the pure figures on hand-computed cases (analysis.project_health), the GitHub
collector against ``httpx.MockTransport`` (URLs, parameters, the token header, every failure's
one-line message without the token), the store's writes and latest reads, and the command's
input errors and exit codes. No network."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

import cli
from analysis.project_health import (
    Comment,
    IssueSample,
    Release,
    first_maintainer_response,
    health_figures,
    is_maintainer,
    median_gap_days,
)
from collectors.project_health import (
    GitHubUnavailable,
    fetch_project_health,
    github_client,
)
from errors import CollectorError, ExitCode, InputError
from services.commands import health as health_command
from store import catalog
from store.lifecycle import memory_store, open_store
from store.project_health import COLUMNS, add_project_health, latest_project_health

TOKEN = "ghp_SECRETtoken12345"


def ts(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


NOW = ts("2025-01-01T00:00:00Z")  # the window is (2024-01-02T00:00Z, 2025-01-01T00:00Z]
H = 3600.0


# --- the pure figures ---------------------------------------------------------------------------


def test_releases_in_the_last_12_months_and_the_median_gap() -> None:
    releases = [
        Release("v0.9", ts("2024-01-01T00:00:00Z")),  # 366 days before NOW: outside
        Release("v1.0", ts("2024-01-10T00:00:00Z")),
        Release("v1.1rc1", ts("2024-02-01T00:00:00Z"), prerelease=True),  # counts
        Release("v1.1", ts("2024-02-09T00:00:00Z")),
        Release("v2.0-draft", None, draft=True),
        Release("v2.0-draft-dated", ts("2024-03-01T00:00:00Z"), draft=True),
        Release("v1.2", ts("2024-04-09T00:00:00Z")),
        Release("v9", ts("2025-02-01T00:00:00Z")),  # after NOW (clock skew): not counted
    ]
    f = health_figures(releases, [], now=NOW)
    assert f.releases_12m == 4  # v1.0, v1.1rc1, v1.1, v1.2
    assert f.prereleases_12m == 1
    # gaps: Jan 10 → Feb 1 = 22 d, Feb 1 → Feb 9 = 8 d, Feb 9 → Apr 9 = 29 + 31 = 60 d (2024 is
    # a leap year); median of (8, 22, 60) = 22
    assert f.median_days_between_releases == pytest.approx(22.0)
    assert (f.latest_release, f.latest_release_at) == ("v1.2", ts("2024-04-09T00:00:00Z"))
    assert f.issues_sampled == 0 and f.median_first_response_h is None


def test_median_gap_of_an_even_number_of_gaps_and_too_few_releases() -> None:
    day = 86_400.0
    # gaps 2, 4, 8, 16 days (given out of order) → median (4 + 8) / 2 = 6
    assert median_gap_days([30 * day, 0.0, 2 * day, 14 * day, 6 * day]) == pytest.approx(6.0)
    assert median_gap_days([5 * day]) is None
    assert median_gap_days([]) is None
    one = health_figures([Release("v1", NOW - 10 * day)], [], now=NOW)
    assert one.releases_12m == 1 and one.median_days_between_releases is None
    assert one.latest_release == "v1"
    # a release older than 12 months is still the latest release, but not counted
    old = health_figures([Release("v0", NOW - 400 * day)], [], now=NOW)
    assert old.releases_12m == 0 and old.latest_release == "v0"
    none = health_figures([], [], now=NOW)
    assert none.latest_release is None and none.latest_release_at is None


def test_median_first_response_counts_the_unanswered() -> None:
    t = ts("2024-12-01T00:00:00Z")
    issues = [
        IssueSample(1, t, t + 2 * H),
        IssueSample(2, t, t + 10 * H),
        IssueSample(3, t, None),  # no maintainer answer yet
        IssueSample(4, t, t + 0.5 * H),
    ]
    f = health_figures([], issues, now=NOW)
    assert f.median_first_response_h == pytest.approx(2.0)  # median of 0.5, 2, 10
    assert (f.issues_sampled, f.issues_answered, f.issues_unanswered) == (4, 3, 1)
    issues.append(IssueSample(5, t, t + 4 * H))  # 0.5, 2, 4, 10 → (2 + 4) / 2
    assert health_figures([], issues, now=NOW).median_first_response_h == pytest.approx(3.0)
    nobody = health_figures([], [IssueSample(6, t, None)], now=NOW)
    assert nobody.median_first_response_h is None and nobody.issues_unanswered == 1


def test_first_maintainer_response() -> None:
    comments = [
        Comment(100.0, "alice", "CONTRIBUTOR"),
        Comment(150.0, "bob", "NONE"),
        Comment(160.0, "opener", "MEMBER"),  # the issue's own author: not an answer
        Comment(400.0, "carol", "COLLABORATOR"),
        Comment(300.0, "dave", "OWNER"),  # out of order: the earliest maintainer comment wins
    ]
    assert first_maintainer_response(comments, issue_author="opener") == 300.0
    assert first_maintainer_response(comments) == 160.0
    assert first_maintainer_response(comments[:2]) is None
    assert is_maintainer("member") and is_maintainer("OWNER") and is_maintainer("COLLABORATOR")
    assert not is_maintainer("CONTRIBUTOR") and not is_maintainer(None)


# --- the collector against a mock GitHub -------------------------------------------------------


def _release_json(tag: str, when: str | None, **extra: Any) -> dict[str, Any]:
    return {"tag_name": tag, "name": tag, "published_at": when, "draft": False} | extra


def _issue_json(number: int, created: str, comments: int, **extra: Any) -> dict[str, Any]:
    return {
        "number": number,
        "created_at": created,
        "comments": comments,
        "user": {"login": f"user{number}"},
    } | extra


def _comment_json(created: str, login: str, association: str) -> dict[str, Any]:
    return {"created_at": created, "user": {"login": login}, "author_association": association}


def github_routes(repo: str = "acme/engine") -> dict[str, Any]:
    """GitHub-shaped answers for one repository."""
    return {
        f"/repos/{repo}/releases": [
            _release_json("v1.2", "2024-04-09T00:00:00Z"),
            _release_json("v1.1", "2024-02-09T00:00:00Z"),
            _release_json("v1.1rc1", "2024-02-01T00:00:00Z", prerelease=True),
            _release_json("v2.0", None, draft=True),
            _release_json("v1.0", "2024-01-10T00:00:00Z"),
        ],
        f"/repos/{repo}/issues": [
            _issue_json(40, "2024-12-20T00:00:00Z", 0),  # no comments: not fetched
            _issue_json(39, "2024-12-19T00:00:00Z", 3, pull_request={"url": "…"}),  # a PR
            _issue_json(38, "2024-12-18T00:00:00Z", 2),
            _issue_json(37, "2024-12-17T00:00:00Z", 3),
            _issue_json(36, "2024-12-16T00:00:00Z", 1),  # beyond issues=3: not sampled
        ],
        f"/repos/{repo}/issues/38/comments": [
            _comment_json("2024-12-18T01:00:00Z", "someone", "NONE"),
            _comment_json("2024-12-18T06:00:00Z", "maint", "MEMBER"),  # 6 h
        ],
        f"/repos/{repo}/issues/37/comments": [
            _comment_json("2024-12-17T00:30:00Z", "user37", "OWNER"),  # the opener himself
            _comment_json("2024-12-17T02:00:00Z", "boss", "OWNER"),  # 2 h
            _comment_json("2024-12-17T03:00:00Z", "maint", "COLLABORATOR"),
        ],
    }


def mock_transport(
    routes: dict[str, Any], seen: list[httpx.Request], prefix: str = ""
) -> Callable[[httpx.Request], httpx.Response]:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = routes.get(request.url.path.removeprefix(prefix))
        if body is None:
            return httpx.Response(404, json={"message": "Not Found"})
        return httpx.Response(200, json=body)

    return handler


def test_fetch_sends_the_requests_and_computes_the_figures() -> None:
    seen: list[httpx.Request] = []
    transport = httpx.MockTransport(mock_transport(github_routes(), seen))
    with github_client(token=TOKEN, transport=transport) as client:
        result = fetch_project_health("acme/engine", client=client, now=NOW, issues=3)
    assert [r.url.path for r in seen] == [
        "/repos/acme/engine/releases",
        "/repos/acme/engine/issues",
        "/repos/acme/engine/issues/38/comments",
        "/repos/acme/engine/issues/37/comments",
    ]
    assert all(r.url.host == "api.github.com" and r.url.scheme == "https" for r in seen)
    assert dict(seen[0].url.params) == {"per_page": "100"}
    assert dict(seen[1].url.params) == {
        "state": "all",
        "sort": "created",
        "direction": "desc",
        "per_page": "100",
    }
    assert dict(seen[2].url.params) == {"per_page": "100"}
    assert all(r.headers["Authorization"] == f"Bearer {TOKEN}" for r in seen)
    assert all(r.headers["Accept"] == "application/vnd.github+json" for r in seen)
    f = result.figures
    assert (f.releases_12m, f.prereleases_12m) == (4, 1)
    assert f.median_days_between_releases == pytest.approx(22.0)
    assert (f.latest_release, f.latest_release_at) == ("v1.2", ts("2024-04-09T00:00:00Z"))
    # #40: none yet; #38: 6 h; #37: 2 h (the opener's own comment is not an answer) → median 4
    assert (f.issues_sampled, f.issues_unanswered) == (3, 1)
    assert f.median_first_response_h == pytest.approx(4.0)
    row = result.row("engine")
    assert row["framework"] == "engine" and row["repo"] == "acme/engine"
    assert row["fetched_at"] == NOW and row["issues_sampled"] == 3
    detail = row["detail"]
    assert detail["releases_12m"] == ["v1.0", "v1.1rc1", "v1.1", "v1.2"]
    assert detail["drafts_skipped"] == 1 and detail["prereleases_counted"] is True
    assert [i["number"] for i in detail["issues"]] == [40, 38, 37]
    assert [i["first_response_h"] for i in detail["issues"]] == [None, 6.0, 2.0]
    assert TOKEN not in json.dumps(detail)


def test_the_base_url_comes_from_the_client() -> None:
    seen: list[httpx.Request] = []
    transport = httpx.MockTransport(mock_transport(github_routes(), seen, prefix="/api/v3"))
    with github_client(api_url="http://ghe.local/api/v3/", transport=transport) as client:
        fetch_project_health("acme/engine", client=client, now=NOW, issues=1)
        assert seen[0].url == "http://ghe.local/api/v3/repos/acme/engine/releases?per_page=100"
        with pytest.raises(CollectorError) as caught:
            fetch_project_health("acme/gone", client=client, now=NOW)
    assert "(http://ghe.local/api/v3/repos/acme/gone/releases: HTTP 404)" in str(caught.value)
    assert "Authorization" not in seen[0].headers  # no token: anonymous


def _failing(response: httpx.Response | Exception) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        if isinstance(response, Exception):
            raise response
        return response

    return httpx.MockTransport(handler)


def _fetch_error(transport: httpx.MockTransport, token: str | None = TOKEN) -> CollectorError:
    with (
        github_client(token=token, transport=transport) as client,
        pytest.raises(CollectorError) as caught,
    ):
        fetch_project_health("acme/engine", client=client, now=NOW)
    text = str(caught.value)
    assert "\n" not in text
    if token:
        assert token not in text
    return caught.value


def test_rate_limited_says_when_it_resets_and_to_set_a_token() -> None:
    headers = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(NOW + 1800))}
    body = {"message": "API rate limit exceeded for 203.0.113.9."}
    exc = _fetch_error(_failing(httpx.Response(403, headers=headers, json=body)), token=None)
    assert isinstance(exc, GitHubUnavailable)
    assert "rate limit" in exc.message
    assert "resets at 2025-01-01 00:30 UTC, in 30 min" in exc.message
    assert "--token-env" in exc.message
    with_token = _fetch_error(_failing(httpx.Response(429, headers=headers, json=body)))
    assert isinstance(with_token, GitHubUnavailable) and "in 30 min" in with_token.message
    # a 403 that is not a rate limit is an ordinary HTTP error
    other = _fetch_error(_failing(httpx.Response(403, json={"message": "Resource forbidden"})))
    assert not isinstance(other, GitHubUnavailable)
    assert "HTTP 403 Resource forbidden" in other.message


def test_not_found_names_the_repository() -> None:
    exc = _fetch_error(_failing(httpx.Response(404, json={"message": "Not Found"})))
    assert not isinstance(exc, GitHubUnavailable)
    assert "GitHub repository 'acme/engine' not found" in exc.message
    assert exc.hint and "catalog" in exc.hint


def test_offline_and_timeouts_say_health_needs_the_network() -> None:
    dns = httpx.ConnectError("[Errno -3] Temporary failure in name resolution")
    exc = _fetch_error(_failing(dns))
    assert isinstance(exc, GitHubUnavailable)
    assert exc.message == (
        "cannot reach api.github.com: [Errno -3] Temporary failure in name resolution; "
        "health needs network access"
    )
    slow = _fetch_error(_failing(httpx.ReadTimeout("timed out")))
    assert isinstance(slow, GitHubUnavailable)
    assert "api.github.com did not answer in time" in slow.message


def test_other_errors_carry_the_status_and_never_the_token() -> None:
    echo = {"message": f"upstream said: Authorization: Bearer {TOKEN}"}
    exc = _fetch_error(_failing(httpx.Response(502, json=echo)))
    assert "HTTP 502" in exc.message and TOKEN not in str(exc)
    refused = _fetch_error(_failing(httpx.Response(401, json={"message": "Bad credentials"})))
    assert isinstance(refused, GitHubUnavailable) and "refused the token" in refused.message
    html = _fetch_error(_failing(httpx.Response(200, text="<html>captive portal</html>")))
    assert "not JSON" in html.message
    dns = httpx.ConnectError(f"proxy rejected Bearer {TOKEN}")
    assert TOKEN not in str(_fetch_error(_failing(dns)))


def test_bad_arguments_are_input_errors() -> None:
    with github_client(transport=_failing(httpx.Response(200, json=[]))) as client:
        with pytest.raises(InputError, match="owner/name"):
            fetch_project_health("not a repo", client=client, now=NOW)
        with pytest.raises(InputError, match="1 to 100"):
            fetch_project_health("acme/engine", client=client, now=NOW, issues=0)


# --- the store --------------------------------------------------------------------------------


def _row(framework: str, fetched_at: float, releases: int) -> dict[str, Any]:
    return {
        "framework": framework,
        "fetched_at": fetched_at,
        "repo": f"acme/{framework}",
        "releases_12m": releases,
        "median_days_between_releases": 14.5,
        "median_first_response_h": None,
        "issues_sampled": 15,
        "latest_release": "v1",
        "latest_release_at": NOW - 86_400.0,
        "detail": {"issues_unanswered": 15},
    }


def test_store_keeps_every_fetch_and_reads_the_latest_per_framework() -> None:
    store = memory_store()
    assert latest_project_health(store).empty
    assert list(latest_project_health(store).columns) == list(COLUMNS)
    assert add_project_health(store, [_row("alpha", NOW - 100, 3), _row("beta", NOW - 50, 7)]) == 2
    assert add_project_health(store, [_row("alpha", NOW, 4)]) == 1
    assert add_project_health(store, [_row("alpha", NOW, 5)]) == 1  # same fetch: replaced
    df = latest_project_health(store)
    assert list(df.columns) == list(COLUMNS)
    assert df["framework"].tolist() == ["alpha", "beta"]
    assert df["releases_12m"].tolist() == [5, 7]
    assert df["fetched_at"].tolist() == [NOW, NOW - 50]
    assert json.loads(df["detail"].iloc[0]) == {"issues_unanswered": 15}
    assert int(store.read_df("SELECT count(*) AS n FROM project_health")["n"].iloc[0]) == 3


# --- the command ------------------------------------------------------------------------------


def test_unknown_framework_lists_the_known_ones(tmp_path: Path) -> None:
    db = f"duckdb:///{tmp_path / 's.duckdb'}"
    with pytest.raises(InputError) as caught:
        health_command.health(["nope"], db=db, env={}, transport=_failing(AssertionError()))
    assert "unknown framework(s) 'nope'; known: " in caught.value.message
    assert "vllm" in caught.value.message
    assert cli.main(["health", "nope", "--db", db]) == ExitCode.ERROR
    assert cli.main(["health", "--issues", "0", "--db", db]) == ExitCode.ERROR
    assert cli.main(["health", "--api-url", "ftp://x", "--db", db]) == ExitCode.ERROR


def test_offline_stops_at_the_first_framework_and_exits_error(tmp_path: Path) -> None:
    db = f"duckdb:///{tmp_path / 's.duckdb'}"
    store = open_store(db)
    catalog.save_user_entry(store, "frameworks", {"name": "alpha", "repo": "acme/alpha"})
    store.dispose()
    seen: list[httpx.Request] = []

    def offline(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        raise httpx.ConnectError("[Errno -2] Name or service not known")

    out, err = io.StringIO(), io.StringIO()
    code = health_command.health(
        db=db,
        env={"GITHUB_TOKEN": TOKEN},
        transport=httpx.MockTransport(offline),
        out=out,
        err=err,
    )
    assert code == ExitCode.ERROR
    assert len(seen) == 1  # the other frameworks are skipped, not tried
    assert "alpha: cannot reach api.github.com" in err.getvalue()
    assert "skipped " in err.getvalue() and "vllm" in err.getvalue()
    assert TOKEN not in out.getvalue() + err.getvalue()
    assert "stored 0 of " in out.getvalue()
    store = open_store(db)
    assert latest_project_health(store).empty
    store.dispose()


def test_one_repo_not_found_is_partial(tmp_path: Path) -> None:
    db = f"duckdb:///{tmp_path / 's.duckdb'}"
    store = open_store(db)
    catalog.save_user_entry(store, "frameworks", {"name": "engine", "repo": "acme/engine"})
    store.dispose()
    seen: list[httpx.Request] = []
    out, err = io.StringIO(), io.StringIO()
    code = health_command.health(
        ["vllm", "engine"],
        db=db,
        env={},
        clock=lambda: NOW,
        transport=httpx.MockTransport(mock_transport(github_routes(), seen)),
        issues=3,
        out=out,
        err=err,
    )
    assert code == ExitCode.PARTIAL
    assert "vllm: GitHub repository 'vllm-project/vllm' not found" in err.getvalue()
    assert "$GITHUB_TOKEN is not set" in err.getvalue()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("framework")
    engine = next(line for line in lines if line.startswith("engine"))
    assert engine.split()[1:4] == ["4", "22.0", "4.0"]
    assert "3 (1 no answer)" in engine and "v1.2 (2024-04-09)" in engine
    store = open_store(db)
    df = latest_project_health(store)
    store.dispose()
    assert df["framework"].tolist() == ["engine"]
