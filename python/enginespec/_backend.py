"""Chooses the backend once, at import: the Rust extension, or the pure-Python fallback.

``ENGINESPEC_BACKEND=python`` forces the fallback; ``ENGINESPEC_BACKEND=native`` makes a missing
extension an error instead of a silent fallback.
"""

from __future__ import annotations

import os
from typing import Literal

from enginespec import _pymatcher, _pyscanner

Backend = Literal["native", "python"]


def _choose() -> tuple[Backend, type[_pymatcher.Matcher], type[_pyscanner.Scanner]]:
    wanted = os.environ.get("ENGINESPEC_BACKEND", "").strip().lower()
    if wanted not in ("", "native", "python"):
        raise ImportError(f"ENGINESPEC_BACKEND={wanted!r}: expected 'native' or 'python'")
    if wanted == "python":
        return "python", _pymatcher.Matcher, _pyscanner.Scanner
    try:
        from enginespec import _native
    except ImportError:
        if wanted == "native":
            raise
        return "python", _pymatcher.Matcher, _pyscanner.Scanner
    # Same interfaces as the Python twins (see _native.pyi). The native scanner reads /proc on
    # Linux and goes through the sysinfo crate elsewhere.
    return "native", _native.Matcher, _native.Scanner  # type: ignore[return-value]


BACKEND, MatcherType, ScannerType = _choose()
