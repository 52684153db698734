"""Chooses the backend once, at import: the Rust extension, or the pure-Python fallback.

``ENGINESPEC_BACKEND=python`` forces the fallback (the extension is not even imported);
``ENGINESPEC_BACKEND=native`` makes a missing extension an error instead of a silent fallback.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

if TYPE_CHECKING:
    import enginespec._host.fallback.gguf as _pygguf
    import enginespec._host.fallback.matcher as _pymatcher
    import enginespec._host.fallback.procread as _pyprocread
    import enginespec._host.fallback.scan as _pyscanner
    from enginespec._host.shapes import ContainerRuntime

Backend = Literal["native", "python"]

_WANTED = os.environ.get("ENGINESPEC_BACKEND", "").strip().lower()
if _WANTED not in ("", "native", "python"):
    raise ImportError(f"ENGINESPEC_BACKEND={_WANTED!r}: expected 'native' or 'python'")

BACKEND: Backend = "python"
if _WANTED != "python":
    try:
        import enginespec._native as _native
    except ImportError:
        if _WANTED == "native":
            raise
    else:
        BACKEND = "native"

if TYPE_CHECKING:
    from enginespec._host.shapes import ContainerRuntime

    MatcherType: type[_pymatcher.Matcher]
    ScannerType: type[_pyscanner.ProcessScanner]
    ProcRootType: type[_pyprocread.ProcRoot]
    #: what ``ProcRootType`` makes, for annotations (the twins' interfaces are the native ones)
    ProcRoot: TypeAlias = _pyprocread.ProcRoot
    parse_cgroup: Callable[[bytes], tuple[ContainerRuntime, str, str | None] | None]
    proxy_flags: Callable[[list[str]], tuple[str, int, str, int] | None]
    read_gguf: Callable[[int, int, int, int], _pygguf.RawHeader]


def __getattr__(name: str) -> Any:
    """The implementations, looked up on first use (the Python twins import pydantic: a command
    that needs none of them, ``enginespec --version``, starts without it). The native ones have
    the same interfaces as the Python twins (see _native.pyi); the native scanner reads /proc on
    Linux and goes through the sysinfo crate elsewhere."""
    if name not in ("MatcherType", "ScannerType", "ProcRootType", "parse_cgroup", "proxy_flags", "read_gguf"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if BACKEND == "native":
        implementations: dict[str, Any] = {
            "MatcherType": _native.Matcher,
            "ScannerType": _native.ProcessScanner,
            "ProcRootType": _native.ProcRoot,
            "parse_cgroup": _native.parse_cgroup,
            "proxy_flags": _native.proxy_flags,
            "read_gguf": _native.read_gguf,
        }
    else:
        twins = {
            name: importlib.import_module(f"enginespec._host.fallback.{name}")
            for name in ("cgroup", "proxy", "gguf", "matcher", "procread", "scan")
        }
        implementations = {
            "MatcherType": twins["matcher"].Matcher,
            "ScannerType": twins["scan"].ProcessScanner,
            "ProcRootType": twins["procread"].ProcRoot,
            "parse_cgroup": twins["cgroup"].parse_cgroup,
            "proxy_flags": twins["proxy"].proxy_flags,
            "read_gguf": twins["gguf"].read_gguf,
        }
    globals().update(implementations)
    return implementations[name]


@functools.cache
def proc_root(proc: str) -> ProcRoot:
    """The backend's reader of the procfs at ``proc`` (``/proc``, or a fixture host's), made once
    per root: the facade's reads of sockets and namespaces go through it."""
    reader: type[ProcRoot] = __getattr__("ProcRootType")
    return reader(proc)
