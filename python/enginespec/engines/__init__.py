"""The built-in engines, one module each, and the typed view of the registry.

Adding an engine is one module here (its Signature and its EngineSpec) plus its line in
``BUILTIN_ENGINE_SPECS``; third-party engines are plugins (see :mod:`enginespec.definition.registry`).
"""

from __future__ import annotations

import enginespec.definition.registry as registry
import enginespec.engines.aphrodite as aphrodite
import enginespec.engines.docker_model_runner as docker_model_runner
import enginespec.engines.dynamo as dynamo
import enginespec.engines.exo as exo
import enginespec.engines.fastflowlm as fastflowlm
import enginespec.engines.infinity as infinity
import enginespec.engines.koboldcpp as koboldcpp
import enginespec.engines.lemonade as lemonade
import enginespec.engines.llamacpp as llamacpp
import enginespec.engines.llamacpp_python as llamacpp_python
import enginespec.engines.llamafile as llamafile
import enginespec.engines.llmman as llmman
import enginespec.engines.lmdeploy as lmdeploy
import enginespec.engines.lmstudio as lmstudio
import enginespec.engines.localai as localai
import enginespec.engines.max as modular_max
import enginespec.engines.mistralrs as mistralrs
import enginespec.engines.mlx as mlx
import enginespec.engines.mlx_vlm as mlx_vlm
import enginespec.engines.ollama as ollama
import enginespec.engines.omlx as omlx
import enginespec.engines.ramalama as ramalama
import enginespec.engines.sglang as sglang
import enginespec.engines.tabbyapi as tabbyapi
import enginespec.engines.tei as tei
import enginespec.engines.tgi as tgi
import enginespec.engines.trtllm as trtllm
import enginespec.engines.vllm as vllm
import enginespec.engines.whisper_cpp as whisper_cpp
import enginespec.engines.xinference as xinference
from enginespec.definition.registry import ENTRY_POINT_GROUP, all_signatures, engine_ids
from enginespec.errors import UnknownEngineError
from enginespec.spec import EngineSpec

#: Built-in engines, in matching order.
BUILTIN_ENGINE_SPECS: tuple[EngineSpec, ...] = (
    vllm.SPEC,
    sglang.SPEC,
    llamacpp.SPEC,
    mlx.SPEC,
    tgi.SPEC,
    lmdeploy.SPEC,
    trtllm.SPEC,
    aphrodite.SPEC,
    mlx_vlm.SPEC,
    llamacpp_python.SPEC,
    ollama.SPEC,
    llamafile.SPEC,
    koboldcpp.SPEC,
    tabbyapi.SPEC,
    localai.SPEC,
    mistralrs.SPEC,
    lmstudio.SPEC,
    lemonade.SPEC,
    docker_model_runner.SPEC,
    tei.SPEC,
    infinity.SPEC,
    whisper_cpp.SPEC,
    modular_max.SPEC,
    xinference.SPEC,
    ramalama.SPEC,
    dynamo.SPEC,
    fastflowlm.SPEC,
    omlx.SPEC,
    exo.SPEC,
    llmman.SPEC,
)
registry.register_builtin(BUILTIN_ENGINE_SPECS)


def all_engine_specs() -> tuple[EngineSpec, ...]:
    """Built-in engines followed by plugins, loaded once."""
    return tuple(definition for definition in registry.all_engines() if isinstance(definition, EngineSpec))


def get_engine_spec(engine: str) -> EngineSpec:
    """The spec of an engine id; :class:`UnknownEngineError` (a ``ValueError``) naming the known ids
    otherwise."""
    found = registry.find_engine(engine)
    if not isinstance(found, EngineSpec):
        raise UnknownEngineError(f"engine {engine!r} is registered but is not an EngineSpec")
    return found


__all__ = [
    "BUILTIN_ENGINE_SPECS",
    "ENTRY_POINT_GROUP",
    "all_engine_specs",
    "all_signatures",
    "engine_ids",
    "get_engine_spec",
]
