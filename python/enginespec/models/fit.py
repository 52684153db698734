"""``enginespec fit RECIPE``: whether a recipe's engine fits on this host's GPUs as they are held
now, on which devices and with which settings, or why not (advice and data only: nothing starts).

The GPU ledger is the one ``enginespec gpus --json`` prints (every device's total and used
memory, the bytes each engine holds, the other processes on it), given live by the caller
(``enginespec.gpu_ledger()``, where this build has it), or from a recorded file (``--ledger
FILE``). The model's memory comes from its files and its engine's own fit rule (the hook
``EngineDefinition.fit``: ``engines/llamacpp.py``, ``engines/vllm.py``, a plugin's) applied to
the arguments the recipe builds; the helpers below are what those rules share."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict, ValidationError

from enginespec.definition.modelrecords import LedgerDevice, ModelFacts, Placement
from enginespec.definition.records import EngineDefinition
from enginespec.definition.registry import all_engines, definition_of
from enginespec.models.facts import model_facts
from enginespec.models.files import ModelError, read_capped
from enginespec.models.huggingface import hf_cache_folder
from enginespec.untrusted.documents import parse_json

_GIB = 1 << 30
#: What llama.cpp needs beyond weights and KV cache on a device (its compute buffer), and what
#: vLLM's profiling run takes for activations, before the KV cache: a working margin, not a rule.
MARGIN_BYTES = 512 << 20
#: A context a rule shrinks to fit is a multiple of this many tokens.
CONTEXT_STEP = 256


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


def ledger_of(devices: Iterable[BaseModel]) -> list[LedgerDevice]:
    """A live ledger's devices (``enginespec.gpu_ledger()``: this host's GPUs as they are held now,
    engines, other processes, what no process accounts for) as fit reads them."""
    return [LedgerDevice.model_validate(device.model_dump(mode="json")) for device in devices]


def _facts(model: str) -> ModelFacts:
    if os.path.exists(model):
        return model_facts(model)
    cached = hf_cache_folder(model, os.environ, os.path.expanduser("~"))
    if cached is None:
        raise ModelError(f"model {model!r}: neither a path nor in the Hugging Face cache")
    return model_facts(cached)


def gib(n: int) -> str:
    """Bytes as ``1.50 GiB``."""
    return f"{n / _GIB:.2f} GiB"


def known_memory(devices: Sequence[LedgerDevice]) -> tuple[list[LedgerDevice], list[str]]:
    """(the devices whose free and total memory the ledger states, a refusal for each other)."""
    usable = [d for d in devices if d.free_bytes is not None and d.memory_total_bytes]
    return usable, [f"{d.device}: memory unknown" for d in devices if d not in usable]


def fit(argv: Sequence[str], engine: str, model: str, devices: Sequence[LedgerDevice]) -> FitResult:
    """Where the engine ``engine`` started with ``argv`` (the recipe's command) fits among
    ``devices``, by its definition's fit rule."""
    facts = _facts(model)
    definition = definition_of(engine)
    found = definition.fit(facts, argv, devices) if definition is not None else None
    if found is None:
        # the engines whose definitions have a fit rule: theirs overrides the hook's default
        ruled = sorted(d.id for d in all_engines() if type(d).fit is not EngineDefinition.fit)
        raise ModelError(f"engine {engine!r}: fit knows the memory rules of {' and '.join(ruled)} only")
    return FitResult(
        engine=engine,
        model=model,
        fits=bool(found.placements),
        placements=found.placements,
        refusals=found.refusals,
        notes=found.notes,
    )


def with_flag(argv: Sequence[str], flag: str, value: str, spellings: Sequence[str]) -> list[str]:
    """``argv`` with every spelling of a flag (and its value) removed and ``flag value`` added."""
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


def text(result: FitResult) -> list[str]:
    lines = []
    for p in result.placements:
        env = " ".join(f"{k}={v}" for k, v in p.environment.items())
        flags = " ".join(f"{k} {v}" for k, v in p.settings.items())
        need = ", ".join(
            f"{d} needs {gib(n)} of {gib(p.free_bytes[d])} free" for d, n in p.needed_bytes.items()
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
