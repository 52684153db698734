"""The public path of model facts (``from enginespec.modelfacts import model_facts``): the names of
``enginespec.models`` (and the records of ``enginespec.definition.modelrecords``) a caller reads a
model's files with, loaded on first use."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from enginespec.definition.modelrecords import Attention, Files, ModelFacts
    from enginespec.models.facts import model_facts
    from enginespec.models.files import HOST, HostFiles, ModelError
    from enginespec.models.gguf import FILE_TYPES, gguf_facts
    from enginespec.models.huggingface import hf_attention, hf_cache_folder, hf_facts, safetensors_header

#: Where each name lives.
_HOMES = {
    "FILE_TYPES": "enginespec.models.gguf",
    "HOST": "enginespec.models.files",
    "Attention": "enginespec.definition.modelrecords",
    "Files": "enginespec.definition.modelrecords",
    "HostFiles": "enginespec.models.files",
    "ModelError": "enginespec.models.files",
    "ModelFacts": "enginespec.definition.modelrecords",
    "gguf_facts": "enginespec.models.gguf",
    "hf_attention": "enginespec.models.huggingface",
    "hf_cache_folder": "enginespec.models.huggingface",
    "hf_facts": "enginespec.models.huggingface",
    "model_facts": "enginespec.models.facts",
    "safetensors_header": "enginespec.models.huggingface",
}

__all__ = [
    "FILE_TYPES",
    "HOST",
    "Attention",
    "Files",
    "HostFiles",
    "ModelError",
    "ModelFacts",
    "gguf_facts",
    "hf_attention",
    "hf_cache_folder",
    "hf_facts",
    "model_facts",
    "safetensors_header",
]


def __getattr__(name: str) -> Any:
    """The names above, each loaded from its module on first use."""
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    from enginespec._moved import forwarded  # the flat module's other names, deprecated

    return forwarded("modelfacts", name)
