"""TOML read from the user (a sweep spec, a checklist file, a workload file), bounded in depth.

``tomllib`` parses nested arrays and inline tables recursively, so a file of a few KB of ``[``
raises ``RecursionError`` — a traceback instead of one line. :func:`loads` turns that, and any
document nested deeper than :data:`MAX_DEPTH` (no ServeScope file nests beyond 4 levels), into a
``tomllib.TOMLDecodeError``, which every caller already reports as "not valid TOML".
"""

from __future__ import annotations

import tomllib
from typing import Any

#: The deepest nesting of tables and arrays a user's TOML file may have.
MAX_DEPTH = 32


def depth(value: Any) -> int:
    """How deeply ``value`` nests dicts and lists (a scalar: 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level + 1)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest


def loads(text: str) -> dict[str, Any]:
    """``tomllib.loads``; nesting deeper than :data:`MAX_DEPTH` (or too deep to parse) is a
    ``tomllib.TOMLDecodeError`` saying so."""
    try:
        doc = tomllib.loads(text)
    except RecursionError:
        raise tomllib.TOMLDecodeError(
            f"nested too deep to read (more than {MAX_DEPTH} levels of arrays or tables)"
        ) from None
    if depth(doc) > MAX_DEPTH:
        raise tomllib.TOMLDecodeError(
            f"nested more than {MAX_DEPTH} levels deep (arrays or tables inside each other)"
        )
    return doc
