"""``servescope health [FRAMEWORK …]``: each framework's project health from the GitHub REST API
— releases in the last 12 months, the median days between them, the median hours to a
maintainer's first answer on its newest issues — printed and stored (table ``project_health``),
for the Select page to show beside the ``project_health`` criterion.

The frameworks are the catalog's (``frameworks``, column ``repo`` = GitHub owner/name); by default
every one that has a repo. Each framework's row is stored as soon as it is fetched: a framework
that fails is reported and the others are still stored. Once GitHub is unreachable or the rate
limit is spent, the remaining frameworks are skipped (they would fail the same way).

The token is read from the environment variable ``--token-env`` names (default GITHUB_TOKEN;
without it, anonymous requests: 60 an hour, about 2 + ``--issues`` per framework); it is sent
as ``Authorization: Bearer …`` and never printed, logged or stored.

Exit codes: 0 every framework stored; ``errors.ExitCode.PARTIAL`` (1) some failed (the others
were stored); ``ERROR`` (2) bad input (an unknown framework — the message lists the known ones —
a bad ``--issues`` or ``--api-url``), or nothing stored because GitHub was unreachable or
rate-limited.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

import httpx

from collectors.project_health import (
    DEFAULT_API_URL,
    DEFAULT_TOKEN_ENV,
    MAX_ISSUES,
    GitHubUnavailable,
    ProjectHealth,
    fetch_project_health,
    github_client,
)
from errors import ExitCode, InputError, ServeScopeError
from store import catalog
from store.lifecycle import open_store
from store.project_health import add_project_health

if TYPE_CHECKING:
    from store.db import Store

DEFAULT_ISSUES = 15

_HEADER = (
    f"{'framework':<16} {'releases/12mo':>13} {'median days between':>19} "
    f"{'median 1st response h':>21} {'sampled':<18} {'latest release':<26} fetched (UTC)"
)


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add the ``health`` subcommand to cli.py's parser."""
    p = sub.add_parser(
        "health",
        help="fetch each framework's project health (releases, issue response) from GitHub",
        description="Fetch each catalog framework's release cadence and maintainers' first "
        "response time on its newest issues from the GitHub REST API; print and store them.",
    )
    p.add_argument(
        "frameworks",
        nargs="*",
        metavar="FRAMEWORK",
        help="catalog framework names (default: every framework with a GitHub repo)",
    )
    p.add_argument(
        "--token-env",
        default=DEFAULT_TOKEN_ENV,
        metavar="NAME",
        help=f"environment variable holding a GitHub token (default {DEFAULT_TOKEN_ENV}; "
        "unset: anonymous, 60 requests an hour)",
    )
    p.add_argument(
        "--issues",
        type=int,
        default=DEFAULT_ISSUES,
        metavar="N",
        help=f"how many of the newest issues to sample per framework (1-{MAX_ISSUES}, "
        f"default {DEFAULT_ISSUES})",
    )
    p.add_argument(
        "--api-url",
        default=DEFAULT_API_URL,
        metavar="URL",
        help=f"GitHub REST API base URL (default {DEFAULT_API_URL}; GitHub Enterprise: "
        "https://HOST/api/v3)",
    )
    p.add_argument("--db", help="store URL (default: $SERVESCOPE_DB or the DuckDB file)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``servescope health``."""
    return health(
        args.frameworks,
        db=args.db,
        token_env=args.token_env,
        issues=args.issues,
        api_url=args.api_url,
    )


def health(
    frameworks: Sequence[str] = (),
    *,
    db: str | None = None,
    token_env: str = DEFAULT_TOKEN_ENV,
    issues: int = DEFAULT_ISSUES,
    api_url: str = DEFAULT_API_URL,
    env: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.time,
    transport: httpx.BaseTransport | None = None,
    out: IO[str] | None = None,
    err: IO[str] | None = None,
) -> int:
    """Fetch, print and store the health of ``frameworks`` (default: every catalog framework
    with a repo); returns the exit code. ``env``, ``clock`` and ``transport`` are injectable."""
    out = out or sys.stdout
    err = err or sys.stderr
    if not 1 <= issues <= MAX_ISSUES:
        raise InputError(f"--issues must be 1 to {MAX_ISSUES}, got {issues}")
    _check_api_url(api_url)
    source = os.environ if env is None else env
    token = source.get(token_env, "").strip() if token_env else ""
    store = open_store(db)
    try:
        targets = _targets(store, frameworks)
        if not token:
            print(
                f"servescope health: ${token_env} is not set: anonymous requests (60 an hour, "
                f"about {2 + issues} per framework); set a token via --token-env NAME",
                file=err,
            )
        failures: dict[str, ServeScopeError | None] = {}  # None: skipped
        stored = 0
        blocked: GitHubUnavailable | None = None
        with github_client(api_url=api_url, token=token or None, transport=transport) as client:
            print(_HEADER, file=out, flush=True)
            for name, repo in targets:
                if blocked is not None:
                    failures[name] = None
                    continue
                try:
                    result = fetch_project_health(repo, client=client, now=clock(), issues=issues)
                    add_project_health(store, [result.row(name)])
                except GitHubUnavailable as exc:
                    blocked = exc
                    failures[name] = exc
                    _report(err, name, exc)
                    continue
                except ServeScopeError as exc:
                    failures[name] = exc
                    _report(err, name, exc)
                    continue
                stored += 1
                print(_line(name, result), file=out, flush=True)
        skipped = [n for n, e in failures.items() if e is None]
        if skipped:
            print(
                f"servescope health: skipped {', '.join(skipped)}: GitHub unavailable (above)",
                file=err,
            )
        print(f"stored {stored} of {len(targets)} framework(s) in {store.url}", file=out)
    finally:
        store.dispose()
    if not failures:
        return ExitCode.OK
    if stored == 0 and all(
        e is None or isinstance(e, GitHubUnavailable) for e in failures.values()
    ):
        return ExitCode.ERROR
    return ExitCode.PARTIAL


def _check_api_url(api_url: str) -> None:
    try:
        url = httpx.URL(api_url)
    except httpx.InvalidURL:
        url = None
    if url is None or url.scheme not in ("http", "https") or not url.host:
        raise InputError(
            f"--api-url {api_url!r} is not an http(s) URL",
            hint=f"the default is {DEFAULT_API_URL}",
        )


def _targets(store: Store, frameworks: Sequence[str]) -> list[tuple[str, str]]:
    """(framework, repo) of the frameworks asked for; InputError for an unknown one (listing the
    known ones) or one without a repo."""
    known = catalog.names(store, "frameworks")
    wanted = list(dict.fromkeys(frameworks))
    unknown = [f for f in wanted if f not in known]
    if unknown:
        raise InputError(
            f"unknown framework(s) {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(known) or 'none'}",
            hint="nothing was fetched",
        )
    repos = {name: str(catalog.get(store, "frameworks", name).get("repo") or "") for name in known}
    if wanted:
        missing = [f for f in wanted if not repos[f]]
        if missing:
            raise InputError(
                f"framework(s) {', '.join(missing)} have no GitHub repo in the catalog; "
                f"with a repo: {', '.join(n for n in known if repos[n]) or 'none'}",
                hint="nothing was fetched",
            )
        return [(f, repos[f]) for f in wanted]
    targets = [(n, repos[n]) for n in known if repos[n]]
    if not targets:
        raise InputError("no framework in the catalog has a GitHub repo (column repo)")
    return targets


def _report(err: IO[str], name: str, exc: ServeScopeError) -> None:
    print(f"servescope health: {name}: {exc.message}", file=err, flush=True)
    if exc.hint:
        print(f"  hint: {exc.hint}", file=err, flush=True)


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _day(t: float | None, fmt: str = "%Y-%m-%d") -> str:
    return time.strftime(fmt, time.gmtime(t)) if t is not None else "-"


def _line(name: str, result: ProjectHealth) -> str:
    f = result.figures
    sampled = f"{f.issues_sampled}" + (
        f" ({f.issues_unanswered} no answer)" if f.issues_unanswered else ""
    )
    latest = f"{f.latest_release} ({_day(f.latest_release_at)})" if f.latest_release else "-"
    return (
        f"{name:<16} {f.releases_12m:>13} {_num(f.median_days_between_releases):>19} "
        f"{_num(f.median_first_response_h):>21} {sampled:<18} {latest:<26} "
        f"{_day(result.fetched_at, '%Y-%m-%d %H:%M')}"
    )
