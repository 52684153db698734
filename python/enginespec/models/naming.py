"""Model names as people say them, for tables: a Hugging Face cache path is its repo id
(``meta-llama/Llama-3.3-70B-Instruct``), a GGUF file its file name, an Ollama blob the name it was
pulled as (``qwen3:8b``). The exact model (``EngineProcess.model``) stays in JSON, ``describe``
and ``ps --wide``; these names are only what a table shows.
"""

from __future__ import annotations

import re
from collections import OrderedDict

from enginespec.definition.registry import definition_of
from enginespec.models.processes import ProcessFiles

# huggingface_hub's cache layout (file_download.py, repo_folder_name): the repo id with "/"
# written "--" under "models--", then "snapshots/<revision hash>/" and the repo's files. Hub ids
# cannot contain "--" themselves, so the split is exact.
_HF_CACHE = re.compile(r"(?:^|/)models--(?P<repo>[^/]+?)/snapshots/[^/]+(?:/(?P<file>.+?))?/*$")
#: Names found by an engine's own rule, by (pid, engine, model path); the oldest go first.
_NAMES_KEPT = 1024
_names: OrderedDict[tuple[int, str, str], str | None] = OrderedDict()


def model_name(model: str | None, pid: int | None = None, engine: str | None = None) -> str | None:
    """The name a person would give ``model``; ``pid`` is the process whose path it is and
    ``engine`` its engine, whose definition's ``registry_name`` rule (an Ollama blob's manifests)
    reads that process's files as its owner may, inside its root."""
    if not model:
        return model
    found = _HF_CACHE.search(model)
    if found:
        repo = found.group("repo").replace("--", "/")
        file = found.group("file")
        return f"{repo}/{file}" if file else repo
    definition = definition_of(engine) if engine and pid is not None else None
    if definition is not None and pid is not None and engine is not None:
        key = (pid, engine, model)
        if key not in _names:
            _names[key] = definition.registry_name(model, ProcessFiles(pid))
            if len(_names) > _NAMES_KEPT:
                _names.popitem(last=False)
        if _names[key]:
            return _names[key]
    if model.lower().endswith(".gguf") and "/" in model:
        return model.rstrip("/").rsplit("/", 1)[-1]
    return model
