"""Showing untrusted text literally: what came from a process or a server (argv, paths, health
reasons, error messages) reaches a terminal with its control characters made visible, so it cannot
paint rows, set the window title, forge lines or hide itself. JSON output needs none of this (JSON
escapes them)."""

from __future__ import annotations

import re

# C0 and C1 controls, DEL, bidirectional overrides and isolates, zero-width and line/paragraph
# separators, the BOM, and lone surrogates (os.fsdecode's escapes for bytes that are not UTF-8).
_UNSAFE = re.compile(
    r"[\\\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff]"
)
_NAMED = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if char in _NAMED:
        return _NAMED[char]
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape of the byte code - 0xDC00
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def literal(text: str) -> str:
    """``text`` with every control or invisible character written as an escape (``\\n``,
    ``\\x1b``, ``\\u202e``; a backslash as ``\\\\``), so what is shown is what is there."""
    return _UNSAFE.sub(_escape, text)


def literal_lines(text: str) -> str:
    """As :func:`literal`, keeping the line breaks of a multi-line text (an engine's ``--help``)."""
    return "\n".join(literal(line) for line in text.split("\n"))
