"""The pages app.py registers, in menu order. Add a page here when its file exists."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PageSpec:
    path: str  # relative to the repository root, e.g. "pages/home.py"
    title: str
    icon: str
    url_path: str
    default: bool = False


PAGES: tuple[PageSpec, ...] = (
    PageSpec("pages/home.py", "Home", ":material/home:", "home", default=True),
    PageSpec("pages/live.py", "Live", ":material/monitor_heart:", "live"),
    PageSpec("pages/data.py", "Data", ":material/database:", "data"),
    PageSpec("pages/compare.py", "Compare", ":material/compare_arrows:", "compare"),
    PageSpec("pages/latency.py", "Latency", ":material/timer:", "latency"),
    PageSpec("pages/memory.py", "Memory", ":material/memory:", "memory"),
)
