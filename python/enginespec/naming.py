"""Model names as people say them, for tables: a Hugging Face cache path is its repo id
(``meta-llama/Llama-3.3-70B-Instruct``), a GGUF file its file name, an Ollama blob the name it was
pulled as (``qwen3:8b``). The exact model (``EngineProcess.model``) stays in JSON, ``describe``
and ``ps --wide``; these names are only what a table shows.
"""

from __future__ import annotations

import json
import os
import re
import stat

from enginespec.settings import _owner_may_read, config_location

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
    manifests = config_location(pid, f"{root}/manifests")
    seen = 0
    for directory, subdirectories, files in os.walk(manifests):
        subdirectories.sort()
        for file in sorted(files):
            seen += 1
            if seen > _MAX_MANIFESTS:
                return None
            path = os.path.join(directory, file)
            if _names_digest(pid, path, digest):
                parts = os.path.relpath(path, manifests).split(os.sep)
                return _short_name(parts) if len(parts) == 4 else None
    return None


def _names_digest(pid: int, path: str, digest: str) -> bool:
    """Whether the manifest at ``path`` (a regular file the process's owner may read, small)
    has ``digest`` as its model layer."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode) or not _owner_may_read(pid, status):
            return False
        data = os.read(fd, _MAX_MANIFEST_BYTES + 1)
    except OSError:
        return False
    finally:
        os.close(fd)
    if len(data) > _MAX_MANIFEST_BYTES:
        return False
    try:
        layers = json.loads(data).get("layers")
    except (ValueError, AttributeError):
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
