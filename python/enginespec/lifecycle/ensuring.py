"""``ensure(recipe)``: the recipe's engine serving, whoever started it. A running engine that serves
the recipe's model with the recipe's settings is adopted; else the recipe is launched (its fit on
this host's GPUs checked first, a failed start classified as ``launch`` classifies it); either way
it is waited for until ready. With ``idle_stop``, a thread watches its load counters and, after
that many seconds without progress, puts it to sleep where the engine can (its own API, see
:mod:`enginespec.lifecycle.modelcontrol`) or stops it if ``ensure`` launched it, and says which
(``Ensured.idle``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from enginespec._host.shapes import looks_like_flag
from enginespec.config import Config
from enginespec.definition.modelrecords import LedgerDevice
from enginespec.definition.registry import find_engine
from enginespec.definition.signature import Signature
from enginespec.errors import ControlError, FitRefused, InvalidInputError
from enginespec.health.load import EngineLoad, check_load
from enginespec.lifecycle.modelcontrol import sleep
from enginespec.lifecycle.recipe import Recipe
from enginespec.lifecycle.running import RunningEngine, adopt, launch
from enginespec.lifecycle.starting import plan_for
from enginespec.process.argv import Invocation, parse_argv, redact_argv
from enginespec.process.record import EngineProcess

#: How often an idle watch reads the engine's load.
IDLE_POLL_SECONDS = 2.0


@dataclass
class Ensured:
    """What ``ensure`` gives: the engine (a :class:`RunningEngine`; ``engine.adopted`` says
    whether it was running already), and, with ``idle_stop``, what the idle watch did once it
    fired (``"slept"`` or ``"stopped"``, with why in ``idle_reason``)."""

    engine: RunningEngine
    launched: bool
    idle: str | None = None
    idle_reason: str = ""
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def close(self) -> None:
        """Ends the idle watch (the engine is left as it is: see ``engine.close()``)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=IDLE_POLL_SECONDS * 2 + 5)


def _engine_args(argv: Sequence[str], signature: Signature) -> Sequence[str]:
    """The engine's own arguments: after ``-m MODULE`` where it runs as a module (the
    interpreter's options before it are not the engine's), else after the program."""
    modules = {module for form in signature.launch_forms for module in form.modules}
    for at, token in enumerate(argv[:-1]):
        if token == "-m" and argv[at + 1] in modules:
            return argv[at + 2 :]
    return argv[1:]


def _settings(argv: Sequence[str], invocation: Invocation) -> tuple[object, ...]:
    """What makes two commands of an engine serve alike: the model, names and address (however
    each is given), and every other flag by its canonical name with its value (secrets masked, as
    a scanned argv has them), in any order: ``vllm serve M --max-model-len=4096`` and ``python -m
    vllm.entrypoints.openai.api_server --model M --max-model-len 4096`` serve alike."""
    signature = find_engine(invocation.engine).signature
    facts = {
        signature.canonical(flag)
        for flag in (
            *signature.model_flags,
            *signature.served_name_flags,
            *signature.host_flags,
            *signature.port_flags,
            *signature.address_flags,
        )
    }
    shown = _engine_args(redact_argv(list(argv), invocation.engine), signature)
    flags = []
    for at, token in enumerate(shown):
        if not looks_like_flag(token):
            continue
        name, eq, inline = token.partition("=")
        flag = signature.canonical(name if eq and name.startswith("--") else token)
        switch = flag in signature.no_value_flags or flag.startswith(signature.no_value_prefixes)
        following = shown[at + 1] if at + 1 < len(shown) else None
        value = inline if eq and name.startswith("--") else None
        if value is None and not switch and following is not None and not looks_like_flag(following):
            value = following
        if flag not in facts:
            flags.append((flag, value))
    return (
        invocation.engine,
        invocation.model,
        invocation.served_model_names,
        invocation.effective_host,
        invocation.effective_port,
        tuple(sorted(flags, key=repr)),
    )


def serving_alike(recipe_argv: Sequence[str], processes: Sequence[EngineProcess]) -> EngineProcess | None:
    """The running server (of ``processes``) started with the same settings as ``recipe_argv``."""
    wanted = parse_argv(list(recipe_argv))
    if wanted is None:
        raise InvalidInputError(f"recipe: its command is no engine's ({recipe_argv[0]!r})")
    key = _settings(recipe_argv, wanted)
    for process in processes:
        if (
            process.role == "server"
            and process.engine == wanted.engine
            and _settings(process.argv, process) == key
        ):
            return process
    return None


def _check_fit(recipe: Recipe, argv: Sequence[str], ledger: Sequence[LedgerDevice] | None) -> str:
    """Refuses a launch that the GPUs (``ledger``, else this host's now) cannot hold by the
    engine's own rule; what was checked, or why it could not be (no GPU, no rule, the model's
    files unreadable)."""
    import enginespec.models.fit as fitting
    from enginespec.models.files import ModelError
    from enginespec.scanning.scanner import gpu_ledger

    devices = list(ledger) if ledger is not None else fitting.ledger_of(gpu_ledger())
    if not devices:
        return "fit not checked: this host has no GPU the drivers list"
    try:
        result = fitting.fit(argv, recipe.engine, recipe.model_path, devices)
    except ModelError as err:
        return f"fit not checked: {err}"
    if not result.fits:
        raise FitRefused("; ".join(fitting.text(result)) or "it does not fit the GPUs", result)
    return "fits"


def ensure(
    recipe: Recipe,
    *,
    idle_stop: float | None = None,
    timeout: float = 600.0,
    config: Config | None = None,
    check_fit: bool = True,
    ledger: Sequence[LedgerDevice] | None = None,
) -> Ensured:
    """The recipe's engine, ready: adopted when a running server was started with the recipe's
    settings, else launched (raises :class:`~enginespec.errors.FitRefused` when the host's GPUs
    cannot hold it, ``ledger`` a GPU ledger to judge that by instead, as ``enginespec gpus
    --json`` writes it; ``LaunchFailed`` with the classified failure; ``NotReady`` after
    ``timeout``). ``idle_stop``: seconds without progress after which the engine is put to sleep
    (where it can) or, when launched here, stopped; see :class:`Ensured`."""
    from enginespec.scanning.scanner import Scanner

    if idle_stop is not None and not idle_stop > 0:
        raise InvalidInputError(f"idle_stop: must be a positive number of seconds, got {idle_stop!r}")
    config = config or Config()
    plan, _api_key = plan_for(find_engine(recipe.engine), recipe, config)
    found = serving_alike(plan.argv, Scanner(listen_ports=False).scan())
    if found is not None:
        engine = adopt(found, config=config)
        launched = False
    else:
        if check_fit:
            _check_fit(recipe, plan.argv, ledger)
        engine = launch(recipe, config)
        launched = True
    try:
        engine.wait_ready(timeout=timeout)
    except BaseException:
        if launched:
            engine.close()
        raise
    ensured = Ensured(engine=engine, launched=launched)
    if idle_stop is not None:
        ensured._thread = threading.Thread(
            target=_watch_idle, args=(ensured, found, idle_stop), name="enginespec-idle", daemon=True
        )
        ensured._thread.start()
    return ensured


def _progress(load: EngineLoad) -> tuple[float, ...] | None:
    """The counters whose movement is progress (tokens made, requests in flight), ``None``
    when the engine reports none."""
    if not load.available:
        return None
    return (
        load.generated_tokens_total or 0.0,
        load.prompt_tokens_total or 0.0,
        float(load.requests_running or 0) + float(load.requests_waiting or 0),
    )


def _watch_idle(ensured: Ensured, adopted: EngineProcess | None, idle_stop: float) -> None:
    """Reads the engine's load every :data:`IDLE_POLL_SECONDS`; after ``idle_stop`` seconds in
    which nothing moved (and nothing was in flight), sleeps or stops it, once."""
    from enginespec.scanning.scanner import Scanner

    engine = ensured.engine
    since, last, previous = time.monotonic(), None, None
    while not ensured._stop.wait(IDLE_POLL_SECONDS):
        if engine.exit_status() is not None:
            return
        previous = check_load(
            engine.engine, engine.base_url or "", previous=previous, api_key=engine._api_key
        )
        now = _progress(previous)
        if now != last or (now is not None and now[2] > 0):
            since, last = time.monotonic(), now
            continue
        if time.monotonic() - since < idle_stop:
            continue
        process = adopted or next(
            (p for p in Scanner(listen_ports=False).scan() if p.pid == engine.pid), None
        )
        why = f"no progress for {idle_stop:g}s"
        try:
            if process is None:
                raise ControlError("its process is gone from the scan")
            sleep(process, timeout=60)
            ensured.idle, ensured.idle_reason = "slept", why
        except ControlError as err:
            if not ensured.launched:
                ensured.idle, ensured.idle_reason = (
                    None,
                    f"{why}; not put to sleep ({err}), and not ours to stop",
                )
                return
            engine.stop()
            ensured.idle, ensured.idle_reason = "stopped", f"{why}; not put to sleep ({err})"
        return
