"""The public path of model facts (``from enginespec.modelfacts import model_facts``): the names of
``enginespec.models.facts``, loaded on first use."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from enginespec.models.facts import (
        FILE_TYPES,
        HOST,
        Attention,
        Files,
        HostFiles,
        ModelError,
        ModelFacts,
        gguf_facts,
        hf_attention,
        hf_cache_folder,
        hf_facts,
        model_facts,
        safetensors_header,
    )

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
    """The names of ``enginespec.models.facts``, loaded on first use."""
    if name in __all__:
        return getattr(importlib.import_module("enginespec.models.facts"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
