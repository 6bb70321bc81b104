"""Text from outside (a Prometheus label value, a scraped target's name) made safe to print on one
line of a terminal or a log (pure).

A label value is any string: a Prometheus ``instance`` label holding a newline would split a
``BREACH`` line in two (``grep ^BREACH`` would then see a forged line), an escape sequence would
drive the terminal, a bidi override would reorder what is shown. :func:`printable` escapes every
character Python does not call printable (controls, line and paragraph separators, format
characters) as ``\\n``, ``\\r``, ``\\t``, ``\\xNN``, ``\\uNNNN``, and the backslash itself (so an
escaped text reads back unambiguously); with ``field=True`` also the space, for a value printed
as one space-separated field. :class:`PrintableFormatter` does the same to every log message.
"""

from __future__ import annotations

import logging
from typing import Final

_NAMED: Final = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(value: object, *, field: bool = False) -> str:
    """``value`` as text that prints on one line and drives nothing: non-printable characters
    and the backslash escaped (``a\\nb`` → ``a\\\\nb``); ``field``: the space too (``\\x20``)."""
    text = str(value)
    if text.isprintable() and "\\" not in text and not (field and " " in text):
        return text
    return "".join(
        _escape(ch) if ch in _NAMED or not ch.isprintable() or (field and ch == " ") else ch
        for ch in text
    )


class PrintableFormatter(logging.Formatter):
    """A ``logging.Formatter`` whose messages go through :func:`printable` (a traceback, added
    after the message, keeps its lines)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = printable(record.message)
        return super().formatMessage(record)
