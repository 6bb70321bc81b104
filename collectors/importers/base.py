"""The importer interface: a :class:`Format` per file type, registered in ``registry.FORMATS``."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath
from typing import Literal

from .model import Document, ImportOptions, ParsedFile

Clock = Callable[[], float]
Role = Literal["run", "summary", "records", "samples"]
Parser = Callable[[list[Document], ImportOptions, Clock], ParsedFile]


@dataclass(frozen=True)
class Format:
    """One importable file type.

    ``detect`` looks at content, never at the name alone. Formats with a ``family`` and a role
    of ``summary`` / ``records`` are paired when both are imported together (llmperf's two
    files, an AIPerf or GenAI-Perf artifacts folder): ``pair_key`` names the partner, and the
    family's ``records`` format parses the pair as one run (records first, summary second).
    """

    name: str
    source: str
    description: str
    detect: Callable[[Document], bool]
    parse: Parser
    role: Role = "run"
    family: str | None = None
    pair_key: Callable[[str], str] | None = None


def same_folder(path: str) -> str:
    """Pair key: files of one artifacts folder belong together."""
    return str(PurePath(path).parent)


def default_clock() -> float:
    return time.time()
