"""A framework's project health from the GitHub REST API: its releases, and how soon its
maintainers answered its newest issues (the figures: ``analysis.project_health``).

Requests (the base URL is the ``httpx.Client``'s: https://api.github.com, or ``--api-url``):

- ``GET /repos/{repo}/releases?per_page=100`` — the newest 100 releases (one page: a project
  shipping more than 100 releases a year is counted as 100, and ``detail`` says the page was full);
- ``GET /repos/{repo}/issues?state=all&sort=created&direction=desc&per_page=100`` — the newest
  issues, pull requests (items with ``pull_request``) skipped, the first ``issues`` kept;
- ``GET /repos/{repo}/issues/{number}/comments?per_page=100`` for each kept issue that has
  comments (an issue with ``comments: 0`` has no response yet: no request).

The token (``Authorization: Bearer …``) is set on the client by :func:`github_client`; it is
never logged, stored, or part of a message (every message goes through ``collectors.redact``).
httpx errors and GitHub's error answers become ``CollectorError`` here, once, in one line;
:class:`GitHubUnavailable` (a ``CollectorError``) marks those after which every other repository
would fail the same way (offline, rate-limited, a refused token).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from analysis.project_health import (
    MAINTAINER_ASSOCIATIONS,
    Comment,
    HealthFigures,
    IssueSample,
    Release,
    first_maintainer_response,
    health_figures,
    releases_in_window,
)
from collectors import http_client
from collectors.redact import redact
from errors import CollectorError, InputError

DEFAULT_API_URL = "https://api.github.com"
DEFAULT_TOKEN_ENV = "GITHUB_TOKEN"
#: seconds for each request (connect, read, write, pool)
TIMEOUT_S = 20.0
PER_PAGE = 100
MAX_ISSUES = 100
_REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$")


class GitHubUnavailable(CollectorError):
    """GitHub cannot be used from here now (offline, rate-limited, token refused): every other
    repository would fail the same way."""


@dataclass(frozen=True)
class ProjectHealth:
    """One repository's figures at ``fetched_at``, with what was counted (``detail``)."""

    repo: str
    fetched_at: float
    figures: HealthFigures
    detail: dict[str, Any] = field(default_factory=dict)

    def row(self, framework: str) -> dict[str, Any]:
        """The ``project_health`` row of ``framework`` (``detail`` stays a dict here)."""
        f = self.figures
        return {
            "framework": framework,
            "fetched_at": self.fetched_at,
            "repo": self.repo,
            "releases_12m": f.releases_12m,
            "median_days_between_releases": f.median_days_between_releases,
            "median_first_response_h": f.median_first_response_h,
            "issues_sampled": f.issues_sampled,
            "latest_release": f.latest_release,
            "latest_release_at": f.latest_release_at,
            "detail": self.detail,
        }


def github_client(
    *,
    api_url: str = DEFAULT_API_URL,
    token: str | None = None,
    timeout_s: float = TIMEOUT_S,
    transport: httpx.BaseTransport | None = None,
) -> httpx.Client:
    """An ``httpx.Client`` for the GitHub REST API at ``api_url``, with ``token`` (if any) as a
    Bearer header. Redirects are followed (a renamed repository answers 301)."""
    headers = {
        "Accept": "application/vnd.github+json",
        "X-GitHub-Api-Version": "2022-11-28",
        "User-Agent": "servescope-health",
    }
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return http_client.sync_client(
        timeout_s,
        base_url=api_url.rstrip("/"),
        headers=headers,
        transport=transport,
        follow_redirects=True,
    )


def check_repo(repo: str) -> str:
    """``repo`` if it reads as GitHub's ``owner/name``; else an InputError."""
    if not _REPO_RE.match(repo or ""):
        raise InputError(f"{repo!r} is not a GitHub repository name (owner/name)")
    return repo


def fetch_project_health(
    repo: str, *, client: httpx.Client, now: float, issues: int = 15
) -> ProjectHealth:
    """Fetch ``repo``'s releases and its newest ``issues`` issues with their comments and
    compute the figures at ``now`` (seconds since the epoch). Raises CollectorError (one line,
    no credentials) when GitHub cannot answer."""
    check_repo(repo)
    if not 1 <= issues <= MAX_ISSUES:
        raise InputError(f"the issue sample must be 1 to {MAX_ISSUES} issues, got {issues}")
    api = _Api(client, repo, now)
    raw_releases = api.get_list(f"/repos/{repo}/releases", {"per_page": PER_PAGE})
    releases = [_release(item) for item in raw_releases if isinstance(item, dict)]
    raw_issues = api.get_list(
        f"/repos/{repo}/issues",
        {
            "state": "all",
            "sort": "created",
            "direction": "desc",
            "per_page": PER_PAGE,
        },
    )
    picked = [i for i in raw_issues if isinstance(i, dict) and "pull_request" not in i][:issues]
    samples: list[IssueSample] = []
    for item in picked:
        number = int(item.get("number") or 0)
        created = _instant(item.get("created_at"), f"issue #{number} created_at")
        if created is None:
            continue
        first: float | None = None
        if int(item.get("comments") or 0) > 0:
            comments = api.get_list(
                f"/repos/{repo}/issues/{number}/comments", {"per_page": PER_PAGE}
            )
            first = first_maintainer_response(
                (c for c in (_comment(c) for c in comments if isinstance(c, dict)) if c),
                issue_author=_login(item),
            )
        samples.append(IssueSample(number=number, created_at=created, first_response_at=first))
    figures = health_figures(releases, samples, now=now)
    window = releases_in_window(releases, now=now)
    detail: dict[str, Any] = {
        "releases_listed": len(raw_releases),
        "releases_page_full": len(raw_releases) >= PER_PAGE,
        "drafts_skipped": sum(1 for r in releases if r.draft),
        "releases_12m": [r.tag for r in window],
        "prereleases_12m": figures.prereleases_12m,
        "prereleases_counted": True,
        "issues_requested": issues,
        "issues_sampled": figures.issues_sampled,
        "issues_unanswered": figures.issues_unanswered,
        "issues": [
            {
                "number": s.number,
                "created_at": s.created_at,
                "first_response_h": None
                if s.first_response_at is None
                else round((s.first_response_at - s.created_at) / 3600.0, 3),
            }
            for s in samples
        ],
        "maintainers": sorted(MAINTAINER_ASSOCIATIONS),
    }
    return ProjectHealth(repo=repo, fetched_at=now, figures=figures, detail=detail)


# --- the HTTP seam ------------------------------------------------------------------------------


class _Api:
    """GET JSON from the client's base URL; every failure becomes one CollectorError line."""

    def __init__(self, client: httpx.Client, repo: str, now: float) -> None:
        self.client = client
        self.repo = repo
        self.now = now
        self.host = client.base_url.host or str(client.base_url)
        if client.base_url.port:
            self.host = f"{self.host}:{client.base_url.port}"
        auth = client.headers.get("Authorization", "")
        self.token = auth.split(" ", 1)[1] if " " in auth else auth
        self.secrets = [s for s in (auth, self.token) if s]

    def _line(self, text: str) -> str:
        return redact(" ".join(text.split()), self.secrets)

    def get_list(self, path: str, params: dict[str, Any]) -> list[Any]:
        body = self.get(path, params)
        if not isinstance(body, list):
            raise CollectorError(
                self._line(f"unexpected answer from {self.host} ({path}): not a JSON list")
            )
        return body

    def get(self, path: str, params: dict[str, Any]) -> Any:
        try:
            response = self.client.get(path, params=params)
        except httpx.TimeoutException as exc:
            raise GitHubUnavailable(
                self._line(
                    f"{self.host} did not answer in time ({type(exc).__name__}: {exc}); "
                    "health needs network access"
                )
            ) from None
        except httpx.TransportError as exc:
            raise GitHubUnavailable(
                self._line(
                    f"cannot reach {self.host}: {exc or type(exc).__name__}; "
                    "health needs network access"
                )
            ) from None
        if response.status_code >= 400:
            raise self._http_error(path, response)
        try:
            return http_client.json_of(response)
        except ValueError as exc:
            why = "JSON nested too deep" if isinstance(exc, http_client.JSONTooDeep) else "not JSON"
            raise CollectorError(
                self._line(
                    f"unexpected answer from {response.request.url.copy_with(query=None)}: {why}"
                )
            ) from None

    def _http_error(self, path: str, response: httpx.Response) -> CollectorError:
        status = response.status_code
        message = _message(response)
        remaining = response.headers.get("X-RateLimit-Remaining")
        limited = status == 429 or (
            status == 403
            and (
                remaining == "0"
                or "rate limit" in message.lower()
                or "Retry-After" in response.headers
            )
        )
        if limited:
            when = self._reset(response)
            if self.token:
                hint = "the token's hourly limit is spent; wait for the reset"
            else:
                hint = (
                    "anonymous requests get 60 an hour: set a token via --token-env NAME "
                    "(default GITHUB_TOKEN)"
                )
            return GitHubUnavailable(self._line(f"GitHub API rate limit reached ({when}); {hint}"))
        if status == 401:
            return GitHubUnavailable(
                self._line(
                    f"GitHub refused the token (HTTP 401 {message}); check the variable "
                    "--token-env names, or unset it to go anonymous"
                )
            )
        if status == 404:
            return CollectorError(
                self._line(
                    f"GitHub repository {self.repo!r} not found "
                    f"({response.request.url.copy_with(query=None)}: HTTP 404)"
                ),
                hint="check the framework's repo (owner/name) in the catalog; a private "
                "repository needs a token that can read it",
            )
        reason = message or response.reason_phrase
        return CollectorError(self._line(f"GitHub API {path}: HTTP {status} {reason}".rstrip()))

    def _reset(self, response: httpx.Response) -> str:
        retry_after = response.headers.get("Retry-After", "")
        if retry_after.isdigit():
            return f"retry after {int(retry_after)} s"
        try:
            reset = float(response.headers.get("X-RateLimit-Reset", ""))
        except ValueError:
            return "reset time unknown"
        at = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(reset))
        minutes = max(0, round((reset - self.now) / 60.0))
        return f"resets at {at}, in {minutes} min"


def _message(response: httpx.Response) -> str:
    """GitHub's own error message (``{"message": …}``), abridged; '' when there is none."""
    try:
        body = http_client.json_of(response)
    except ValueError:
        return ""
    text = body.get("message") if isinstance(body, dict) else None
    return str(text)[:200] if text else ""


# --- GitHub's JSON → the analysis's records ------------------------------------------------------


def _instant(value: Any, what: str) -> float | None:
    """An ISO 8601 time (``2024-05-01T12:00:00Z``) as seconds since the epoch; None for null."""
    if value is None or value == "":
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise CollectorError(
            f"unexpected answer from GitHub: {what} {value!r} is not a time"
        ) from None


def _login(item: dict[str, Any]) -> str | None:
    user = item.get("user")
    login = user.get("login") if isinstance(user, dict) else None
    return str(login) if login else None


def _release(item: dict[str, Any]) -> Release:
    tag = str(item.get("tag_name") or item.get("name") or "")
    return Release(
        tag=tag,
        published_at=_instant(item.get("published_at"), f"release {tag!r} published_at"),
        draft=bool(item.get("draft")),
        prerelease=bool(item.get("prerelease")),
    )


def _comment(item: dict[str, Any]) -> Comment | None:
    created = _instant(item.get("created_at"), "comment created_at")
    if created is None:
        return None
    return Comment(
        created_at=created, author=_login(item), association=item.get("author_association")
    )
