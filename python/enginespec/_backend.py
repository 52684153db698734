"""Chooses the backend once, at import: the Rust extension, or the pure-Python fallback.

``ENGINESPEC_BACKEND=python`` forces the fallback; ``ENGINESPEC_BACKEND=native`` makes a missing
extension an error instead of a silent fallback.
"""

from __future__ import annotations

import os
from typing import Literal

from enginespec import _pymatcher

Backend = Literal["native", "python"]


def _choose() -> tuple[Backend, type[_pymatcher.Matcher]]:
    wanted = os.environ.get("ENGINESPEC_BACKEND", "").strip().lower()
    if wanted not in ("", "native", "python"):
        raise ImportError(f"ENGINESPEC_BACKEND={wanted!r}: expected 'native' or 'python'")
    if wanted == "python":
        return "python", _pymatcher.Matcher
    try:
        from enginespec import _native
    except ImportError:
        if wanted == "native":
            raise
        return "python", _pymatcher.Matcher
    # Same interface as the Python twin (see _native.pyi).
    return "native", _native.Matcher  # type: ignore[return-value]


BACKEND, MatcherType = _choose()
