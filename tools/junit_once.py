#!/usr/bin/env python3
"""Check that CI ran every test exactly once, from the junit XML files of its pytest runs.

    python tools/junit_once.py [--collect CHECKOUT] JUNIT.xml [JUNIT.xml ...]

Fails (exit 1) when a test id appears more than once across the files (a test paid for twice),
and, with ``--collect``, when the files together hold fewer or more tests than
``pytest --collect-only`` finds in CHECKOUT with no marker filter (a test left out by both runs:
the two marker expressions must be complements). Prints one line per file and the verdict.
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def test_ids(path: Path) -> list[str]:
    """``classname::name`` of every ``<testcase>`` in one junit XML file."""
    root = ET.parse(path).getroot()
    return [
        f"{case.get('classname', '')}::{case.get('name', '')}" for case in root.iter("testcase")
    ]


def collected(checkout: Path) -> int:
    """How many tests ``pytest --collect-only`` finds in CHECKOUT, every marker included."""
    done = subprocess.run(
        [str(checkout / ".venv" / "bin" / "pytest"), "--collect-only", "-q", "-p", "no:xdist"],
        cwd=checkout,
        capture_output=True,
        text=True,
        check=False,
    )
    found = re.search(r"^(\d+) tests? collected", done.stdout, re.MULTILINE)
    if found is None:
        raise SystemExit(f"junit_once: cannot read pytest's collection:\n{done.stdout[-2000:]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", nargs="+", type=Path, help="junit XML files of the CI's runs")
    parser.add_argument("--collect", type=Path, help="checkout whose full collection must match")
    args = parser.parse_args(argv)

    every: list[str] = []
    for path in args.junit:
        ids = test_ids(path)
        print(f"junit_once: {path.name}: {len(ids)} tests")
        every.extend(ids)
    twice = {tid: n for tid, n in collections.Counter(every).items() if n > 1}
    ok = True
    if twice:
        ok = False
        print(f"junit_once: {len(twice)} test ids ran more than once:")
        for tid, n in sorted(twice.items())[:50]:
            print(f"  {n}x {tid}")
    if args.collect is not None:
        expected = collected(args.collect)
        if expected != len(every):
            ok = False
            print(f"junit_once: pytest collects {expected} tests; the runs hold {len(every)}")
    print(
        f"junit_once: {len(every)} tests in {len(args.junit)} runs, "
        + ("each exactly once" if ok else "NOT each exactly once")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
