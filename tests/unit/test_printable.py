"""``analysis.printable``: label values printed on one line, escaped, and the log formatter."""

from __future__ import annotations

import logging

import pytest

from analysis.printable import PrintableFormatter, printable


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("vllm-0.prod:8000", "vllm-0.prod:8000"),  # the common case is untouched
        ("héllo wörld", "héllo wörld"),  # printable non-ASCII stays
        ("a\nBREACH b", "a\\nBREACH b"),
        ("a\r\tb", "a\\r\\tb"),
        ("\x1b[2Kx", "\\x1b[2Kx"),
        ("a\u2028b\u202ec", "a\\u2028b\\u202ec"),  # line separator, bidi override
        ("a\\nb", "a\\\\nb"),  # a literal backslash-n stays told apart from a newline
        ("\x00\x7f\x85", "\\x00\\x7f\\x85"),
    ],
)
def test_printable_escapes_what_would_break_or_drive_the_line(raw: str, shown: str) -> None:
    assert printable(raw) == shown
    assert "\n" not in printable(raw) and printable(raw).isprintable()


def test_a_field_has_no_space() -> None:
    assert printable("a b\nc", field=True) == "a\\x20b\\nc"
    assert " " not in printable("x  y", field=True)
    assert printable(42) == "42"


def test_the_log_formatter_escapes_the_message_and_keeps_a_traceback() -> None:
    fmt = PrintableFormatter("%(levelname)s %(message)s")
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "%s: %s", ("t\nFAKE", "m"), None)
    assert fmt.format(record) == "WARNING t\\nFAKE: m"
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "a\nb", (), sys.exc_info())
    text = fmt.format(record)
    assert text.startswith("ERROR a\\nb\nTraceback") and "ValueError: boom" in text
