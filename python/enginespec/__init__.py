"""enginespec: everything a program needs to know about local LLM inference engines.

``BACKEND`` is ``"native"`` when the Rust extension is in use and ``"python"`` on the pure-Python
fallback (forced with ``ENGINESPEC_BACKEND=python``); both give the same results.
"""

from __future__ import annotations

from enginespec._backend import BACKEND
from enginespec.argv import Invocation, detect_engine, parse_argv
from enginespec.engines import BUILTIN_SIGNATURES, all_signatures
from enginespec.signature import LaunchForm, Signature

__version__ = "0.1.0"

__all__ = [
    "BACKEND",
    "BUILTIN_SIGNATURES",
    "Invocation",
    "LaunchForm",
    "Signature",
    "__version__",
    "all_signatures",
    "detect_engine",
    "parse_argv",
]
