"""Chooses the backend once, at import: the Rust extension, or the pure-Python fallback.

``ENGINESPEC_BACKEND=python`` forces the fallback (the extension is not even imported);
``ENGINESPEC_BACKEND=native`` makes a missing extension an error instead of a silent fallback.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Literal

import enginespec._pycontainers as _pycontainers
import enginespec._pygguf as _pygguf
import enginespec._pymatcher as _pymatcher
import enginespec._pyscanner as _pyscanner

Backend = Literal["native", "python"]

_WANTED = os.environ.get("ENGINESPEC_BACKEND", "").strip().lower()
if _WANTED not in ("", "native", "python"):
    raise ImportError(f"ENGINESPEC_BACKEND={_WANTED!r}: expected 'native' or 'python'")

BACKEND: Backend = "python"
MatcherType: type[_pymatcher.Matcher] = _pymatcher.Matcher
ScannerType: type[_pyscanner.Scanner] = _pyscanner.Scanner
parse_cgroup: Callable[[bytes], tuple[_pycontainers.Runtime, str, str | None] | None] = (
    _pycontainers.parse_cgroup
)
proxy_flags: Callable[[list[str]], tuple[str, int, str, int] | None] = _pycontainers.proxy_flags
read_gguf: Callable[[int, int, int, int], _pygguf.RawHeader] = _pygguf.read_gguf
if _WANTED != "python":
    try:
        import enginespec._native as _native
    except ImportError:
        if _WANTED == "native":
            raise
    else:
        # Same interfaces as the Python twins (see _native.pyi). The native scanner reads /proc on
        # Linux and goes through the sysinfo crate elsewhere.
        BACKEND = "native"
        MatcherType = _native.Matcher  # type: ignore[assignment]
        ScannerType = _native.Scanner  # type: ignore[assignment]
        parse_cgroup = _native.parse_cgroup
        proxy_flags = _native.proxy_flags
        read_gguf = _native.read_gguf
