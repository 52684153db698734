"""The registry of engines: the built-in ones (registered by :mod:`enginespec.engines`) and
third-party plugins.

A plugin is a distribution declaring an entry point in the group ``enginespec.engines`` that names
an :class:`~enginespec.EngineSpec` instance or subclass. Plugins load on first use, not at import,
and are then first-class: parsed, scanned, built and listed like the built-in engines.

This module sits below the spec and the machinery, so recipes, argv parsing and scanning can ask
which engines exist without importing the engine modules.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Iterable
from importlib.metadata import entry_points

from enginespec.definition.records import EngineDefinition
from enginespec.definition.signature import Signature
from enginespec.errors import UnknownEngineError

ENTRY_POINT_GROUP = "enginespec.engines"
#: the package whose import registers the built-in engines.
BUILTIN_PACKAGE = "enginespec.engines"

_builtin: tuple[EngineDefinition, ...] = ()
_all: tuple[EngineDefinition, ...] | None = None


def register_builtin(engines: Iterable[EngineDefinition]) -> None:
    """Sets the built-in engines, in matching order (done once, by ``enginespec.engines``)."""
    global _builtin, _all
    _builtin, _all = tuple(engines), None


def _load_plugins(known: set[str]) -> list[EngineDefinition]:
    plugins: list[EngineDefinition] = []
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = entry.load()
            definition = loaded() if isinstance(loaded, type) else loaded
        except Exception as err:  # a broken plugin must not break enginespec
            warnings.warn(f"enginespec: engine plugin {entry.name!r} failed to load: {err}", stacklevel=3)
            continue
        if not isinstance(definition, EngineDefinition):
            kind = type(definition).__name__
            warnings.warn(
                f"enginespec: engine plugin {entry.name!r} is not an EngineSpec ({kind})", stacklevel=3
            )
        elif definition.id in known:
            warnings.warn(
                f"enginespec: engine plugin {entry.name!r} reuses the id {definition.id!r}", stacklevel=3
            )
        else:
            known.add(definition.id)
            plugins.append(definition)
    return plugins


def all_engines() -> tuple[EngineDefinition, ...]:
    """Built-in engines followed by plugins (loaded once, on first use)."""
    global _all
    if not _builtin:
        # Built-in engines load on first use, like plugins (`import enginespec` stays light): their
        # package registers them (register_builtin) when imported.
        importlib.import_module(BUILTIN_PACKAGE)
    if _all is None:
        _all = _builtin + tuple(_load_plugins({definition.id for definition in _builtin}))
    return _all


def engine_ids() -> tuple[str, ...]:
    return tuple(definition.id for definition in all_engines())


def engine_names() -> dict[str, str]:
    """Every name an engine is typed by (its id, then each alias another engine's id does not
    take) -> that engine's id."""
    names = {definition.id: definition.id for definition in all_engines()}
    for definition in all_engines():
        for alias in definition.aliases:
            names.setdefault(alias, definition.id)
    return names


def engine_named(name: str) -> str | None:
    """The id of the engine ``name`` (an id or an alias, any case) names, or ``None``."""
    return engine_names().get(name.lower())


def definition_of(engine: str) -> EngineDefinition | None:
    """The definition of the engine with this id, or ``None`` when none is registered."""
    return next((candidate for candidate in all_engines() if candidate.id == engine), None)


def find_engine(engine: str) -> EngineDefinition:
    """The engine with this id; :class:`UnknownEngineError` naming the known ids otherwise."""
    found = definition_of(engine)
    if found is None:
        raise UnknownEngineError(f"unknown engine {engine!r}; known engines: {', '.join(engine_ids())}")
    return found


def all_signatures() -> tuple[Signature, ...]:
    """Every registered engine's signature, in matching order."""
    return tuple(definition.signature for definition in all_engines())
