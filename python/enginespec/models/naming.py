"""Model names as people say them, for tables: a Hugging Face cache path is its repo id
(``meta-llama/Llama-3.3-70B-Instruct``), a GGUF file its file name, an Ollama blob the name it was
pulled as (``qwen3:8b``). This name is the one shown everywhere (the table, ``describe``,
``enginespec model``, the exporter's and the feeds' ``model`` label, ``EngineProcess.model_name``);
the exact model as the engine was given it (``EngineProcess.model``) has its own field, label
(``model_path``) and ``ps --wide`` column.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from enginespec._host.root import HOST_ROOT, HostRoot
from enginespec.definition.registry import definition_of
from enginespec.models.huggingface import hub_name
from enginespec.models.processes import ProcessFiles

#: Names found by an engine's own rule, by (host, pid, engine, model path); the oldest go first.
_NAMES_KEPT = 1024
_names: OrderedDict[tuple[HostRoot, int, str, str], str | None] = OrderedDict()
_names_lock = threading.Lock()


def model_name(
    model: str | None, pid: int | None = None, engine: str | None = None, root: HostRoot = HOST_ROOT
) -> str | None:
    """The name a person would give ``model``; ``pid`` is the process whose path it is (on the
    host under ``root``) and ``engine`` its engine, whose definition's ``registry_name`` rule (an
    Ollama blob's manifests) reads that process's files as its owner may, inside its root."""
    if not model:
        return model
    hub = hub_name(model)
    if hub:
        return hub
    definition = definition_of(engine) if engine and pid is not None else None
    if definition is not None and pid is not None and engine is not None:
        key = (root, pid, engine, model)
        with _names_lock:
            known = key in _names
            registered = _names.get(key)
        if not known:
            # read outside the lock: a slow filesystem delays only this name
            registered = definition.registry_name(model, ProcessFiles(pid, root))
            with _names_lock:
                _names[key] = registered
                while len(_names) > _NAMES_KEPT:
                    _names.popitem(last=False)
        if registered:
            return registered
    if model.lower().endswith(".gguf") and "/" in model:
        return model.rstrip("/").rsplit("/", 1)[-1]
    return model
