"""The pages ui.frame registers, in menu order. Add a page here when its file exists."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class PageSpec:
    path: str  # relative to the repository root, e.g. "pages/home.py"
    title: str
    icon: str
    url_path: str
    default: bool = False

    @property
    def file(self) -> Path:
        """The page's script, absolute (Streamlit resolves relative paths against the main
        script's folder, and the main script is ui/entry/streamlit_app.py)."""
        return ROOT / self.path


PAGES: tuple[PageSpec, ...] = (
    PageSpec("pages/home.py", "Home", ":material/home:", "home", default=True),
    PageSpec("pages/select.py", "Select", ":material/checklist:", "select"),
    PageSpec("pages/live.py", "Live", ":material/monitor_heart:", "live"),
    PageSpec("pages/incident.py", "Incident", ":material/troubleshoot:", "incident"),
    PageSpec("pages/data.py", "Data", ":material/database:", "data"),
    PageSpec("pages/compare.py", "Compare", ":material/compare_arrows:", "compare"),
    PageSpec("pages/tune.py", "Tune", ":material/tune:", "tune"),
    PageSpec("pages/plan.py", "Plan", ":material/calculate:", "plan"),
    PageSpec("pages/latency.py", "Latency", ":material/timer:", "latency"),
    PageSpec("pages/memory.py", "Memory", ":material/memory:", "memory"),
)
