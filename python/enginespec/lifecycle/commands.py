"""Building serve commands from a Recipe: the argv (a list, never a shell string), the environment
delta, the flags injected by defaults, and warnings for recipe fields the engine has no flag for."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_serializer

from enginespec.config import Config
from enginespec.definition.launching import Launcher, resolve_launcher
from enginespec.definition.records import FLAG_FIELDS, EngineDefinition
from enginespec.errors import CommandError
from enginespec.lifecycle.probing import read_help
from enginespec.lifecycle.recipe import DockerRuntime, ExtraValue, Recipe
from enginespec.process.argv import redact_argv
from enginespec.untrusted.masking import REDACTED, is_secret_name


class Command(BaseModel):
    """A built serve command: argv (a list, never a shell string), the environment delta to apply,
    the flags that enginespec injected on its own (model-family defaults, companion flags), and
    warnings about recipe fields this engine has no flag for.

    ``argv`` and ``env`` hold the real values, to hand to the OS; every printed or dumped form
    (repr, ``model_dump``, ``model_dump_json``, :meth:`shell`) has the secrets masked.
    """

    model_config = ConfigDict(frozen=True)

    engine: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    injected_flags: tuple[str, ...]
    warnings: tuple[str, ...]
    launcher: Literal["console_script", "module", "binary", "docker"]

    def redacted_argv(self) -> list[str]:
        """argv with secret values (``--api-key``, docker ``-e HF_TOKEN=...``) replaced by ``***``:
        the form to print or log."""
        argv = redact_argv(self.argv, self.engine)
        if self.launcher == "docker":
            for index in range(1, len(argv)):
                name, eq, _value = argv[index].partition("=")
                if argv[index - 1] == "-e" and eq and is_secret_name(name):
                    argv[index] = f"{name}={REDACTED}"
        return argv

    def redacted_env(self) -> dict[str, str]:
        """env with the values of secret names (``HF_TOKEN``) replaced by ``***``."""
        return {name: REDACTED if is_secret_name(name) else value for name, value in self.env.items()}

    @field_serializer("argv")
    def _masked_argv(self, _argv: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(self.redacted_argv())

    @field_serializer("env")
    def _masked_env(self, _env: Mapping[str, str]) -> dict[str, str]:
        return self.redacted_env()

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():
            masked = {"argv": tuple(self.redacted_argv()), "env": self.redacted_env()}
            yield name, masked.get(name or "", value)

    def shell(self, *, redact: bool = True) -> str:
        """A shell-quoted, copy-pasteable form of argv (secrets redacted unless asked not to)."""
        return shlex.join(self.redacted_argv() if redact else self.argv)


@dataclass
class _Entry:
    canonical: str
    flag: str
    values: list[str] | None  # None: bare flag
    injected: bool = False


def _render_scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _flag_for_extra(key: str) -> str:
    if key.startswith("-"):
        return key.replace("_", "-") if key.startswith("--") else key
    return ("-" if len(key) == 1 else "--") + key.replace("_", "-")


def _field_flags(definition: EngineDefinition, field: str) -> tuple[str, ...]:
    """The engine's flags for one recipe field: model, served name, host and port from the
    Signature, the API key from Serving, the rest from Flags."""
    signature = definition.signature
    by_fact = {
        "model_path": (definition.model_flag,) if definition.model_flag else (),
        "served_model_name": signature.served_name_flags[:1],
        "host": signature.host_flags[:1],
        "port": signature.port_flags[:1],
        "api_key": (definition.serving.api_key_flag,) if definition.serving.api_key_flag else (),
    }
    return by_fact[field] if field in by_fact else definition.flags.fields.get(field, ())


def _entries(definition: EngineDefinition, recipe: Recipe, strict: bool) -> tuple[list[_Entry], list[str]]:
    entries: list[_Entry] = []
    warnings: list[str] = []

    def add(field: str, values: list[str] | None) -> None:
        # `ollama serve` takes no arguments at all: every field is dropped, with its warning.
        flags = () if definition.signature.launch_forms[0].no_arguments else _field_flags(definition, field)
        if not flags:
            shown = REDACTED if field == "api_key" else repr(getattr(recipe, field))
            message = f"{definition.id} has no flag for {field}={shown}; not emitted"
            if strict:
                raise CommandError(message)
            warnings.append(message)
            return
        for flag in flags:
            entries.append(_Entry(definition.signature.canonical(flag), flag, values))

    if definition.model_flag is not None or not definition.signature.launch_forms[0].positional_model:
        add("model_path", [_model_argument(definition, recipe)])
    # An engine that takes its address as one HOST:PORT flag gets it there (LocalAI's
    # `--address`); one that reads it from one environment variable, there (Ollama); one with no
    # host flag that reads its host from one (MAX_SERVE_HOST), the host.
    address = _address_flag(definition)
    if address is not None:
        host = f"[{recipe.host}]" if ":" in recipe.host else recipe.host
        port = recipe.port or definition.default_port
        entries.append(_Entry(definition.signature.canonical(address), address, [f"{host}:{port}"]))
    elif _address_variable(definition) is None:
        if _host_variable(definition) is None:
            add("host", [recipe.host])
        if recipe.port is not None:
            add("port", [str(recipe.port)])
    for field in ("served_model_name", *FLAG_FIELDS):
        value = getattr(recipe, field)
        if value is None or value is False:
            continue
        add(field, None if value is True else [_render_scalar(value)])
    if recipe.api_key is not None:  # the real value: this argv is what the OS gets
        add("api_key", [recipe.api_key.get_secret_value()])
    return entries, warnings


def _extra_entries(
    definition: EngineDefinition, extra: Mapping[str, ExtraValue]
) -> tuple[list[_Entry], set[str]]:
    entries: list[_Entry] = []
    overridden: set[str] = set()
    for key, value in extra.items():
        flag = _flag_for_extra(key)
        canonical = definition.signature.canonical(flag)
        if canonical in definition.signature.exit_flags and value not in (None, False):
            raise CommandError(f"extra_args: {key!r} makes {definition.id} print and exit instead of serving")
        overridden.add(canonical)
        if value is None or value is False:
            continue
        if value is True:
            entries.append(_Entry(canonical, flag, None))
        elif isinstance(value, dict):
            entries.append(_Entry(canonical, flag, [json.dumps(value, separators=(",", ":"))]))
        elif isinstance(value, list):
            items = [_render_scalar(item) for item in value if item is not None]
            if definition.flags.list_style == "repeat":
                entries.extend(_Entry(canonical, flag, [item]) for item in items)
            elif items:
                entries.append(_Entry(canonical, flag, items))
        else:
            entries.append(_Entry(canonical, flag, [_render_scalar(value)]))
    return entries, overridden


def _defaults(definition: EngineDefinition, recipe: Recipe, present: set[str]) -> list[_Entry]:
    """Model-family defaults the recipe did not set (``present`` grows with what is added)."""
    injected: list[_Entry] = []
    for default in definition.flags.family_defaults:
        if not default.matches(recipe.model_path):
            continue
        for flag, value in default.flags.items():
            canonical = definition.signature.canonical(flag)
            if canonical in present:
                continue
            present.add(canonical)
            injected.append(_Entry(canonical, flag, None if value is True else [str(value)], True))
    return injected


def _companions(definition: EngineDefinition, final: list[_Entry], overridden: set[str]) -> list[_Entry]:
    emitted = {entry.canonical for entry in final}
    added: list[_Entry] = []
    for trigger, companions in definition.flags.companion_flags.items():
        if definition.signature.canonical(trigger) not in emitted:
            continue
        for flag in companions:
            canonical = definition.signature.canonical(flag)
            if canonical not in emitted and canonical not in overridden:
                added.append(_Entry(canonical, flag, None, True))
                emitted.add(canonical)
    return added


def _unaccepted(
    definition: EngineDefinition, entries: Sequence[_Entry], config: Config, strict: bool
) -> list[str]:
    accepted = read_help(definition, config).flags
    problems = []
    for entry in entries:
        flag = entry.flag
        negated = "--" + flag[len("--no-") :] if flag.startswith("--no-") else None
        if flag in accepted or negated in accepted:
            continue
        message = f"{definition.launch.executable} does not accept {flag} (per its --help); passed anyway"
        if strict:
            raise CommandError(message)
        problems.append(message)
    return problems


def recipe_launcher(definition: EngineDefinition, recipe: Recipe, config: Config) -> Launcher:
    """The launcher for a recipe: its ``python_path`` / ``binary_path`` first (see launching)."""
    return resolve_launcher(
        definition, config, python_path=recipe.python_path, binary_path=recipe.binary_path
    )


def plan(
    definition: EngineDefinition,
    recipe: Recipe,
    config: Config,
    *,
    strict: bool = False,
    validate: bool = False,
) -> Command:
    """Builds the full command. ``strict=True`` raises instead of dropping unsupported fields;
    ``validate=True`` checks every flag against the installed engine's ``--help``."""
    if recipe.engine != definition.id:
        raise CommandError(f"engine: recipe is for {recipe.engine!r}, this spec builds {definition.id!r}")
    entries, warnings = _entries(definition, recipe, strict)
    extra, overridden = _extra_entries(definition, recipe.extra_args)
    if extra and definition.signature.launch_forms[0].no_arguments:
        message = f"{definition.id}'s server takes no arguments; extra_args not emitted"
        if strict:
            raise CommandError(message)
        warnings.append(message)
        extra, overridden = [], set()
    present = {entry.canonical for entry in entries} | overridden
    injected = _defaults(definition, recipe, present)
    final = [entry for entry in entries if entry.canonical not in overridden] + injected + extra
    final += _companions(definition, final, overridden)
    if validate:
        warnings.extend(_unaccepted(definition, final, config, strict))
    flags: list[str] = []
    for entry in final:
        flags.append(entry.flag)
        flags.extend(entry.values or ())
    positional = (
        [_model_argument(definition, recipe)]
        if definition.model_flag is None and _positional_model(definition)
        else []
    )
    injected_flags = tuple(entry.flag for entry in final if entry.injected)
    if isinstance(recipe.runtime, DockerRuntime):
        return Command(
            engine=definition.id,
            argv=tuple(_docker_argv(definition, recipe, recipe.runtime, positional + flags)),
            env={},
            injected_flags=injected_flags,
            warnings=tuple(warnings),
            launcher="docker",
        )
    launcher = recipe_launcher(definition, recipe, config)
    if launcher.kind == "module" and positional and definition.launch.module_model_flag:
        # The module form takes the model by flag (vLLM's api_server has no positional model).
        positional = [definition.launch.module_model_flag, *positional]
    return Command(
        engine=definition.id,
        argv=(*launcher.prefix, *positional, *flags),
        env=_environment(definition, recipe, launcher),
        injected_flags=injected_flags,
        warnings=tuple(warnings),
        launcher=launcher.kind,
    )


def build_environment(definition: EngineDefinition, recipe: Recipe, config: Config) -> dict[str, str]:
    """Environment variables to set for the engine (a delta over the caller's environment):
    visible devices, the interpreter's venv ``bin`` first on PATH, then the recipe's own vars."""
    launcher = (
        None if isinstance(recipe.runtime, DockerRuntime) else recipe_launcher(definition, recipe, config)
    )
    return _environment(definition, recipe, launcher)


def _model_argument(definition: EngineDefinition, recipe: Recipe) -> str:
    """The recipe's model as the engine takes it: an absolute path as a ``file://`` URI where the
    engine reads a scheme-less model as a registry's (``Flags.model_uri``)."""
    model = recipe.model_path
    if definition.flags.model_uri and os.path.isabs(model):
        return Path(model).as_uri()
    return model


def _positional_model(definition: EngineDefinition) -> bool:
    return definition.signature.launch_forms[0].positional_model


def _address_flag(definition: EngineDefinition) -> str | None:
    """The one flag carrying host and port (``HOST:PORT``), for an engine whose server takes no
    host flag but such a flag (LocalAI's ``--address``)."""
    signature = definition.signature
    if signature.host_flags or not signature.address_flags or signature.launch_forms[0].no_arguments:
        return None
    return signature.address_flags[0]


def _address_variable(definition: EngineDefinition) -> str | None:
    """The environment variable carrying host and port, for an engine whose server takes neither a
    host flag nor an address flag (Ollama's OLLAMA_HOST)."""
    if _address_flag(definition) is not None:
        return None
    if definition.signature.host_flags and not definition.signature.launch_forms[0].no_arguments:
        return None
    return next((name for name, kind in definition.settings.environment.items() if kind == "address"), None)


def _host_variable(definition: EngineDefinition) -> str | None:
    """The environment variable carrying the host alone, for an engine whose server takes no host
    flag but a port flag (Modular MAX's MAX_SERVE_HOST)."""
    if definition.signature.host_flags or definition.signature.launch_forms[0].no_arguments:
        return None
    return next((name for name, kind in definition.settings.environment.items() if kind == "host"), None)


def _environment(definition: EngineDefinition, recipe: Recipe, launcher: Launcher | None) -> dict[str, str]:
    env: dict[str, str] = {}
    variable = _address_variable(definition)
    if variable is not None:
        host = f"[{recipe.host}]" if ":" in recipe.host else recipe.host
        env[variable] = f"{host}:{recipe.port or definition.default_port}"
    host_variable = _host_variable(definition) if variable is None else None
    if host_variable is not None:
        env[host_variable] = recipe.host
    if recipe.visible_devices is not None:
        name = "HIP_VISIBLE_DEVICES" if recipe.accelerator == "rocm" else "CUDA_VISIBLE_DEVICES"
        env[name] = ",".join(str(device) for device in recipe.visible_devices)
    if launcher is not None:
        bin_dir = (launcher.python or launcher.program).parent
        if (bin_dir.parent / "pyvenv.cfg").is_file():
            env["VIRTUAL_ENV"] = str(bin_dir.parent)
            env["PATH"] = os.pathsep.join([str(bin_dir), os.environ.get("PATH", os.defpath)])
    env.update(recipe.env_vars)
    return env


def _docker_argv(
    definition: EngineDefinition, recipe: Recipe, runtime: DockerRuntime, server_args: Sequence[str]
) -> list[str]:
    if not definition.launch.docker:
        raise CommandError(f"runtime: {definition.id} has no supported docker image; use runtime 'native'")
    port = recipe.port or definition.default_port
    argv = ["docker", "run", "--rm"]
    if runtime.name:
        argv += ["--name", runtime.name]
    if recipe.accelerator == "rocm":
        argv += ["--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "video"]
    elif recipe.visible_devices is not None:
        argv += ["--gpus", '"device=' + ",".join(map(str, recipe.visible_devices)) + '"']
    else:
        argv += ["--gpus", "all"]
    # Tensor-parallel workers share memory through /dev/shm; docker's 64 MB default is too small.
    argv.append("--ipc=host")
    container_host = recipe.host
    if runtime.host_network:
        argv += ["--network", "host"]
    else:
        bind = f"[{recipe.host}]" if ":" in recipe.host else recipe.host
        argv += ["-p", f"{bind}:{port}:{port}"]
        container_host = "0.0.0.0"  # reachable through the published port only
    model = Path(recipe.model_path)
    if model.is_absolute():
        argv += ["-v", f"{model}:{model}:ro"]
    elif runtime.mount_hf_cache:
        cache = Path.home() / ".cache" / "huggingface"
        argv += ["-v", f"{cache}:/root/.cache/huggingface"]
    if recipe.accelerator == "rocm" and recipe.visible_devices is not None:
        devices = ",".join(map(str, recipe.visible_devices))
        argv += ["-e", f"HIP_VISIBLE_DEVICES={devices}"]
    for name, value in recipe.env_vars.items():
        argv += ["-e", f"{name}={value}"]
    argv.append(runtime.image)
    args = list(server_args)
    for flag in definition.signature.host_flags:
        if flag in args:
            args[args.index(flag) + 1] = container_host
    # The server must listen on the port published above, and an image may set its own default
    # (TGI's sets PORT=80): say it.
    if recipe.port is None and definition.signature.port_flags:
        args += [definition.signature.port_flags[0], str(port)]
    return argv + args
