"""Model names as people say them, for tables: a Hugging Face cache path is its repo id
(``meta-llama/Llama-3.3-70B-Instruct``), a GGUF file its file name, an Ollama blob the name it was
pulled as (``qwen3:8b``). The exact model (``EngineProcess.model``) stays in JSON, ``describe``
and ``ps --wide``; these names are only what a table shows.
"""

from __future__ import annotations

import json
import re

from enginespec._procfiles import list_named, read_named

# huggingface_hub's cache layout (file_download.py, repo_folder_name): the repo id with "/"
# written "--" under "models--", then "snapshots/<revision hash>/" and the repo's files. Hub ids
# cannot contain "--" themselves, so the split is exact.
_HF_CACHE = re.compile(r"(?:^|/)models--(?P<repo>[^/]+?)/snapshots/[^/]+(?:/(?P<file>.+?))?/*$")
# Ollama's store (server/modelpath.go, server/manifest.go): blobs/sha256-<hex>, named by the
# manifests under manifests/<host>/<namespace>/<model>/<tag>, whose model layer has that digest.
_OLLAMA_BLOB = re.compile(r"^(?P<root>/.*)/blobs/sha256-(?P<digest>[0-9a-f]{64})$")
_OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
_OLLAMA_HOST, _OLLAMA_NAMESPACE = "registry.ollama.ai", "library"
#: manifests read at most per store, and bytes of one.
_MAX_MANIFESTS = 2000
_MAX_MANIFEST_BYTES = 64 * 1024

#: (pid, blob path) -> its name, or None when no readable manifest names it.
_ollama_names: dict[tuple[int, str], str | None] = {}


def model_name(model: str | None, pid: int | None = None) -> str | None:
    """The name a person would give ``model``; ``pid`` is the process whose path it is (an
    Ollama blob's manifests are read through that process's root, as its owner may read them)."""
    if not model:
        return model
    found = _HF_CACHE.search(model)
    if found:
        repo = found.group("repo").replace("--", "/")
        file = found.group("file")
        return f"{repo}/{file}" if file else repo
    blob = _OLLAMA_BLOB.match(model)
    if blob and pid is not None:
        key = (pid, model)
        if key not in _ollama_names:
            _ollama_names[key] = _ollama_name(pid, blob.group("root"), blob.group("digest"))
        return _ollama_names[key] or model
    if model.lower().endswith(".gguf") and "/" in model:
        return model.rstrip("/").rsplit("/", 1)[-1]
    return model


def _ollama_name(pid: int, root: str, digest: str) -> str | None:
    """The ``host/namespace/model/tag`` manifest under ``root/manifests`` whose model layer is
    ``digest``, listed and read as process ``pid``'s owner would, inside its root."""
    budget = [_MAX_MANIFESTS]

    def walk(path: str, parts: list[str]) -> str | None:
        if len(parts) == 4:
            budget[0] -= 1
            return _short_name(parts) if budget[0] >= 0 and _names_digest(pid, path, digest) else None
        for name in sorted(list_named(pid, path, _MAX_MANIFESTS) or ()):
            if budget[0] <= 0:
                return None
            found = walk(f"{path}/{name}", [*parts, name])
            if found:
                return found
        return None

    return walk(f"{root}/manifests", [])


def _names_digest(pid: int, path: str, digest: str) -> bool:
    """Whether the manifest at ``path`` (a regular file the process's owner may read, small)
    has ``digest`` as its model layer."""
    data = read_named(pid, path, _MAX_MANIFEST_BYTES).data
    if data is None:
        return False
    try:
        layers = json.loads(data).get("layers")
    except (ValueError, AttributeError, RecursionError):
        return False
    return isinstance(layers, list) and any(
        isinstance(layer, dict)
        and layer.get("mediaType") == _OLLAMA_MODEL_LAYER
        and layer.get("digest") == f"sha256:{digest}"
        for layer in layers
    )


def _short_name(parts: list[str]) -> str:
    """``registry.ollama.ai/library/qwen3/8b`` -> ``qwen3:8b``, as ``ollama list`` shows it."""
    host, namespace, model, tag = parts
    name = f"{model}:{tag}"
    if namespace != _OLLAMA_NAMESPACE or host != _OLLAMA_HOST:
        name = f"{namespace}/{name}"
    return name if host == _OLLAMA_HOST else f"{host}/{name}"
