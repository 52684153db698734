"""``enginespec model PATH|PID``: the facts of a model file or folder, or of a running engine's model
with the memory its engine allocates for it by the engine's own rule."""

from __future__ import annotations

import argparse
import json
import os
import pwd
import sys
from typing import Any

from enginespec.display import literal
from enginespec.modelfacts import MemoryEstimate, ModelError, ModelFacts, hf_cache_folder, model_facts

_GIB = 1 << 30


def _environ(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read(1 << 20)
    except OSError:
        return {}
    pairs = (item.partition(b"=") for item in data.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, _eq, v in pairs}


def _home(pid: int) -> str | None:
    try:
        return pwd.getpwuid(os.stat(f"/proc/{pid}").st_uid).pw_dir
    except (OSError, KeyError):
        return None


def engine_model(pid: int) -> tuple[str, ModelFacts, MemoryEstimate | None]:
    """(engine, facts, estimate) of the engine server ``pid``: its model as its argv names it,
    resolved inside the process's root (``/proc/PID/root``, relative paths from its working
    directory; a Hugging Face id through its owner's cache)."""
    import enginespec.engines.llamacpp as llamacpp
    import enginespec.engines.vllm as vllm
    from enginespec.scanning import Scanner

    found = [p for p in Scanner().scan() if p.pid == pid]
    if not found:
        raise ModelError(f"pid {pid}: not an engine server")
    process = found[0]
    if not process.model:
        raise ModelError(f"pid {pid}: its argv names no model")
    root = f"/proc/{pid}/root"
    path = process.model
    if not os.path.isabs(path):
        try:
            path = os.path.join(os.readlink(f"/proc/{pid}/cwd"), path)
        except OSError as e:
            raise ModelError(f"pid {pid}: working directory: {e.strerror}") from None
    inside = root + path
    if not os.path.lexists(inside):
        env = _environ(pid)
        home = _home(pid)
        cached = hf_cache_folder(process.model, env, home)
        if cached is None:
            raise ModelError(
                f"pid {pid}: model {process.model!r} is neither a path nor in its owner's HF cache"
            )
        inside = root + cached if not cached.startswith(root) else cached
    facts = model_facts(inside)
    estimate = None
    if process.engine == "llamacpp":
        estimate = llamacpp.estimate_memory(facts, process.argv)
    elif process.engine == "vllm":
        estimate = vllm.estimate_memory(facts, process.argv)
    return process.engine, facts, estimate


def _size(n: int | None) -> str:
    return "-" if n is None else f"{n / _GIB:.2f} GiB" if n >= _GIB else f"{n / (1 << 20):.2f} MiB"


def _text(facts: ModelFacts, estimate: MemoryEstimate | None) -> list[str]:
    rows: list[tuple[str, Any]] = [
        ("format", facts.format),
        ("name", facts.name),
        ("architecture", facts.architecture),
        ("quantization", facts.quantization),
        ("parameters", facts.parameters),
        ("context (trained)", facts.context_length),
        ("layers", facts.layers),
        ("heads / kv heads / head dim", f"{facts.attention_heads} / {facts.kv_heads} / {facts.head_dim}"),
        ("experts (used)", f"{facts.experts} ({facts.experts_used})" if facts.experts else None),
        ("sliding window", facts.sliding_window),
        ("weights", _size(facts.weight_bytes)),
        ("KV per token (16-bit)", facts.kv_bytes_per_token()),
    ]
    if estimate is not None:
        rows += [
            ("engine rule", estimate.rule),
            (
                "context (configured)",
                f"{estimate.context} ({estimate.sequences} x {estimate.context_per_sequence})",
            ),
            ("cache types", f"K {estimate.cache_type_k}, V {estimate.cache_type_v}"),
            ("weights by device", ", ".join(f"{d} {_size(b)}" for d, b in estimate.weights.items())),
            ("KV cache", f"{_size(estimate.kv_cache_bytes)} ({', '.join(estimate.kv_cache)})"),
        ]
        rows += [("note", note) for note in estimate.notes]
    rows += [("problem", problem) for problem in facts.problems]
    rows += [("file", name) for name in facts.files]
    return [literal(f"{key:<28} {value}") for key, value in rows if value is not None]


def cmd_model(args: argparse.Namespace) -> int:
    target: str = args.target
    try:
        if target.isascii() and target.isdigit() and not os.path.exists(target):
            engine, facts, estimate = engine_model(int(target))
        else:
            engine, facts, estimate = "", model_facts(target), None
    except ModelError as e:
        print(literal(f"enginespec model: {e}"), file=sys.stderr)
        return 1
    if args.json:
        document = {
            "engine": engine or None,
            "facts": facts.model_dump(mode="json"),
            "kv_bytes_per_token": facts.kv_bytes_per_token(),
            "estimate": estimate.model_dump(mode="json") if estimate else None,
        }
        print(json.dumps(document, indent=2))
        return 0
    print("\n".join(_text(facts, estimate)))
    return 0


def add_parser(commands: Any) -> None:
    model = commands.add_parser(
        "model",
        help="the facts of a model file (GGUF), a Hugging Face folder, or a running engine's model (PID)",
    )
    model.add_argument("target", help="a .gguf file, a model folder, or an engine server's pid")
    model.add_argument("--json", action="store_true", help="print a JSON document instead")
    model.set_defaults(handler=cmd_model)
