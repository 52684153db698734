"""What a GGUF model file says: its header (read by the Rust reader or its twin,
``_host/fallback/gguf.py``), every split file, the bytes of its layers, its attention layout."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from enginespec._host import backend as _backend
from enginespec.definition.modelrecords import Attention, Files, ModelFacts
from enginespec.models.files import HOST, ModelError, as_count

#: Caps on what is read of a GGUF header.
MAX_HEADER_BYTES = 64 << 20
MAX_STRING_BYTES = 64 << 10
MAX_ARRAY_ITEMS = 4096

#: ``general.file_type`` (``llama_ftype`` in llama.cpp's include/llama.h) by value.
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
    23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M",
    30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE",
    39: "NVFP4", 40: "Q1_0",
}  # fmt: skip
#: ggml type names by id (``ggml_type`` in ggml/include/ggml.h).
GGML_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1",
    10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS",
    17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS",
    24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M", 30: "BF16", 34: "TQ1_0",
    35: "TQ2_0", 39: "MXFP4", 40: "NVFP4", 41: "Q1_0",
}  # fmt: skip
_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


#: (name, ggml type, dims, bytes or None).
_TensorRow = tuple[str, int, list[int], "int | None"]


def read_gguf(path: str, fs: Files) -> tuple[dict[str, Any], list[_TensorRow], bool]:
    """(metadata by key, tensors, whether the file is shorter than its tensors) of one GGUF
    file; arrays as lists when kept, strings too long to keep as ``None``."""
    fd = fs.open(path)
    try:
        size = os.fstat(fd).st_size
        try:
            _version, _big, metadata, tensors, data_offset = _backend.read_gguf(
                fd, MAX_HEADER_BYTES, MAX_STRING_BYTES, MAX_ARRAY_ITEMS
            )
        except ValueError as e:
            raise ModelError(f"{path}: {e}") from None
    finally:
        os.close(fd)
    values: dict[str, Any] = {}
    for key, vtype, value in metadata:
        if vtype == 9:
            values[key] = value[2] if isinstance(value, tuple) and len(value) == 3 else None
        else:  # a string too long to keep is ("long", length)
            values[key] = None if isinstance(value, tuple) else value
    end = max((data_offset + offset + (nbytes or 0) for _n, _t, _d, offset, nbytes in tensors), default=0)
    rows = [(name, ggml_type, dims, nbytes) for name, ggml_type, dims, _offset, nbytes in tensors]
    return values, rows, end > size


def _per_layer(value: Any, layers: int | None) -> list[int] | None:
    """A per-layer hyperparameter: an int for every layer, or a list of them (one per layer)."""
    if as_count(value) is not None and layers is not None:
        return [value] * layers
    if isinstance(value, list) and all(as_count(v) is not None for v in value):
        return list(value)
    return None


def _split_files(path: str, metadata: Mapping[str, Any]) -> list[str]:
    """Every file of a split GGUF (``NAME-00001-of-00003.gguf``), from its first file."""
    count = as_count(metadata.get("split.count"))
    match = _SPLIT.match(os.path.basename(path))
    if not count or count < 2 or match is None:
        return [path]
    folder = os.path.dirname(path)
    width = len(match["count"])
    stem = match["stem"]
    return [
        os.path.join(folder, f"{stem}-{n:0{width}d}-of-{count:0{width}d}.gguf") for n in range(1, count + 1)
    ]


def gguf_facts(path: str, fs: Files = HOST) -> ModelFacts:
    """The facts of a GGUF model file (with every split file, when ``path`` is one of them)."""
    metadata, tensors, short = read_gguf(path, fs)
    problems: list[str] = []
    if short:
        problems.append(f"{path}: shorter than its tensors (truncated or still downloading)")
    files = _split_files(path, metadata)
    if files[0] != path and as_count(metadata.get("split.no")) != 0:
        # a later split names the first: read from there
        metadata, tensors, _short = read_gguf(files[0], fs)
    else:
        files[0] = path
    for other in files[1:]:
        try:
            _meta, more_tensors, short = read_gguf(other, fs)
        except ModelError as e:
            problems.append(str(e))
            continue
        if short:
            problems.append(f"{other}: shorter than its tensors (truncated or still downloading)")
        tensors = tensors + more_tensors
    found = metadata.get("general.architecture")
    arch = found if isinstance(found, str) else None

    def key(name: str) -> Any:
        return metadata.get(f"{arch}.{name}")

    layers = as_count(key("block_count"))
    heads = _per_layer(key("attention.head_count"), layers)
    kv = _per_layer(key("attention.head_count_kv"), layers) or heads
    embd = as_count(key("embedding_length"))
    head_dim_k = as_count(key("attention.key_length"))
    head_dim_v = as_count(key("attention.value_length"))
    if heads and embd and max(heads) > 0:
        head_dim_k = head_dim_k or embd // max(heads)
        head_dim_v = head_dim_v or embd // max(heads)
    window = as_count(key("attention.sliding_window"))
    by_type: dict[str, int] = {}
    layer_bytes = [0] * (layers or 0)
    input_bytes, output_bytes = 0, 0
    weight_bytes, parameters, unknown = 0, 0, False
    for name, ggml_type, dims, nbytes in tensors:
        count = 1
        for d in dims:
            count *= d
        parameters += count
        if nbytes is None:
            unknown = True
            continue
        weight_bytes += nbytes
        type_name = GGML_TYPES.get(ggml_type, str(ggml_type))
        by_type[type_name] = by_type.get(type_name, 0) + nbytes
        layer = _layer_of(name)
        if layer is not None and layer < len(layer_bytes):
            layer_bytes[layer] += nbytes
        elif name.startswith("token_embd"):
            input_bytes += nbytes
        else:
            output_bytes += nbytes
    if unknown:
        problems.append("tensors of a ggml type this reader does not know: weight bytes leave them out")
    attention = None
    if layers and kv and head_dim_k and head_dim_v:
        sliding = _sliding_layers(metadata, arch, layers) if window else 0
        mla = None
        rank = as_count(key("attention.kv_lora_rank"))
        if rank and as_count(key("attention.key_length_mla")):
            # an MLA GGUF: llama.cpp caches K only, one head of kv_lora_rank + rope
            # (llama_hparams::is_mla, llama-kv-cache.cpp: has_v = !is_mla)
            mla = (rank, as_count(key("rope.dimension_count")) or 0)
            head_dim_v = 0
        attending = [k for k in kv if k > 0]
        attention = Attention(
            layers=len(attending),
            kv_heads=max(attending, default=0),
            head_dim_k=head_dim_k,
            head_dim_v=head_dim_v,
            sliding_layers=sliding,
            sliding_window=window,
            mla=mla,
        )
    file_type = as_count(metadata.get("general.file_type"))
    title = metadata.get("general.name")
    return ModelFacts(
        format="gguf",
        files=tuple(files),
        name=title if isinstance(title, str) else None,
        architecture=arch,
        parameters=parameters or None,
        quantization=FILE_TYPES.get(file_type, str(file_type)) if file_type is not None else None,
        context_length=as_count(key("context_length")),
        layers=layers,
        attention_heads=max(heads) if heads else None,
        kv_heads=max(kv) if kv else None,
        head_dim=head_dim_k,
        embedding_length=embd,
        experts=as_count(key("expert_count")),
        experts_used=as_count(key("expert_used_count")),
        sliding_window=window,
        attention=attention,
        weight_bytes=weight_bytes if tensors else None,
        bytes_by_type=by_type,
        layer_bytes=tuple(layer_bytes),
        input_bytes=input_bytes if tensors else None,
        output_bytes=output_bytes if tensors else None,
        problems=tuple(problems),
    )


def _layer_of(name: str) -> int | None:
    if name.startswith("blk."):
        index = name[4:].partition(".")[0]
        if index.isascii() and index.isdigit():
            return int(index)
    return None


#: Architectures whose converters leave ``sliding_window_pattern`` out of the GGUF: the period
#: llama.cpp assumes (src/models/{gemma2,gemma3,gemma3n,openai-moe,cohere2}.cpp of the llama.cpp
#: llama-cpp-python 0.3.35 vendors; llama4's chunked attention is another kind and is left out).
_DEFAULT_SWA_PERIOD = {"gemma2": 2, "gemma3": 6, "gemma3n": 5, "gpt-oss": 2, "cohere2": 4}


def _sliding_layers(metadata: Mapping[str, Any], arch: str | None, layers: int) -> int:
    """How many layers attend to a window: a per-layer pattern (``sliding_window_pattern``, a
    bool per layer, or a period N: the last of every N layers is full, 0: all are windowed, as
    llama.cpp's ``llama_hparams::set_swa_pattern``), else the architecture's default period."""
    pattern = metadata.get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(pattern, list) and len(pattern) == layers and all(isinstance(p, bool) for p in pattern):
        return sum(pattern)
    n = as_count(pattern)
    if n is None and pattern is None:
        n = _DEFAULT_SWA_PERIOD.get(arch or "")
    if n == 0:
        return layers
    if n:
        return sum(1 for il in range(layers) if (il % n) < n - 1)
    return 0
