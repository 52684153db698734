"""What a model is, read from its files and never from its weights: a GGUF file's header (the Rust
reader or its twin, see ``_pygguf``), or a Hugging Face folder's ``config.json``,
``generation_config.json`` and safetensors headers; and what its KV cache costs per token.

The engines' own rules for sizing memory from their arguments live in the engine modules
(``engines/llamacpp.py``, ``engines/vllm.py``); this module knows only the file formats.
Every file is untrusted: opened only if it is a regular file, read with size caps, parsed with
limits; a problem is an error naming the file and the field, never a crash.
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Mapping
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from enginespec._host import backend as _backend
from enginespec._host.procfiles import reopen
from enginespec.untrusted.documents import DocumentError, parse_json

#: Caps on what is read of a model's files.
MAX_HEADER_BYTES = 64 << 20
MAX_STRING_BYTES = 64 << 10
MAX_ARRAY_ITEMS = 4096
MAX_JSON_BYTES = 4 << 20
MAX_SAFETENSORS_HEADER = 16 << 20
#: The most shards of one model read (the largest published models have about 200): an index
#: naming more (4,096 links to one header) is not read, and that is said.
MAX_SHARDS = 1024
#: The most bytes of safetensors headers read for one model, every shard together (a 405B
#: model's 191 shards hold about 20 MB): beyond it the weights are not counted, and that is said.
MAX_HEADERS_TOTAL = 64 << 20
#: The most values a safetensors header or index may hold (about one per 10 bytes of its cap).
MAX_HEADER_VALUES = 1 << 20
#: The largest count of elements, bytes or parameters taken from a model's files: a model file
#: states them in 64 bits; a sum or product beyond that is a file that lies.
MAX_COUNT = (1 << 63) - 1

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
#: Bytes of one element of a safetensors dtype.
_SAFETENSORS_DTYPES = {
    "F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2,
    "U16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BOOL": 1,
}  # fmt: skip
_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


class ModelError(ValueError):
    """A model's files could not be read or make no sense; the message names the file and why."""


class Attention(BaseModel):
    """How the model's attention layers cache keys and values (what sizes a KV cache)."""

    model_config = ConfigDict(frozen=True)

    #: layers with attention (all of ``layers`` unless a hybrid model has others).
    layers: int
    kv_heads: int
    #: key and value sizes of one cached head. Multi-head latent attention caches one vector per
    #: token and layer: ``kv_heads`` 1, ``head_dim_k`` its size, ``head_dim_v`` 0 (see ``mla``).
    head_dim_k: int
    head_dim_v: int
    #: of those layers, how many attend to a window only, and its width in tokens.
    sliding_layers: int = 0
    sliding_window: int | None = None
    #: multi-head latent attention (DeepSeek): (``kv_lora_rank``, ``qk_rope_head_dim``); the
    #: cache holds their sum per token and layer (vLLM's MLA backends, llama.cpp's MLA GGUFs).
    mla: tuple[int, int] | None = None

    def values_per_token(self, layer_kind: Literal["full", "sliding"]) -> int:
        """Values (K and V) one token costs in the layers of one kind."""
        count = self.layers - self.sliding_layers if layer_kind == "full" else self.sliding_layers
        return count * self.kv_heads * (self.head_dim_k + self.head_dim_v)


class MemoryEstimate(BaseModel):
    """What an engine allocates for a model with its actual arguments, by the engine's own rule.

    ``weights`` and ``kv_cache`` are by device (``CPU``, ``GPU0``...); ``claim`` is what the
    engine takes whatever the model needs (vLLM: ``gpu_memory_utilization`` x the device's
    memory), when it works that way. ``rule`` says in words what was applied, ``notes`` what
    was assumed."""

    model_config = ConfigDict(frozen=True)

    engine: str
    rule: str
    #: the context the engine will have (after its own rounding), in tokens, and per sequence.
    context: int | None = None
    context_per_sequence: int | None = None
    sequences: int | None = None
    cache_type_k: str | None = None
    cache_type_v: str | None = None
    weights: Mapping[str, int] = {}
    kv_cache: Mapping[str, int] = {}
    claim: Mapping[str, int] = {}
    notes: tuple[str, ...] = ()

    @property
    def weight_bytes(self) -> int:
        return sum(self.weights.values())

    @property
    def kv_cache_bytes(self) -> int:
        return sum(self.kv_cache.values())


class LoggedMemory(BaseModel):
    """What an engine printed about its memory at start-up, in bytes by device (as printed:
    rounded to the log's precision)."""

    model_config = ConfigDict(frozen=True)

    engine: str
    weights: Mapping[str, int] = {}
    kv_cache: Mapping[str, int] = {}
    compute: Mapping[str, int] = {}
    #: vLLM: the memory left for the KV cache, and how many tokens it holds.
    kv_cache_available: int | None = None
    kv_cache_tokens: int | None = None


class ModelFacts(BaseModel):
    """What a model's files say about it (``None``: the files do not say)."""

    model_config = ConfigDict(frozen=True)

    format: Literal["gguf", "huggingface"]
    #: the files read: a GGUF (every split), or a folder's config and weight headers.
    files: tuple[str, ...]
    name: str | None = None
    #: the name the model is known by where it came from: Ollama's ``name:tag`` for a blob.
    registry_name: str | None = None
    architecture: str | None = None
    parameters: int | None = None
    #: ``Q4_K_M``, ``BF16``...: a GGUF's ``general.file_type``; Hugging Face: the
    #: ``quantization_config`` method (with its bits), else the weights' dtype.
    quantization: str | None = None
    context_length: int | None = None
    layers: int | None = None
    attention_heads: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    embedding_length: int | None = None
    experts: int | None = None
    experts_used: int | None = None
    sliding_window: int | None = None
    attention: Attention | None = None
    #: bytes of the weights as stored (every tensor of every split / shard).
    weight_bytes: int | None = None
    #: GGUF: bytes by ggml type name; Hugging Face: by safetensors dtype.
    bytes_by_type: Mapping[str, int] = {}
    #: GGUF: bytes of the repeating layers by index (``blk.N.*``), of the input embeddings
    #: (``token_embd.*``) and of the rest (output head and norms), for offload estimates.
    layer_bytes: tuple[int, ...] = ()
    input_bytes: int | None = None
    output_bytes: int | None = None
    #: Hugging Face: ``generation_config.json`` keys (``max_length``, ``temperature``...).
    generation: Mapping[str, Any] = {}
    #: what was odd (a split file missing, a file shorter than its tensors): facts are partial.
    problems: tuple[str, ...] = ()
    #: for a running engine's model: the memory its engine allocates with its actual arguments,
    #: what it printed at start-up (when its log is at hand), and what its process tree holds on
    #: each GPU now (``EngineProcess.gpus``, where this build has the GPU ledger).
    estimate: MemoryEstimate | None = None
    logged: LoggedMemory | None = None
    measured: Mapping[str, int] = {}

    def kv_bytes_per_token(self, bytes_per_value: float = 2.0) -> float | None:
        """Bytes one cached token costs over every attention layer at ``bytes_per_value``
        (2: f16/bf16), sliding-window layers included (what a token inside their window costs)."""
        if self.attention is None:
            return None
        values = self.attention.values_per_token("full") + self.attention.values_per_token("sliding")
        return values * bytes_per_value


# -- files -------------------------------------------------------------------------------------


class Files(Protocol):
    """Where a model's files are read from: :data:`HOST` (this process's own view, for a path a
    user gives), or a running process's view (``_procfiles.ProcessFiles``: inside its root, as
    its owner). Failures raise :class:`ModelError` naming the path."""

    def open(self, path: str) -> int:
        """An fd for reading ``path``, which must be a regular file (never a FIFO or a device)."""
        ...

    def kind(self, path: str) -> Literal["file", "directory", "other"] | None:
        """What ``path`` is (its symlinks followed); ``None`` when nothing can be seen there."""
        ...

    def names(self, path: str, limit: int) -> list[str] | None:
        """At most ``limit`` names in directory ``path``; ``None`` when it cannot be listed."""
        ...


class HostFiles:
    """Files as this process itself may read them."""

    def open(self, path: str) -> int:
        """Checked on an ``O_PATH`` fd before anything is opened for reading; where there is no
        ``O_PATH`` (macOS), by ``stat`` first, opened non-blocking, then checked on the fd."""
        readonly = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        o_path = getattr(os, "O_PATH", 0)
        try:
            if not o_path:
                if not stat.S_ISREG(os.stat(path).st_mode):
                    raise ModelError(f"{path}: not a regular file")
                fd = os.open(path, readonly)
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    os.close(fd)
                    raise ModelError(f"{path}: not a regular file")
                return fd
            probe = os.open(path, o_path | os.O_CLOEXEC)
        except OSError as e:
            raise ModelError(f"{path}: {e.strerror}") from None
        try:
            if not stat.S_ISREG(os.fstat(probe).st_mode):
                raise ModelError(f"{path}: not a regular file")
            try:
                return reopen(probe, readonly)
            except OSError as e:
                raise ModelError(f"{path}: {e.strerror}") from None
        finally:
            os.close(probe)

    def kind(self, path: str) -> Literal["file", "directory", "other"] | None:
        try:
            mode = os.stat(path).st_mode
        except (OSError, ValueError):
            return None
        return "directory" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"

    def names(self, path: str, limit: int) -> list[str] | None:
        try:
            with os.scandir(path) as entries:
                return [entry.name for _, entry in zip(range(limit), entries, strict=False)]
        except (OSError, ValueError):
            return None


#: This process's own view of the filesystem.
HOST: Files = HostFiles()


def read_capped(path: str, limit: int, fs: Files = HOST) -> bytes:
    fd = fs.open(path)
    try:
        data = os.pread(fd, limit + 1, 0)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ModelError(f"{path}: larger than {limit} bytes")
    return data


def read_json(
    path: str, fs: Files, limit: int = MAX_JSON_BYTES, values: int = MAX_HEADER_VALUES
) -> dict[str, Any]:
    """A JSON object a model's file holds, read through the one bounded reader (depth, size,
    numbers finite and of 64 bits): anything else is a ModelError naming the file and why."""
    try:
        value = parse_json(read_capped(path, limit, fs), max_values=values)
    except DocumentError as e:
        raise ModelError(f"{path}: {e}") from None
    if not isinstance(value, dict):
        raise ModelError(f"{path}: not a JSON object")
    return value


def argv_number(flag: str, text: str, low: float, high: float, *, integer: bool = False) -> float:
    """A number an engine's argv gives for ``flag``, finite and within ``low..high`` (``1e400``,
    ``nan``, a 400-digit integer are a ModelError naming the flag, never an OverflowError in
    an estimate); ``integer``: written in decimal digits, as the engine's own parser wants."""
    shown = text if len(text) <= 32 else text[:32] + "..."
    try:
        # a 400-digit integer is out of range, not converted (and never a 4,300-digit one)
        value: float = (
            (math.inf if len(text.strip().lstrip("+-")) > 20 else int(text, 10)) if integer else float(text)
        )
    except ValueError:
        raise ModelError(f"{flag} {shown!r}: not {'an integer' if integer else 'a number'}") from None
    if not (math.isfinite(value) and low <= value <= high):
        raise ModelError(f"{flag} {shown!r}: out of range ({low:g} to {high:g})")
    return value


# -- GGUF ----------------------------------------------------------------------------------------

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


def _int(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT
    return value if ok else None


def _per_layer(value: Any, layers: int | None) -> list[int] | None:
    """A per-layer hyperparameter: an int for every layer, or a list of them (one per layer)."""
    if _int(value) is not None and layers is not None:
        return [value] * layers
    if isinstance(value, list) and all(_int(v) is not None for v in value):
        return list(value)
    return None


def _split_files(path: str, metadata: Mapping[str, Any]) -> list[str]:
    """Every file of a split GGUF (``NAME-00001-of-00003.gguf``), from its first file."""
    count = _int(metadata.get("split.count"))
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
    if files[0] != path and _int(metadata.get("split.no")) != 0:
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

    layers = _int(key("block_count"))
    heads = _per_layer(key("attention.head_count"), layers)
    kv = _per_layer(key("attention.head_count_kv"), layers) or heads
    embd = _int(key("embedding_length"))
    head_dim_k = _int(key("attention.key_length"))
    head_dim_v = _int(key("attention.value_length"))
    if heads and embd and max(heads) > 0:
        head_dim_k = head_dim_k or embd // max(heads)
        head_dim_v = head_dim_v or embd // max(heads)
    window = _int(key("attention.sliding_window"))
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
        rank = _int(key("attention.kv_lora_rank"))
        if rank and _int(key("attention.key_length_mla")):
            # an MLA GGUF: llama.cpp caches K only, one head of kv_lora_rank + rope
            # (llama_hparams::is_mla, llama-kv-cache.cpp: has_v = !is_mla)
            mla = (rank, _int(key("rope.dimension_count")) or 0)
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
    file_type = _int(metadata.get("general.file_type"))
    title = metadata.get("general.name")
    return ModelFacts(
        format="gguf",
        files=tuple(files),
        name=title if isinstance(title, str) else None,
        architecture=arch,
        parameters=parameters or None,
        quantization=FILE_TYPES.get(file_type, str(file_type)) if file_type is not None else None,
        context_length=_int(key("context_length")),
        layers=layers,
        attention_heads=max(heads) if heads else None,
        kv_heads=max(kv) if kv else None,
        head_dim=head_dim_k,
        embedding_length=embd,
        experts=_int(key("expert_count")),
        experts_used=_int(key("expert_used_count")),
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
    n = _int(pattern)
    if n is None and pattern is None:
        n = _DEFAULT_SWA_PERIOD.get(arch or "")
    if n == 0:
        return layers
    if n:
        return sum(1 for il in range(layers) if (il % n) < n - 1)
    return 0


# -- Hugging Face ----------------------------------------------------------------------------------


def _config_int(config: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        value = _int(config.get(name))
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
        bits = _int(quant.get("bits"))
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
        name=os.path.basename(os.path.normpath(folder)),
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
        total = _int(meta.get("total_size")) if isinstance(meta, dict) else None
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
    if not (isinstance(shape, list) and all(_int(d) is not None for d in shape)):
        return None
    count = 1
    for d in shape:
        count = min(count * d, MAX_COUNT + 1)  # never a 64-digit product of 64-bit dims
    if count > MAX_COUNT:
        return None
    size = None
    if isinstance(offsets, list) and len(offsets) == 2 and all(_int(o) is not None for o in offsets):
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


def model_facts(path: str, fs: Files = HOST) -> ModelFacts:
    """The facts of a model file or folder (a GGUF file, or a Hugging Face folder), read as
    ``fs`` sees them."""
    if fs.kind(path) == "directory":
        return hf_facts(path, fs)
    return gguf_facts(path, fs)


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
