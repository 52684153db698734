"""``enginespec model PATH|PID``: the facts of a model file or folder, or of a running engine's model
with the memory its engine allocates for it by the engine's own rule."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from enginespec.cli.targets import is_target
from enginespec.display import literal
from enginespec.untrusted.documents import dumps

# What the commands do is imported when one runs (the CLI starts without pydantic or a scanner).
if TYPE_CHECKING:
    from enginespec.definition.modelrecords import MemoryEstimate, ModelFacts

_GIB = 1 << 30


def engine_model(target: str) -> tuple[str, ModelFacts, str]:
    """(engine, facts with the estimate, the model's name as ``ps`` shows it) of the engine server
    ``target`` names (a pid, an engine id, where it listens: see :mod:`enginespec.cli.targets`);
    ``ModelError`` with why not (read as a scan's consumers read them: under a deadline, and
    inside the error boundary)."""
    from enginespec.cli.targets import find
    from enginespec.errors import InvalidInputError
    from enginespec.models.files import ModelError
    from enginespec.models.processes import cached

    try:
        process = find(target)
    except InvalidInputError as err:
        raise ModelError(str(err)) from None
    facts = cached(process.pid, process.start_time, process.engine, process.model, process.argv)
    if isinstance(facts, str):
        raise ModelError(facts)
    return process.engine, facts, process.model_name or process.model or ""


def _size(n: float | None) -> str:
    """Bytes in the largest binary unit they fill (``2.00 KiB``, ``1.70 MiB``); ``-`` unknown."""
    if n is None:
        return "-"
    for unit, scale in (("GiB", _GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def _count(n: int | None) -> str | None:
    """A parameter count as people say it (``8.03 B``, ``444.42 K``), with the exact number."""
    if n is None:
        return None
    for unit, scale in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit} ({n:,})"
    return f"{n:,}"


def _tokens(n: int | None) -> str | None:
    return None if n is None else f"{n} tokens"


def _shown(value: object) -> str:
    """A figure of a row of several: ``-`` where it is unknown, never ``None``."""
    return "-" if value is None else str(value)


def _estimate_rows(estimate: MemoryEstimate) -> list[tuple[str, Any]]:
    """The rows of the memory the engine's rule gives; a figure the rule left unknown is ``-``."""
    context = None if estimate.context is None else str(estimate.context)
    if context is not None and estimate.sequences is not None:
        context += f" ({estimate.sequences} x {_shown(estimate.context_per_sequence)})"
    context = None if context is None else f"{context} tokens"
    types = (estimate.cache_type_k, estimate.cache_type_v)
    return [
        ("engine rule", estimate.rule),
        ("context (configured)", context),
        ("cache types", f"K {_shown(types[0])}, V {_shown(types[1])}" if any(types) else None),
        ("weights by device", ", ".join(f"{d} {_size(b)}" for d, b in estimate.weights.items()) or None),
        (
            "KV cache",
            f"{_size(estimate.kv_cache_bytes)}"
            + (f" ({', '.join(estimate.kv_cache)})" if estimate.kv_cache else ""),
        ),
        *(("note", note) for note in estimate.notes),
    ]


def _text(facts: ModelFacts, shown_as: str) -> list[str]:
    """The facts as rows; ``shown_as`` is the model's name as every table and label give it."""
    estimate = facts.estimate
    heads = (facts.attention_heads, facts.kv_heads, facts.head_dim)
    rows: list[tuple[str, Any]] = [
        ("model", shown_as),
        ("format", facts.format),
        # the name the files give (a GGUF's general.name), where it differs
        ("name in its files", facts.name if facts.name != shown_as else None),
        ("registry name", facts.registry_name),
        ("architecture", facts.architecture),
        ("quantization", facts.quantization),
        ("parameters", _count(facts.parameters)),
        ("context (trained)", _tokens(facts.context_length)),
        ("layers", facts.layers),
        ("heads / kv heads / head dim", " / ".join(map(_shown, heads)) if any(heads) else None),
        ("experts (used)", f"{facts.experts} ({_shown(facts.experts_used)})" if facts.experts else None),
        ("sliding window", _tokens(facts.sliding_window)),
        ("weights", _size(facts.weight_bytes)),
        ("KV per token (16-bit)", _size(facts.kv_bytes_per_token()) if facts.attention else None),
    ]
    if estimate is not None:
        rows += _estimate_rows(estimate)
    if facts.logged is not None:
        logged = facts.logged
        for label, table in (("logged weights", logged.weights), ("logged KV cache", logged.kv_cache)):
            rows.append((label, ", ".join(f"{d} {_size(b)}" for d, b in table.items()) or None))
        rows.append(
            ("logged compute", ", ".join(f"{d} {_size(b)}" for d, b in logged.compute.items()) or None)
        )
        rows.append(("logged KV cache size", _tokens(logged.kv_cache_tokens)))
    if facts.measured:
        rows.append(("held now", ", ".join(f"{d} {_size(b)}" for d, b in facts.measured.items())))
    rows += [("problem", problem) for problem in facts.problems]
    rows += [("file", name) for name in facts.files]
    return [literal(f"{key:<28} {value}") for key, value in rows if value is not None]


def cmd_model(args: argparse.Namespace) -> int:
    from enginespec.models.facts import model_facts
    from enginespec.models.files import ModelError, read_capped
    from enginespec.models.naming import model_name
    from enginespec.models.processes import beside_log

    target: str = args.target
    try:
        if not os.path.exists(target) and is_target(target):
            engine, facts, shown_as = engine_model(target)
            if args.log:
                text = read_capped(args.log, 64 << 20).decode(errors="replace")
                facts = beside_log(facts, engine, text)
        else:
            engine, facts, shown_as = "", model_facts(target), model_name(target) or target
    except ModelError as e:
        print(literal(f"enginespec model: {e}"), file=sys.stderr)
        return 1
    if args.json:
        document = {
            "engine": engine or None,
            "model_name": shown_as,
            "facts": facts.model_dump(mode="json"),
            "kv_bytes_per_token": facts.kv_bytes_per_token(),
        }
        print(dumps(document, indent=2))
        return 0
    print("\n".join(_text(facts, shown_as)))
    return 0


def _no_gpu(ledger: str | None) -> str:
    """Why fit has nothing to place a model on, and how to give it a ledger."""
    if ledger:
        return f"{ledger}: the ledger lists no GPU (record one with `enginespec gpus --json` on the GPU host)"
    return (
        "no GPU found on this host (`enginespec gpus` lists none), so there is nothing to fit on; "
        "to ask about another host's GPUs, record them there with `enginespec gpus --json > ledger.json` "
        "and give that file: `enginespec fit RECIPE --ledger ledger.json`"
    )


def cmd_fit(args: argparse.Namespace) -> int:
    import enginespec.models.fit as fit
    from enginespec.engines import get_engine_spec
    from enginespec.errors import CommandError, RecipeFileError
    from enginespec.lifecycle.recipe import Recipe
    from enginespec.models.files import ModelError
    from enginespec.scanning.scanner import gpu_ledger

    try:
        recipe = Recipe.from_file(args.recipe)
        command = get_engine_spec(recipe.engine).plan(recipe)
    except (RecipeFileError, CommandError) as e:
        print(literal(f"enginespec fit: {e}"), file=sys.stderr)
        return 2
    try:
        devices = fit.read_ledger(args.ledger) if args.ledger else fit.ledger_of(gpu_ledger())
        if not devices:
            print(literal(f"enginespec fit: {_no_gpu(args.ledger)}"), file=sys.stderr)
            return 2
        devices = fit.devices_wanted(devices, args.gpus)
        result = fit.fit(command.argv, recipe.engine, recipe.model_path, devices)
    except ModelError as e:
        print(literal(f"enginespec fit: {e}"), file=sys.stderr)
        return 2
    if args.json:
        print(dumps(result.model_dump(mode="json"), indent=2))
    else:
        print("\n".join(literal(line) for line in fit.text(result)))
    return 0 if result.fits else 1


def add_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Adds ``model`` and ``fit`` through the ``enginespec`` parser's maker of subcommands."""
    model = command(
        "model",
        "the facts of a model file (GGUF), a Hugging Face folder, or a running engine's model (PID)",
        "Reads only the model's headers and config files (never its weights): architecture, "
        "parameters, context length, quantization, the weights' size and, for a running engine, "
        "the memory its arguments make it take (an estimate by the engine's own rule). --log puts "
        "the figures the engine printed at start-up beside the estimate.",
        "enginespec model ./Qwen3-8B-Q4_K_M.gguf",
        "enginespec model 1234 --json",
    )
    model.add_argument(
        "target", help="a .gguf file, a model folder, or an engine server (pid, engine id, :PORT, URL)"
    )
    model.add_argument("--json", action="store_true", help="print a JSON document instead")
    model.add_argument(
        "--log", help="the engine's start-up log: its printed memory figures beside the estimate"
    )
    model.set_defaults(handler=cmd_model)
    fit = command(
        "fit",
        "whether a recipe fits on the GPUs as they are held now, with which settings, or why not",
        "Advice only: exit 0 when it fits somewhere, 1 when refused, 2 on bad input or with no GPU "
        "to fit on (a host without one: give another host's ledger with --ledger).",
        "enginespec fit recipe.toml",
        "enginespec fit recipe.toml --gpus 0,1 --ledger ledger.json",
    )
    fit.add_argument("recipe", help="recipe file (.toml, .yaml, .yml or .json)")
    fit.add_argument("--gpus", help="devices to consider, by index or name (comma list); default all")
    fit.add_argument(
        "--ledger", help="a recorded GPU ledger (enginespec gpus --json) instead of the live one"
    )
    fit.add_argument("--json", action="store_true", help="print a JSON document instead")
    fit.set_defaults(handler=cmd_fit)
