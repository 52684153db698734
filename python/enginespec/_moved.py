"""The import paths of the flat layout, kept for one release (issue 39 laid the package out in
folders): ``import enginespec.sockets`` or ``from enginespec.lifecycle import open_pidfd`` still
give what they gave, with a :class:`DeprecationWarning` naming where it lives now.

An old module that is not a folder now (``enginespec.sockets``) is made on import by
:class:`OldPaths`, a finder asked by the one ``enginespec/__init__`` places last on
:data:`sys.meta_path` (so it is asked only for names no file answers, and costs nothing to other
imports, nor this module to ``import enginespec``); an old module whose name is a folder now
(``enginespec.lifecycle``, ``enginespec.gpus``, ``enginespec.scanning``, ``enginespec.definition``)
gives its old names through the folder's ``__getattr__`` (:func:`forwarded`). Either way a name is
looked up, on first use, in the modules that hold what the old module held.
"""

from __future__ import annotations

import importlib
import types
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import importlib.abc
    import importlib.machinery

#: Each old module, and the modules that hold its names now (looked up in this order).
MOVED: dict[str, tuple[str, ...]] = {
    "status": ("healthrecord",),
    "version": ("packageversion",),
    "masking": ("untrusted.masking",),
    "safewrite": ("untrusted.safewrite",),
    "boundary": ("untrusted.boundary",),
    "signature": ("definition.signature",),
    "definition": ("definition.records", "definition.modelrecords", "definition.accelerators"),
    "registry": ("definition.registry",),
    "versions": ("definition.specifiers",),
    "launching": ("definition.launching",),
    "hardware": ("_host.hardware", "definition.accelerators"),
    "gpus": ("gpus.reader", "gpus.vendor", "gpus.nvidia", "gpus.drm", "gpus.amd", "gpus.ids"),
    "modelfacts": (
        "models.facts",
        "models.files",
        "models.gguf",
        "models.huggingface",
        "definition.modelrecords",
    ),
    "processmodels": ("models.processes",),
    "naming": ("models.naming",),
    "fit": ("models.fit", "definition.modelrecords"),
    "engineprocess": ("process.record",),
    "argv": ("process.argv",),
    "settings": ("process.settings",),
    "containers": ("process.containers",),
    "sockets": ("process.sockets",),
    "liveness": ("process.liveness",),
    "urls": ("process.urls",),
    "health": ("health.checks",),
    "reaching": ("health.reaching",),
    "load": ("health.load",),
    "vitals": ("health.vitals",),
    "scanning": ("scanning.scanner",),
    "scanstages": ("scanning.stages",),
    "watching": ("scanning.watch",),
    "recipe": ("lifecycle.recipe",),
    "commands": ("lifecycle.commands",),
    "installing": ("lifecycle.installing",),
    "probing": ("lifecycle.probing",),
    "lifecycle": (
        "lifecycle.running",
        "lifecycle.handle",
        "lifecycle.starting",
        "lifecycle.processtree",
        "lifecycle.readiness",
        "lifecycle.ports",
        "lifecycle.stopping",
        "lifecycle.containerstop",
        "lifecycle.supervising",
        "lifecycle.logsources",
    ),
    "logbook": ("lifecycle.logbook",),
    "exporter": ("fleet.exporter",),
    "feeds": ("fleet.feeds",),
    "agent": ("fleet.agent",),
    "agentviews": ("fleet.agent_views",),
    "agentwire": ("fleet.agent_wire",),
    "disclosure": ("fleet.disclosure",),
    "remote": ("fleet.remote",),
    "cli_lifecycle": ("cli.lifecycle",),
    "cliargs": ("cli.args",),
    "modelcli": ("cli.models",),
    "layout": ("cli.table",),
    "targets": ("cli.targets",),
}

#: Names of an old module that were renamed as they moved: (old module, old name) -> new name.
#: The key of one running engine is ``instance_id`` (``engine`` is the engine's id).
RENAMED: dict[tuple[str, str], str] = {
    ("engineprocess", "make_engine_id"): "make_instance_id",
    ("scanning", "unique_engine_ids"): "unique_instance_ids",
}

_PACKAGE = "enginespec"


def forwarded(old: str, name: str) -> Any:
    """``name`` of the old module ``enginespec.<old>``, from the module that holds it now (under
    its new name, if it was renamed), with a :class:`DeprecationWarning` naming that module;
    ``AttributeError`` when none does."""
    new = RENAMED.get((old, name), name)
    for home in MOVED[old]:
        module = importlib.import_module(f"{_PACKAGE}.{home}")
        if new in vars(module):
            value = vars(module)[new]
            # a class or function is named where it is defined (``lifecycle.running`` imports
            # ``open_pidfd`` from ``lifecycle.handle``)
            defined = getattr(value, "__module__", None)
            where = (
                defined
                if isinstance(defined, str) and defined.startswith(f"{_PACKAGE}.")
                else module.__name__
            )
            warnings.warn(
                f"enginespec.{old}.{name} is {where}.{new} now; the old path goes in the next release",
                DeprecationWarning,
                stacklevel=3,
            )
            return value
    raise AttributeError(f"module 'enginespec.{old}' has no attribute {name!r}")


class _OldModule(types.ModuleType):
    """An old module: each name it had, looked up where it lives now."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name != "__version__":  # the one dunder an old module gave
            raise AttributeError(name)
        return forwarded(self.__name__.removeprefix(f"{_PACKAGE}."), name)


class OldPaths:
    """Finds and loads ``enginespec.<old>`` for the old modules that are not folders now (a finder
    and loader by protocol: ``importlib.abc`` would cost ``import enginespec`` its imports)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        package, _, old = fullname.partition(".")
        if package != _PACKAGE or old not in MOVED or "." in old:
            return None
        import importlib.machinery  # only when an old path is imported: `import enginespec` stays light

        return importlib.machinery.ModuleSpec(fullname, cast("importlib.abc.Loader", self))

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _OldModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        old = module.__name__.removeprefix(f"{_PACKAGE}.")
        homes = ", ".join(f"enginespec.{home}" for home in MOVED[old])
        warnings.warn(
            f"{module.__name__} is {homes} now; the old path goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
