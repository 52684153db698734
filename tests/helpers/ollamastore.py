"""An Ollama model store as `ollama pull` leaves it: a blob and the manifest that names it, so a
runner's `--model BLOB` reads as the name it was pulled as (``qwen3:8b``)."""

from __future__ import annotations

import json
from pathlib import Path


def ollama_store(models: Path, name: str = "qwen3", tag: str = "8b", digest: str = "ab" * 32) -> Path:
    """The blob of ``name:tag`` under ``models`` (``blobs/`` and ``manifests/``), its manifest
    naming it as the model layer (server/manifest.go's layout)."""
    blob = models / "blobs" / f"sha256-{digest}"
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(b"GGUF")
    manifest = models / "manifests" / "registry.ollama.ai" / "library" / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    layers = [{"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": 4}]
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))
    return blob
