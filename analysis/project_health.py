"""Project health figures of a framework's repository: release cadence and how soon maintainers
answer issues. Pure: release times and issue samples in, :class:`HealthFigures` out; the GitHub
API is read by ``collectors.project_health``.

What is counted:

- **Releases**: published, non-draft releases. Prereleases (release candidates, nightlies
  published as releases) *count*: they are shipped versions, and the cadence is how often the
  project ships. The number of prereleases among them is reported beside the total.
- **The last 12 months**: the 365 days up to ``now``, ``(now - 365 d, now]``; a release published
  after ``now`` (clock skew) is not counted.
- **Median days between releases**: the median gap between consecutive releases of the last 12
  months (sorted by publish time); ``None`` with fewer than 2 such releases.
- **First response**: the first comment on an issue by a maintainer — its
  ``author_association`` is OWNER, MEMBER or COLLABORATOR — that is not by the issue's own
  author (a maintainer commenting on the issue they opened has not answered anyone). The median
  is over the sampled issues that got one; those that have none yet are counted and reported
  (``issues_unanswered``), never silently dropped.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: ``author_association`` values of a project's maintainers (GitHub REST API)
MAINTAINER_ASSOCIATIONS = frozenset({"OWNER", "MEMBER", "COLLABORATOR"})
DAY_S = 86_400.0
YEAR_S = 365 * DAY_S


@dataclass(frozen=True)
class Release:
    """One release as the API lists it (``published_at`` None: never published)."""

    tag: str
    published_at: float | None
    draft: bool = False
    prerelease: bool = False


@dataclass(frozen=True)
class Comment:
    """One issue comment: when, by whom (login) and their association with the repository."""

    created_at: float
    author: str | None
    association: str | None


@dataclass(frozen=True)
class IssueSample:
    """One sampled issue: when it was opened and when a maintainer first answered (None: not
    yet)."""

    number: int
    created_at: float
    first_response_at: float | None


@dataclass(frozen=True)
class HealthFigures:
    releases_12m: int
    prereleases_12m: int
    median_days_between_releases: float | None
    median_first_response_h: float | None
    issues_sampled: int
    issues_answered: int
    issues_unanswered: int
    latest_release: str | None
    latest_release_at: float | None


def is_maintainer(association: str | None) -> bool:
    """Whether a comment's ``author_association`` is a maintainer's."""
    return (association or "").upper() in MAINTAINER_ASSOCIATIONS


def first_maintainer_response(
    comments: Iterable[Comment], *, issue_author: str | None = None
) -> float | None:
    """The time of the earliest maintainer comment not written by ``issue_author``; None when
    there is none."""
    times = [
        c.created_at
        for c in comments
        if is_maintainer(c.association) and (issue_author is None or c.author != issue_author)
    ]
    return min(times) if times else None


def counted_releases(releases: Iterable[Release]) -> list[Release]:
    """The releases that count (published, not drafts; prereleases included), oldest first."""
    kept = [r for r in releases if not r.draft and r.published_at is not None]
    return sorted(kept, key=lambda r: (r.published_at or 0.0, r.tag))


def releases_in_window(releases: Iterable[Release], *, now: float) -> list[Release]:
    """The counted releases of the 12 months up to ``now``, oldest first."""
    start = now - YEAR_S
    return [r for r in counted_releases(releases) if start < (r.published_at or 0.0) <= now]


def median_gap_days(times: Sequence[float]) -> float | None:
    """The median of the gaps between consecutive instants, in days; None with < 2 instants."""
    ordered = sorted(times)
    if len(ordered) < 2:
        return None
    return statistics.median(b - a for a, b in itertools.pairwise(ordered)) / DAY_S


def response_hours(issues: Iterable[IssueSample]) -> list[float]:
    """Hours from opening to the first maintainer response, for the issues that got one."""
    return [
        (i.first_response_at - i.created_at) / 3600.0
        for i in issues
        if i.first_response_at is not None
    ]


def health_figures(
    releases: Iterable[Release], issues: Sequence[IssueSample], *, now: float
) -> HealthFigures:
    """The figures of one repository at ``now`` (see the module's docstring for what counts)."""
    counted = counted_releases(releases)
    window = releases_in_window(counted, now=now)
    hours = response_hours(issues)
    latest = [r for r in counted if (r.published_at or 0.0) <= now]
    newest = latest[-1] if latest else None
    return HealthFigures(
        releases_12m=len(window),
        prereleases_12m=sum(1 for r in window if r.prerelease),
        median_days_between_releases=median_gap_days([r.published_at or 0.0 for r in window]),
        median_first_response_h=statistics.median(hours) if hours else None,
        issues_sampled=len(issues),
        issues_answered=len(hours),
        issues_unanswered=len(issues) - len(hours),
        latest_release=newest.tag if newest else None,
        latest_release_at=newest.published_at if newest else None,
    )
