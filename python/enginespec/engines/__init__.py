"""The registry of engines: the built-in ones, one module each, plus third-party plugins.

A plugin is a distribution declaring an entry point in the group ``enginespec.engines`` that names
an :class:`~enginespec.spec.EngineSpec` subclass or instance. Plugins are loaded on first use (not
at import) and are then first-class: parsed, scanned, built and listed like the built-in engines.
"""

from __future__ import annotations

import warnings
from importlib.metadata import entry_points

from enginespec.engines import llamacpp, mlx, sglang, vllm
from enginespec.signature import Signature
from enginespec.spec import EngineSpec

ENTRY_POINT_GROUP = "enginespec.engines"

#: Built-in engines, in matching order.
BUILTIN_ENGINE_SPECS: tuple[EngineSpec, ...] = (vllm.SPEC, sglang.SPEC, llamacpp.SPEC, mlx.SPEC)

_all: tuple[EngineSpec, ...] | None = None


def _load_plugins(known: set[str]) -> list[EngineSpec]:
    plugins: list[EngineSpec] = []
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = entry.load()
            spec = loaded() if isinstance(loaded, type) else loaded
        except Exception as err:  # a broken plugin must not break enginespec
            warnings.warn(f"enginespec: engine plugin {entry.name!r} failed to load: {err}", stacklevel=2)
            continue
        if not isinstance(spec, EngineSpec):
            warnings.warn(
                f"enginespec: engine plugin {entry.name!r} is not an EngineSpec ({type(spec).__name__})",
                stacklevel=2,
            )
        elif spec.id in known:
            warnings.warn(f"enginespec: engine plugin {entry.name!r} reuses the id {spec.id!r}", stacklevel=2)
        else:
            known.add(spec.id)
            plugins.append(spec)
    return plugins


def all_engine_specs() -> tuple[EngineSpec, ...]:
    """Built-in engines followed by plugins, loaded once."""
    global _all
    if _all is None:
        builtin = {spec.id for spec in BUILTIN_ENGINE_SPECS}
        _all = BUILTIN_ENGINE_SPECS + tuple(_load_plugins(builtin))
    return _all


def engine_ids() -> tuple[str, ...]:
    return tuple(spec.id for spec in all_engine_specs())


def get_engine_spec(engine: str) -> EngineSpec:
    """The spec of an engine id; ValueError naming the known ids otherwise."""
    for spec in all_engine_specs():
        if spec.id == engine:
            return spec
    raise ValueError(f"unknown engine {engine!r}; known engines: {', '.join(engine_ids())}")


def all_signatures() -> tuple[Signature, ...]:
    """Every registered engine's signature, in matching order."""
    return tuple(spec.signature for spec in all_engine_specs())


__all__ = [
    "BUILTIN_ENGINE_SPECS",
    "ENTRY_POINT_GROUP",
    "all_engine_specs",
    "all_signatures",
    "engine_ids",
    "get_engine_spec",
]
