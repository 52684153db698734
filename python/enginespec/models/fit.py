"""``enginespec fit RECIPE``: whether a recipe's engine fits on this host's GPUs as they are held
now, on which devices and with which settings, or why not (advice and data only: nothing starts).

The GPU ledger is the one ``enginespec gpus --json`` prints (every device's total and used
memory, the bytes each engine holds, the other processes on it), read live when this build has
it (``enginespec.gpus.reader``), or from a recorded file (``--ledger FILE``). The model's memory comes
from its files and its engine's own rule (``engines/llamacpp.py``, ``engines/vllm.py``) applied to
the arguments the recipe builds."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict, ValidationError

import enginespec.engines.llamacpp as llamacpp
import enginespec.engines.vllm as vllm
from enginespec.models.facts import ModelError, ModelFacts, hf_cache_folder, model_facts, read_capped
from enginespec.scanning.scanner import gpu_ledger
from enginespec.untrusted.documents import parse_json

_GIB = 1 << 30
#: What llama.cpp needs beyond weights and KV cache on a device (its compute buffer), and what
#: vLLM's profiling run takes for activations, before the KV cache: a working margin, not a rule.
MARGIN_BYTES = 512 << 20
_CONTEXT_STEP = 256


class LedgerProcess(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    pid: int
    name: str | None = None
    memory_bytes: int | None = None


class LedgerDevice(BaseModel):
    """One device of a recorded ledger (the fields of ``enginespec gpus --json`` fit needs)."""

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


class FitResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    engine: str
    model: str
    fits: bool
    placements: tuple[Placement, ...] = ()
    #: why not, device by device.
    refusals: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def read_ledger(path: str) -> list[LedgerDevice]:
    try:
        data = parse_json(read_capped(path, 16 << 20), max_values=1 << 20)
        items = data.get("devices", data) if isinstance(data, dict) else data
        if not isinstance(items, list):
            raise ModelError(f"{path}: not a list of devices")
        return [LedgerDevice.model_validate(item) for item in items]
    except (ValueError, ValidationError) as e:
        raise ModelError(f"{path}: not a GPU ledger ({str(e).splitlines()[0]})") from None


def live_ledger() -> list[LedgerDevice]:
    """This host's GPUs as they are held now (``enginespec.gpu_ledger()``: engines, other
    processes, what no process accounts for)."""
    return [LedgerDevice.model_validate(device.model_dump(mode="json")) for device in gpu_ledger()]


def _facts(model: str) -> ModelFacts:
    if os.path.exists(model):
        return model_facts(model)
    cached = hf_cache_folder(model, os.environ, os.path.expanduser("~"))
    if cached is None:
        raise ModelError(f"model {model!r}: neither a path nor in the Hugging Face cache")
    return model_facts(cached)


def _gib(n: int) -> str:
    return f"{n / _GIB:.2f} GiB"


def _free(device: LedgerDevice) -> str:
    free, total = (device.free_bytes or 0) / _GIB, _gib(device.memory_total_bytes or 0)
    return f"{device.device} has {free:.2f} of {total} free"


def fit(argv: Sequence[str], engine: str, model: str, devices: Sequence[LedgerDevice]) -> FitResult:
    """Where the engine started with ``argv`` (the recipe's command) fits among ``devices``."""
    facts = _facts(model)
    usable = [d for d in devices if d.free_bytes is not None and d.memory_total_bytes]
    refusals = [f"{d.device}: memory unknown" for d in devices if d not in usable]
    if engine == "llamacpp":
        return _fit_llamacpp(facts, argv, model, usable, refusals)
    if engine == "vllm":
        return _fit_vllm(facts, argv, model, usable, refusals)
    raise ModelError(f"engine {engine!r}: fit knows llama.cpp's and vLLM's memory rules only")


def _replace(argv: Sequence[str], flag: str, value: str, spellings: Sequence[str]) -> list[str]:
    out, skip = [], False
    for token in argv:
        if skip:
            skip = False
            continue
        name = token.partition("=")[0]
        if name in spellings:
            skip = "=" not in token
            continue
        out.append(token)
    return [*out, flag, value]


def _fit_llamacpp(
    facts: ModelFacts, argv: Sequence[str], model: str, devices: Sequence[LedgerDevice], refusals: list[str]
) -> FitResult:
    placements = []
    ctx_flags = ("-c", "--ctx-size")
    for device in devices:
        free = device.free_bytes or 0
        changed: list[str] = []
        current = list(argv)
        estimate = llamacpp.estimate_memory(facts, current, devices=[device.device])
        need = estimate.weights.get(device.device, 0) + estimate.kv_cache.get(device.device, 0) + MARGIN_BYTES
        if need > free:
            # a smaller context: the largest multiple of 256 whose cache fits beside the weights
            weights = estimate.weights.get(device.device, 0) + MARGIN_BYTES
            per_cell = estimate.kv_cache.get(device.device, 0) / max(estimate.context or 1, 1)
            cells = int((free - weights) / per_cell) // _CONTEXT_STEP * _CONTEXT_STEP if per_cell else 0
            if cells >= _CONTEXT_STEP * (estimate.sequences or 1):
                current = _replace(current, "-c", str(cells), ctx_flags)
                changed.append(f"-c {estimate.context} -> {cells}")
                estimate = llamacpp.estimate_memory(facts, current, devices=[device.device])
                need = estimate.weights[device.device] + estimate.kv_cache[device.device] + MARGIN_BYTES
        if need > free:
            weights = estimate.weights.get(device.device, 0)
            refusals.append(f"{_free(device)}: {device.holders()} (the weights alone need {_gib(weights)})")
            continue
        placements.append(
            Placement(
                devices=(device.device,),
                environment={
                    "CUDA_VISIBLE_DEVICES": str(device.index if device.index is not None else device.device)
                },
                settings={
                    "-ngl": str(len(facts.layer_bytes) + 1),
                    "-c": str(estimate.context),
                    "-np": str(estimate.sequences),
                },
                needed_bytes={device.device: need},
                free_bytes={device.device: free},
                changed=tuple(changed),
            )
        )
    return FitResult(
        engine="llamacpp",
        model=model,
        fits=bool(placements),
        placements=tuple(placements),
        refusals=tuple(refusals),
        notes=(f"{_gib(MARGIN_BYTES)} kept per device for llama.cpp's compute buffer",),
    )


def _fit_vllm(
    facts: ModelFacts, argv: Sequence[str], model: str, devices: Sequence[LedgerDevice], refusals: list[str]
) -> FitResult:
    base = vllm.estimate_memory(facts, argv)
    count = max(len(base.weights), len(base.kv_cache), 1)
    util_text = next((argv[i + 1] for i, t in enumerate(argv[:-1]) if t == "--gpu-memory-utilization"), None)
    wanted = float(util_text) if util_text else 0.9
    placements = []
    # vLLM refuses to start when a device's free memory is below utilization x its total
    # (vLLM 0.33.0, vllm/v1/worker/gpu_worker.py init_device): the devices with the most free first
    ranked = sorted(devices, key=lambda d: -(d.free_bytes or 0))
    chosen = ranked[:count]
    if len(chosen) < count:
        refusals.append(
            f"needs {count} devices (tensor x pipeline parallel), {len(chosen)} have known memory"
        )
    else:
        util = min(
            wanted, *(((d.free_bytes or 0) - MARGIN_BYTES) / (d.memory_total_bytes or 1) for d in chosen)
        )
        util = int(util * 100) / 100
        changed: list[str] = []
        settings = {"--gpu-memory-utilization": f"{util:.2f}"}
        if util < wanted:
            changed.append(f"--gpu-memory-utilization {wanted} -> {util:.2f}")
        per_device_kv = {
            d.device: util * (d.memory_total_bytes or 0) - (facts.weight_bytes or 0) / count - MARGIN_BYTES
            for d in chosen
        }
        room = min(per_device_kv.values())
        kv_per_token = (
            (base.kv_cache_bytes / base.context / count) if base.kv_cache and base.context else None
        )
        if util <= 0 or room <= 0:
            for d in chosen:
                refusals.append(f"{_free(d)}: {d.holders()}")
        else:
            context = base.context
            if kv_per_token and context and kv_per_token * context > room:
                fitted = int(room / kv_per_token) // _CONTEXT_STEP * _CONTEXT_STEP
                if fitted < _CONTEXT_STEP:
                    refusals.append(
                        f"the KV cache for {_CONTEXT_STEP} tokens does not fit beside the weights"
                    )
                else:
                    changed.append(f"--max-model-len {context} -> {fitted}")
                    context = fitted
            if context:
                settings["--max-model-len"] = str(context)
            if not refusals or changed:
                placements.append(
                    Placement(
                        devices=tuple(d.device for d in chosen),
                        environment={
                            "CUDA_VISIBLE_DEVICES": ",".join(
                                str(d.index if d.index is not None else d.device) for d in chosen
                            )
                        },
                        settings=settings,
                        needed_bytes={d.device: int(util * (d.memory_total_bytes or 0)) for d in chosen},
                        free_bytes={d.device: d.free_bytes or 0 for d in chosen},
                        changed=tuple(changed),
                    )
                )
    return FitResult(
        engine="vllm",
        model=model,
        fits=bool(placements),
        placements=tuple(placements),
        refusals=tuple(refusals),
        notes=(
            "vLLM claims --gpu-memory-utilization x each device's total, and refuses to start with less free",
            f"{_gib(MARGIN_BYTES)} per device kept for activations and CUDA graphs",
        ),
    )


def text(result: FitResult) -> list[str]:
    lines = []
    for p in result.placements:
        env = " ".join(f"{k}={v}" for k, v in p.environment.items())
        flags = " ".join(f"{k} {v}" for k, v in p.settings.items())
        need = ", ".join(
            f"{d} needs {_gib(n)} of {_gib(p.free_bytes[d])} free" for d, n in p.needed_bytes.items()
        )
        lines.append(f"fits: {env} {flags} ({need})")
        lines += [f"  changed: {c}" for c in p.changed]
    lines += [f"refused: {r}" for r in result.refusals]
    lines += [f"note: {n}" for n in result.notes]
    return lines


def devices_wanted(devices: list[LedgerDevice], gpus: str | None) -> list[LedgerDevice]:
    if not gpus:
        return devices
    wanted = {g.strip() for g in gpus.split(",") if g.strip()}
    chosen = [d for d in devices if str(d.index) in wanted or d.device in wanted]
    missing = wanted - {str(d.index) for d in chosen} - {d.device for d in chosen}
    if missing:
        raise ModelError(f"--gpus {gpus!r}: no device {', '.join(sorted(missing))} in the ledger")
    return chosen
