"""The records an engine's model hooks take and give (see :class:`EngineDefinition`'s
``registry_name``, ``estimate_memory``, ``logged_memory`` and ``fit``): what a model's files say
about it, what the engine allocates for it and printed about it, and the GPUs it may be placed on.

They are data only: ``enginespec.models`` reads them from a model's files and a GPU ledger, the
engines' own rules (``engines/llamacpp.py``, ``engines/vllm.py``, a plugin's) compute with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

_GIB = 1 << 30


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


class Files(Protocol):
    """Where a model's files are read from: ``enginespec.models.files.HOST`` (this process's own
    view, for a path a user gives), or a running process's view (``models.processes.ProcessFiles``:
    inside its root, as its owner). Failures raise ``ModelError`` naming the path."""

    def open(self, path: str) -> int:
        """An fd for reading ``path``, which must be a regular file (never a FIFO or a device)."""
        ...

    def kind(self, path: str) -> Literal["file", "directory", "other"] | None:
        """What ``path`` is (its symlinks followed); ``None`` when nothing can be seen there."""
        ...

    def names(self, path: str, limit: int) -> list[str] | None:
        """At most ``limit`` names in directory ``path``; ``None`` when it cannot be listed."""
        ...


# -- a GPU ledger, and where a model fits on it ----------------------------------------------------


class LedgerProcess(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    pid: int
    name: str | None = None
    memory_bytes: int | None = None


class LedgerDevice(BaseModel):
    """One device of a GPU ledger (the fields of ``enginespec gpus --json`` fit needs)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    device: str
    index: int | None = None
    name: str | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    engines: Mapping[str, int | None] = {}
    other_processes: tuple[LedgerProcess, ...] = ()

    @property
    def free_bytes(self) -> int | None:
        if self.memory_total_bytes is None or self.memory_used_bytes is None:
            return None
        return max(self.memory_total_bytes - self.memory_used_bytes, 0)

    def holders(self) -> str:
        """Who holds the memory, largest first: ``78.90 GiB held by pid 4242 (python3)``."""
        held: list[tuple[int, str]] = [(b or 0, f"engine {e}") for e, b in self.engines.items()]
        held += [(p.memory_bytes or 0, f"pid {p.pid} ({p.name or '?'})") for p in self.other_processes]
        held.sort(reverse=True)
        return (
            ", ".join(f"{b / _GIB:.2f} GiB held by {who}" for b, who in held if b)
            or "held by no known process"
        )

    def free_said(self) -> str:
        """``GPU-0 has 1.00 of 80.00 GiB free``."""
        free, total = (self.free_bytes or 0) / _GIB, (self.memory_total_bytes or 0) / _GIB
        return f"{self.device} has {free:.2f} of {total:.2f} GiB free"


class Placement(BaseModel):
    """A way the recipe fits: the devices and the settings to start it with."""

    model_config = ConfigDict(frozen=True)

    devices: tuple[str, ...]
    #: ``CUDA_VISIBLE_DEVICES`` and the engine's flags with their values.
    environment: Mapping[str, str]
    settings: Mapping[str, str]
    #: bytes needed on each device, and free there now.
    needed_bytes: Mapping[str, int]
    free_bytes: Mapping[str, int]
    #: what was changed from the recipe to make it fit (empty: it fits as written).
    changed: tuple[str, ...] = ()


class Fitting(BaseModel):
    """What an engine's fit rule finds among a ledger's devices: the ways the model fits, why
    the devices it does not fit on refuse it, and what the rule assumed."""

    model_config = ConfigDict(frozen=True)

    placements: tuple[Placement, ...] = ()
    refusals: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
