"""Showing untrusted text literally: what came from a process or a server (argv, paths, health
reasons, error messages) reaches a terminal with its control characters made visible, so it cannot
paint rows, set the window title, forge lines or hide itself. JSON output needs none of this (JSON
escapes them). Also the short forms a table shows: ages (``3h12m``) and addresses (``127.0.0.1:8000``).
"""

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


def age(seconds: float) -> str:
    """A duration as ``kubectl get`` shows an AGE: ``45s``, ``3m12s``, ``40m``, ``5h3m``, ``2d4h``."""
    s = max(int(seconds), 0)
    minutes, hours, days = s // 60, s // 3600, s // 86400
    if s < 120:
        return f"{s}s"
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if hours < 3:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if days < 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    return f"{days}d"


def compact_url(url: str) -> str:
    """An engine's base URL as ``docker ps`` shows an address: ``127.0.0.1:8000``, ``[::1]:8000``
    (plain HTTP is the rule, so its scheme goes); ``https://`` stays; a unix socket is
    ``unix:/path``."""
    if url.startswith("http://"):
        return url[len("http://") :]
    if url.startswith("http+unix://"):
        from urllib.parse import unquote

        return "unix:" + unquote(url[len("http+unix://") :])
    return url
