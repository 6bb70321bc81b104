"""The repository stands alone: no tracked file reads or names the folder beside the checkout.

A `git clone` of this repository, with nothing next to it, must build, run and pass its tests.
Data the project needs lives inside it (tests/fixtures, with SOURCES.md there). These tests
read every tracked file (`git ls-files`) and fail on any that

- names the sibling folder the project once took its fixtures and calibration data from, as
  a relative path (any text file), or
- builds a path to it or above the checkout in Python: ``<root>.parent / "<that folder>"``, or
  ``Path(__file__).parents[N]`` with N past the repository root.

The strings searched for are built from parts, so that this file does not match itself.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parents[2]
SIBLING = "shared"
NEEDLE = ".." + "/" + SIBLING
#: ``X.parent / "<SIBLING>"`` or ``X.parents[1] / '<SIBLING>'`` on one line
PARENT_SIBLING = re.compile(r"\.parents?\b[^\n]*[\"']" + SIBLING + r"\b")
#: ``Path(__file__).parents[N]`` (with or without ``.resolve()``)
FILE_PARENTS = re.compile(r"Path\(__file__\)(?:\.resolve\(\))?\.parents\[(\d+)\]")


def _tracked_files(unavailable: Callable[[str], NoReturn]) -> list[Path]:
    """Every file git tracks here; skipped (strict: failed) without git or a checkout."""
    git = shutil.which("git")
    if git is None:
        unavailable("git is not installed: cannot list the tracked files")
    try:
        top = subprocess.run(
            [git, "-C", str(ROOT), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
    except subprocess.CalledProcessError as exc:
        unavailable(f"{ROOT} is not a git checkout: {exc.stderr.strip()}")
    if Path(top).resolve() != ROOT:
        unavailable(f"{ROOT} is not the top of a git checkout (git's top: {top})")
    listing = subprocess.run(
        [git, "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True, timeout=60
    ).stdout
    return [ROOT / name for name in listing.decode().split("\0") if name]


def _hits(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: why`` (file relative to root) for each line that leaves the checkout.

    Binary files (a NUL byte in the first 8 KiB) and paths that are not files give none."""
    if not path.is_file():  # deleted in the work tree, or a submodule
        return []
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return []
    rel = path.relative_to(root)
    python = path.suffix == ".py"
    out: list[str] = []
    for n, raw in enumerate(data.splitlines(), start=1):
        line = raw.decode(errors="replace")
        if NEEDLE in line:
            out.append(f"{rel}:{n}: names {NEEDLE}")
        if python and PARENT_SIBLING.search(line):
            out.append(f"{rel}:{n}: builds a path to the sibling {SIBLING!r} folder")
        for m in FILE_PARENTS.finditer(line) if python else ():
            # parents[0] is the file's folder; parents[len(parts) - 1] is the root
            if int(m.group(1)) > len(rel.parts) - 1:
                out.append(f"{rel}:{n}: parents[{m.group(1)}] climbs above the checkout")
    return out


def test_this_file_does_not_match_itself() -> None:
    assert NEEDLE == "../" + "shared"
    assert _hits(Path(__file__)) == []


def test_hits_reports_each_way_out_and_skips_binary_files(tmp_path: Path) -> None:
    (tmp_path / "doc.md").write_text(f"ok\nsee {NEEDLE}/fixtures\nok\n{NEEDLE}\n")
    assert _hits(tmp_path / "doc.md", tmp_path) == [
        f"doc.md:2: names {NEEDLE}",
        f"doc.md:4: names {NEEDLE}",
    ]
    (tmp_path / "clean.md").write_text("a shared machine; ../other; tests/fixtures\n")
    assert _hits(tmp_path / "clean.md", tmp_path) == []
    (tmp_path / "blob.bin").write_bytes(b"\x89PNG\0\1" + NEEDLE.encode())
    assert _hits(tmp_path / "blob.bin", tmp_path) == []
    assert _hits(tmp_path / "gone.md", tmp_path) == []

    pkg = tmp_path / "tests" / "unit"
    pkg.mkdir(parents=True)
    here = "Path(__file__).resolve()"
    (pkg / "t.py").write_text(
        f"ROOT = {here}.parents[2]\n"  # the root: fine
        f'DATA = ROOT.parent / "{SIBLING}" / "fixtures"\n'
        f"UP = {here}.parents[3]\n"
        "UP2 = Path(__file__)"
        ".parents[4] / 'x'\n"
        "shared = 1  # a word, not a path\n"
    )
    assert _hits(pkg / "t.py", tmp_path) == [
        f"tests/unit/t.py:2: builds a path to the sibling {SIBLING!r} folder",
        "tests/unit/t.py:3: parents[3] climbs above the checkout",
        "tests/unit/t.py:4: parents[4] climbs above the checkout",
    ]
    (tmp_path / "t.md").write_text(f"{here}.parents[3] / '{SIBLING}'\n")  # only .py is parsed
    assert _hits(tmp_path / "t.md", tmp_path) == []


def test_no_tracked_file_leaves_the_checkout(unavailable: Callable[[str], NoReturn]) -> None:
    files = _tracked_files(unavailable)
    assert ROOT / "pyproject.toml" in files  # the listing is this project's
    hits = [hit for path in files for hit in _hits(path)]
    assert hits == [], (
        "tracked files reach beside the checkout, where a clone has nothing; copy what is "
        "needed into the repository (test data: tests/fixtures, with its origin in "
        "tests/fixtures/SOURCES.md):\n" + "\n".join(hits)
    )
