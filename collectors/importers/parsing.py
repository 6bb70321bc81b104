"""Reading a source into a :class:`Document`, and the typed accessors every importer uses.

Every problem becomes one :class:`errors.ImportFormatError` naming the file, the key or line,
what was found and what was expected: third-party errors (``json``, ``yaml``, ``csv``) are
translated here, once.
"""

from __future__ import annotations

import contextlib
import csv
import gc
import io
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from pathlib import PurePath
from typing import Any

import numpy as np

from errors import ImportFormatError

try:  # a fast JSON parser; the standard library reads everything it refuses
    import orjson
except ImportError:  # pragma: no cover - orjson is a dependency
    orjson = None  # type: ignore[assignment]

from .model import Document, Source

EXPECTED_KINDS = "a JSON, JSON-lines, YAML or CSV result file"


def _describe(value: Any, limit: int = 40) -> str:
    """A short, one-line description of a found value: its type and a clipped repr."""
    text = repr(value).replace("\n", " ")
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return f"{type(value).__name__} {text}"


def load_document(src: Source) -> Document:
    """Decode ``src``: JSON, JSON lines, YAML (by extension or leading ``---``) or CSV."""
    data = src.data
    if not data.strip():
        raise ImportFormatError(src.path, f"empty file; expected {EXPECTED_KINDS}")
    if b"\x00" in data[:65536]:
        raise ImportFormatError(
            src.path, f"binary data (NUL bytes near the start); expected {EXPECTED_KINDS}"
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ImportFormatError(
            src.path, f"binary data (not UTF-8 at byte {exc.start}); expected {EXPECTED_KINDS}"
        ) from None
    stripped = text.lstrip()
    suffix = PurePath(src.path).suffix.lower()
    if suffix in {".yaml", ".yml"} or stripped.startswith("---"):
        return _load_yaml(src, text)
    if stripped[:1] in "{[" or _json_scalar(stripped):
        return _load_json(src, text)
    return _load_csv(src, text)


_SCALAR_START = ("null", "true", "false", "NaN", "Infinity", "-Infinity", '"')


def _json_scalar(text: str) -> bool:
    """Whether ``text`` is one JSON scalar (``null``, a number, a string …), not a table."""
    if not text.startswith(_SCALAR_START) and not text[:1].isdigit() and text[:1] != "-":
        return False
    try:
        json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return False
    return True


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: decoding builds ~10⁵ lists, each allocation counting
    towards a collection that finds nothing but walks every list built so far (about a third of
    the parse time of a large file). Nests; memory is still freed by reference counting."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _loads(text: str) -> Any:
    """Parse JSON text: orjson when it takes the text (several times faster on large files),
    else the standard library, which also reads ``NaN`` / ``Infinity`` tokens (SGLang writes
    them), integers beyond 64 bits and deep nesting, and gives the error positions we report."""
    with gc_paused():
        if orjson is not None:
            try:
                return orjson.loads(text)
            except orjson.JSONDecodeError:
                pass
        return json.loads(text)


def _load_json(src: Source, text: str) -> Document:
    try:
        value = _loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":
            return _load_jsonl(src, text)
        truncated = exc.pos >= len(text.rstrip()) - 1
        hint = " — the file looks truncated" if truncated else ""
        raise ImportFormatError(
            src.path,
            f"line {exc.lineno} column {exc.colno}: invalid JSON ({exc.msg}){hint}; "
            "expected a complete JSON document",
        ) from None
    except RecursionError:
        raise ImportFormatError(
            src.path, "JSON nested too deeply; expected a result file"
        ) from None
    if not isinstance(value, dict | list):
        found = json.dumps(value)
        found = found if len(found) <= 40 else found[:39] + "…"
        raise ImportFormatError(
            src.path,
            f"valid JSON, but the whole document is {found}; expected an object or a list "
            "of results (a result file)",
        )
    return Document(source=src, kind="json", objects=[(1, value)])


def _load_jsonl(src: Source, text: str) -> Document:
    objects: list[tuple[int, Any]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            objects.append((lineno, _loads(line)))
        except json.JSONDecodeError as exc:
            raise ImportFormatError(
                src.path,
                f"line {lineno} column {exc.colno}: invalid JSON ({exc.msg}); "
                "expected one JSON object per line",
            ) from None
    return Document(source=src, kind="jsonl", objects=objects)


def _load_yaml(src: Source, text: str) -> Document:
    try:
        import yaml
    except ImportError:  # pragma: no cover - pyyaml is a dependency
        raise ImportFormatError(
            src.path, "YAML needs the pyyaml package", hint="pip install pyyaml"
        ) from None
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ImportFormatError(
            src.path, f"{where}invalid YAML ({problem}); expected a YAML mapping"
        ) from None
    if not isinstance(value, dict | list):
        raise ImportFormatError(
            src.path,
            f"valid YAML, but the whole document is {_describe(value)}; expected a mapping "
            "or a list of results (a result file)",
        )
    return Document(source=src, kind="yaml", objects=[(1, value)])


def _load_csv(src: Source, text: str) -> Document:
    tables: list[list[tuple[int, list[str]]]] = []
    current: list[tuple[int, list[str]]] = []
    try:
        reader = csv.reader(io.StringIO(text, newline=""))
        for row in reader:
            if not any(cell.strip() for cell in row):
                if current:
                    tables.append(current)
                    current = []
                continue
            current.append((reader.line_num, row))
    except csv.Error as exc:
        raise ImportFormatError(
            src.path, f"invalid CSV ({exc}); expected {EXPECTED_KINDS}"
        ) from None
    if current:
        tables.append(current)
    if not tables or all(len(row) < 2 for t in tables for _, row in t):
        first = text.strip().splitlines()[0] if text.strip() else ""
        raise ImportFormatError(
            src.path,
            f"not JSON, YAML or CSV (starts with {_describe(first)}); expected {EXPECTED_KINDS}",
        )
    return Document(source=src, kind="csv", tables=tables)


# --- typed accessors -------------------------------------------------------------------------


class Reader:
    """Typed access to a parsed document that raises one-line, located errors."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, key: str | None, reason: str) -> ImportFormatError:
        return ImportFormatError(self.path, reason, key=key)

    def obj(self, value: Any, key: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(key, f"expected an object but found {_describe(value)}")
        return value

    def get_obj(self, parent: Mapping[str, Any], key: str, where: str = "") -> dict[str, Any]:
        value = self.require(parent, key, where)
        return self.obj(value, where + key)

    def opt_obj(self, parent: Mapping[str, Any], key: str, where: str = "") -> dict[str, Any]:
        value = parent.get(key)
        if value is None:
            return {}
        return self.obj(value, where + key)

    def require(self, parent: Mapping[str, Any], key: str, where: str = "") -> Any:
        if key not in parent:
            raise self.fail(where + key, "required key is missing")
        return parent[key]

    def number(self, value: Any, key: str, *, allow_none: bool = True) -> float | None:
        """A number; reads numeric strings as tools write them ("1,234.56", "inf"; "N/A" → None)."""
        if value is None:
            if allow_none:
                return None
            raise self.fail(key, "expected a number but found null")
        if isinstance(value, bool):
            raise self.fail(key, f"expected a number but found {_describe(value)}")
        if isinstance(value, float):
            return value
        if isinstance(value, int):
            return self._int_as_float(value, key)
        if isinstance(value, str):
            s = value.strip().replace(",", "")
            if s.upper() in {"N/A", "NA", "", "NONE", "NULL"}:
                return None
            try:
                return float(s)
            except ValueError:
                pass
        raise self.fail(key, f"expected a number but found {_describe(value)}")

    def _int_as_float(self, value: int, key: str) -> float:
        try:
            return float(value)
        except OverflowError:  # beyond ~1.8e308: JSON allows it, no float holds it
            raise self.fail(
                key, f"expected a number but found an integer of {value.bit_length()} bits"
            ) from None

    def finite(self, value: Any, key: str) -> float | None:
        """A number, with ``inf`` and ``NaN`` read as "not given" (None)."""
        num = self.number(value, key)
        if num is None or not math.isfinite(num):
            return None
        return num

    def get_number(self, parent: Mapping[str, Any], key: str, where: str = "") -> float | None:
        return self.number(parent.get(key), where + key)

    def req_number(self, parent: Mapping[str, Any], key: str, where: str = "") -> float:
        num = self.number(self.require(parent, key, where), where + key, allow_none=False)
        assert num is not None
        return num

    def integer(self, value: Any, key: str) -> int | None:
        num = self.number(value, key)
        if num is None or not math.isfinite(num):
            return None
        return round(num)

    def text(self, value: Any, key: str) -> str | None:
        if value is None:
            return None
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return str(value)
        raise self.fail(key, f"expected a string but found {_describe(value)}")

    def array(self, value: Any, key: str, length: int | None = None) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(key, f"expected an array but found {_describe(value)}")
        if length is not None and len(value) != length:
            raise self.fail(
                key, f"expected {length} entries (one per request) but found {len(value)}"
            )
        return value

    def float_array(self, value: Any, key: str, length: int | None = None) -> np.ndarray:
        """``numbers`` as a float64 array (null → NaN); one C-level pass when all are numbers."""
        items = self.array(value, key, length)
        if all(type(v) is float or type(v) is int for v in items):
            try:
                return np.array(items, dtype="float64")
            except OverflowError:  # an integer beyond float range: named below
                pass
        return np.array(
            [np.nan if v is None else v for v in self.numbers(items, key)], dtype="float64"
        )

    def numbers(self, value: Any, key: str, length: int | None = None) -> list[float | None]:
        """An array of numbers (null kept as None); names the first bad index."""
        items = self.array(value, key, length)
        out: list[float | None] = []
        for i, item in enumerate(items):
            if item is None:
                out.append(None)
            elif type(item) is float:
                out.append(item)
            else:
                out.append(self.number(item, f"{key}[{i}]"))
        return out


def scalars(obj: Mapping[str, Any], skip: Iterable[str] = ()) -> dict[str, Any]:
    """The JSON-safe scalar entries of ``obj`` (non-finite floats as strings), for tool_summary."""
    skipped = set(skip)
    out: dict[str, Any] = {}
    for key, value in obj.items():
        if key in skipped:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            out[key] = str(value)
        elif value is None or isinstance(value, str | int | float | bool):
            out[key] = value
    return out


def json_safe(value: Any) -> Any:
    """``value`` with non-finite floats as strings (strict JSON for the store)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value
