"""What a Hugging Face model folder says: its ``config.json``, ``generation_config.json`` and
safetensors headers (never the weights), and where a model id is in a Hugging Face cache."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from enginespec.definition.modelrecords import Attention, Files, ModelFacts
from enginespec.models.files import (
    HOST,
    MAX_COUNT,
    MAX_HEADER_VALUES,
    ModelError,
    as_count,
    read_capped,
    read_json,
)
from enginespec.untrusted.documents import DocumentError, parse_json

#: The largest safetensors header read (of one shard).
MAX_SAFETENSORS_HEADER = 16 << 20
#: The most shards of one model read (the largest published models have about 200): an index
#: naming more (4,096 links to one header) is not read, and that is said.
MAX_SHARDS = 1024
#: The most bytes of safetensors headers read for one model, every shard together (a 405B
#: model's 191 shards hold about 20 MB): beyond it the weights are not counted, and that is said.
MAX_HEADERS_TOTAL = 64 << 20

# huggingface_hub's cache layout (file_download.py, repo_folder_name): the repo id with "/"
# written "--" under "models--", then "snapshots/<revision hash>/" and the repo's files. Hub ids
# cannot contain "--" themselves, so the split is exact.
_HF_CACHE = re.compile(r"(?:^|/)models--(?P<repo>[^/]+?)/snapshots/[^/]+(?:/(?P<file>.+?))?/*$")


def hub_name(path: str) -> str | None:
    """The repo id of a path in a Hugging Face cache (``.../models--Qwen--Qwen3-0.6B/snapshots/
    <hash>`` is ``Qwen/Qwen3-0.6B``; a file in it ``Qwen/Qwen3-0.6B/<file>``), else ``None``."""
    found = _HF_CACHE.search(path)
    if not found:
        return None
    repo = found.group("repo").replace("--", "/")
    file = found.group("file")
    return f"{repo}/{file}" if file else repo


def _config_int(config: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        value = as_count(config.get(name))
        if value is not None:
            return value
    return None


def hf_attention(config: Mapping[str, Any]) -> Attention | None:
    """The attention layout a ``config.json`` (its ``text_config`` for a multimodal model) gives,
    as the transformers configurations define the fields."""
    text = config.get("text_config")
    if isinstance(text, dict):
        config = {**config, **text}
    layers = _config_int(config, "num_hidden_layers", "n_layer", "num_layers")
    heads = _config_int(config, "num_attention_heads", "n_head")
    if not layers or not heads:
        return None
    kv = _config_int(config, "num_key_value_heads", "num_kv_heads", "n_head_kv")
    if kv is None:
        kv = 1 if config.get("multi_query") is True else heads
    hidden = _config_int(config, "hidden_size", "n_embd", "d_model")
    head_dim = _config_int(config, "head_dim") or (hidden // heads if hidden else None)
    rank = _config_int(config, "kv_lora_rank")
    if rank:
        # DeepSeek V2/V3: one latent of kv_lora_rank + qk_rope_head_dim per token and layer
        rope = _config_int(config, "qk_rope_head_dim") or 0
        return Attention(layers=layers, kv_heads=1, head_dim_k=rank + rope, head_dim_v=0, mla=(rank, rope))
    if not head_dim:
        return None
    window = _config_int(config, "sliding_window")
    sliding = 0
    types = config.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        sliding = sum(1 for t in types if t == "sliding_attention")
    elif window and config.get("use_sliding_window") is not False:
        pattern = _config_int(config, "sliding_window_pattern")
        if pattern:  # Gemma 3: every pattern-th layer is global
            sliding = sum(1 for il in range(layers) if (il + 1) % pattern != 0)
        elif config.get("model_type") in ("mistral", "mixtral") or "use_sliding_window" in config:
            sliding = layers
    if config.get("use_sliding_window") is False:
        sliding = 0
    return Attention(
        layers=layers,
        kv_heads=kv,
        head_dim_k=head_dim,
        head_dim_v=head_dim,
        sliding_layers=sliding,
        sliding_window=window if sliding else None,
    )


def _quantization(config: Mapping[str, Any]) -> str | None:
    quant = config.get("quantization_config")
    if isinstance(quant, dict) and isinstance(quant.get("quant_method"), str):
        bits = as_count(quant.get("bits"))
        return f"{quant['quant_method']}{f' {bits}-bit' if bits else ''}"
    dtype = config.get("torch_dtype", config.get("dtype"))
    text = config.get("text_config")
    if dtype is None and isinstance(text, dict):
        dtype = text.get("torch_dtype", text.get("dtype"))
    return dtype if isinstance(dtype, str) else None


def safetensors_header(path: str, fs: Files = HOST) -> dict[str, Any]:
    """The JSON header of a safetensors file (8-byte little-endian length, then JSON), capped."""
    fd = fs.open(path)
    try:
        return _header_of(fd, path)
    finally:
        os.close(fd)


def _header_length(fd: int, path: str) -> int:
    size = os.fstat(fd).st_size
    head = os.pread(fd, 8, 0)
    if len(head) < 8:
        raise ModelError(f"{path}: shorter than a safetensors header")
    length = int.from_bytes(head, "little")
    if length > min(MAX_SAFETENSORS_HEADER, size - 8):
        raise ModelError(f"{path}: header length {length} exceeds the file or the cap")
    return length


def _header_of(fd: int, path: str, length: int | None = None) -> dict[str, Any]:
    data = os.pread(fd, _header_length(fd, path) if length is None else length, 8)
    try:
        header = parse_json(data, max_values=MAX_HEADER_VALUES)
    except DocumentError as e:
        raise ModelError(f"{path}: safetensors header {e}") from None
    if not isinstance(header, dict):
        raise ModelError(f"{path}: safetensors header is not a JSON object")
    return header


def hf_facts(folder: str, fs: Files = HOST) -> ModelFacts:
    """The facts of a Hugging Face model folder: its configs and its weights' headers only."""
    config_path = os.path.join(folder, "config.json")
    config = read_json(config_path, fs)
    files = [config_path]
    problems: list[str] = []
    generation: dict[str, Any] = {}
    gen_path = os.path.join(folder, "generation_config.json")
    if fs.kind(gen_path) is not None:
        try:
            generation = read_json(gen_path, fs)
            files.append(gen_path)
        except ModelError as e:
            problems.append(str(e))
    text = config.get("text_config")
    merged = {**config, **text} if isinstance(text, dict) else config
    attention = hf_attention(config)
    weight_bytes, parameters, by_type = _hf_weights(folder, fs, files, problems)
    archs = config.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    model_type = config.get("model_type")
    heads = _config_int(merged, "num_attention_heads", "n_head")
    return ModelFacts(
        format="huggingface",
        files=tuple(files),
        # a cache snapshot's folder is a revision hash: its repo id is the model's name
        name=hub_name(folder) or os.path.basename(os.path.normpath(folder)),
        architecture=arch or (model_type if isinstance(model_type, str) else None),
        parameters=parameters,
        quantization=_quantization(config),
        context_length=_config_int(merged, "max_position_embeddings", "n_positions", "max_sequence_length"),
        layers=_config_int(merged, "num_hidden_layers", "n_layer", "num_layers"),
        attention_heads=heads,
        kv_heads=attention.kv_heads if attention else None,
        head_dim=attention.head_dim_k if attention else None,
        embedding_length=_config_int(merged, "hidden_size", "n_embd", "d_model"),
        experts=_config_int(merged, "num_local_experts", "n_routed_experts", "num_experts"),
        experts_used=_config_int(merged, "num_experts_per_tok", "moe_topk"),
        sliding_window=attention.sliding_window if attention else None,
        attention=attention,
        weight_bytes=weight_bytes,
        bytes_by_type=by_type,
        generation={k: v for k, v in generation.items() if isinstance(v, int | float | str | bool)},
        problems=tuple(problems),
    )


def _hf_weights(
    folder: str, fs: Files, files: list[str], problems: list[str]
) -> tuple[int | None, int | None, dict[str, int]]:
    """(bytes, parameters, bytes by dtype) from the safetensors headers (the index's
    ``total_size`` when a shard cannot be read)."""
    index_path = os.path.join(folder, "model.safetensors.index.json")
    shards: list[str] = []
    total: int | None = None
    if fs.kind(index_path) is not None:
        index = read_json(index_path, fs, 64 << 20)
        files.append(index_path)
        meta = index.get("metadata")
        total = as_count(meta.get("total_size")) if isinstance(meta, dict) else None
        weight_map = index.get("weight_map")
        if isinstance(weight_map, dict):
            shards = sorted({v for v in weight_map.values() if isinstance(v, str) and "/" not in v})
    elif fs.kind(os.path.join(folder, "model.safetensors")) is not None:
        shards = ["model.safetensors"]
    if len(shards) > MAX_SHARDS:
        problems.append(f"{index_path}: {len(shards)} shards, more than {MAX_SHARDS}: weights not read")
        return total, None, {}
    nbytes, params = 0, 0
    by_type: dict[str, int] = {}
    seen: set[tuple[int, int]] = set()
    budget = MAX_HEADERS_TOTAL
    for number, shard in enumerate(shards):
        path = os.path.join(folder, shard)
        try:
            header, budget = _shard_header(path, fs, seen, budget)
        except ModelError as e:
            problems.append(str(e))
            return total, None, {}
        if budget < 0:  # cut at the cap: say so, and how far the reading went
            problems.append(
                f"{folder}: safetensors headers over {MAX_HEADERS_TOTAL} bytes in all: "
                f"{number} of {len(shards)} shards read, weights not counted"
            )
            return total, None, {}
        if header is None:  # another name of a file already read (a link): its weights once
            continue
        files.append(path)
        for name, info in header.items():
            if name == "__metadata__" or not isinstance(info, dict):
                continue
            counted = _tensor(info)
            if counted is None:
                continue
            count, size, dtype = counted
            params += count
            if size is not None:
                nbytes += size
                if dtype is not None:
                    by_type[dtype] = by_type.get(dtype, 0) + size
        if params > MAX_COUNT or nbytes > MAX_COUNT:
            problems.append(f"{path}: tensors of more than {MAX_COUNT} elements or bytes: not counted")
            return total, None, {}
    if not shards:
        return total, None, {}
    return (nbytes or total), (params or None), by_type


def _shard_header(
    path: str, fs: Files, seen: set[tuple[int, int]], budget: int
) -> tuple[dict[str, Any] | None, int]:
    """(the shard's header, or ``None`` when its file was read under another name; the bytes
    of headers still allowed): every name of one file (4,096 hard or symbolic links) is read
    once, and all headers together at most MAX_HEADERS_TOTAL bytes (past it: ``(None, -1)``)."""
    fd = fs.open(path)
    try:
        info = os.fstat(fd)
        identity = (info.st_dev, info.st_ino)
        if identity in seen:
            return None, budget
        seen.add(identity)
        length = _header_length(fd, path)
        if length > budget:
            return None, -1
        return _header_of(fd, path, length), budget - length
    finally:
        os.close(fd)


def _tensor(info: Mapping[str, Any]) -> tuple[int, int | None, str | None] | None:
    """(elements, bytes or ``None``, dtype) of one tensor of a header, or ``None`` when its
    shape is not a list of counts or holds more than MAX_COUNT elements."""
    shape, dtype, offsets = info.get("shape"), info.get("dtype"), info.get("data_offsets")
    if not (isinstance(shape, list) and all(as_count(d) is not None for d in shape)):
        return None
    count = 1
    for d in shape:
        count = min(count * d, MAX_COUNT + 1)  # never a 64-digit product of 64-bit dims
    if count > MAX_COUNT:
        return None
    size = None
    if isinstance(offsets, list) and len(offsets) == 2 and all(as_count(o) is not None for o in offsets):
        size = offsets[1] - offsets[0] if offsets[1] >= offsets[0] else None
    return count, size, dtype if isinstance(dtype, str) else None


# -- where a model is ---------------------------------------------------------------------------


def hf_cache_folder(
    model_id: str, environ: Mapping[str, str], home: str | None, fs: Files = HOST
) -> str | None:
    """The snapshot folder of ``org/name`` in the Hugging Face cache that ``environ`` (the
    process's environment) and ``home`` (its owner's) point at: ``HF_HUB_CACHE``, else
    ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``; the revision ``refs/main`` names."""
    parts = model_id.split("/")
    if len(parts) != 2 or not all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", p) for p in parts):
        return None
    hub = environ.get("HF_HUB_CACHE") or environ.get("HUGGINGFACE_HUB_CACHE")
    if not hub:
        hf_home = environ.get("HF_HOME") or (os.path.join(home, ".cache", "huggingface") if home else None)
        hub = os.path.join(hf_home, "hub") if hf_home else None
    if not hub or not os.path.isabs(hub):
        return None
    repo = os.path.join(hub, f"models--{parts[0]}--{parts[1]}")
    try:
        revision = read_capped(os.path.join(repo, "refs", "main"), 256, fs).decode("ascii").strip()
    except (ModelError, UnicodeDecodeError):
        return None
    if not re.fullmatch(r"[0-9a-f]{40}", revision):
        return None
    snapshot = os.path.join(repo, "snapshots", revision)
    return snapshot if fs.kind(snapshot) == "directory" else None
