"""EngineSpec: one engine's knowledge (signature, flags, defaults) and the shared command builder."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from enginespec.recipe import Config, DockerRuntime, ExtraValue, Recipe
from enginespec.signature import Signature

if TYPE_CHECKING:
    from enginespec.runtimes import BinaryProbeResult, ConfigHelp, InstallOptions, InstallResult, RuntimeInfo
    from enginespec.scanning import EngineProcess

#: States a health check can report (see enginespec.health.Health).
HealthState = Literal["ready", "loading", "starting", "unhealthy", "down", "unknown"]

#: Basename of a Python interpreter (python, python3.11, Python, pythonw.exe).
PYTHON_NAME = re.compile(r"(?:python)[0-9.]*[a-z]?(?:\.exe)?", re.IGNORECASE | re.ASCII)
_MODEL_TOKEN = re.compile(r"[a-z0-9]+")

#: Order in which structured fields are emitted (after model, served name, host and port).
_FLAG_FIELDS = (
    "served_model_name",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "max_model_len",
    "gpu_memory_utilization",
    "gpu_layers",
    "max_num_seqs",
    "kv_cache_dtype",
    "dtype",
    "quantization",
    "trust_remote_code",
    "tool_call_parser",
    "reasoning_parser",
    "chat_template",
    "api_key",
)


class CommandError(ValueError):
    """A recipe this engine cannot turn into a command (message names the field and value)."""


@dataclass(frozen=True)
class FamilyDefault:
    """Flags a model family needs unless the recipe says otherwise.

    ``pattern`` matches whole name tokens of the model's last path component: ``glm-4.5`` matches
    ``zai-org/GLM-4.5-Air`` but ``intellect-3`` does not match ``INTELLECT-2-32B``.
    """

    pattern: str
    flags: Mapping[str, str | bool]

    def matches(self, model_path: str) -> bool:
        name = model_path.rstrip("/").replace("\\", "/").rsplit("/", 1)[-1].lower()
        tokens = _MODEL_TOKEN.findall(name)
        wanted = _MODEL_TOKEN.findall(self.pattern.lower())
        width = len(wanted)
        return width > 0 and any(tokens[i : i + width] == wanted for i in range(len(tokens) - width + 1))


class Command(BaseModel):
    """A built serve command: argv (a list, never a shell string), the environment delta to apply,
    the flags that enginespec injected on its own (model-family defaults, companion flags), and
    warnings about recipe fields this engine has no flag for."""

    model_config = ConfigDict(frozen=True)

    engine: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    injected_flags: tuple[str, ...]
    warnings: tuple[str, ...]
    launcher: Literal["console_script", "module", "binary", "docker"]

    def redacted_argv(self) -> list[str]:
        """argv with secret values (``--api-key``) replaced by ``***``: the form to print or log."""
        from enginespec.argv import redact_argv

        return redact_argv(self.argv, self.engine)

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


def _check_path(path: str, field: str) -> Path:
    result = Path(path)
    if ".." in result.parts:
        raise CommandError(f"{field}: {path!r} contains a '..' segment")
    return result


class EngineSpec:
    """Everything enginespec knows about one engine. Subclasses set the class attributes; the
    machinery here is shared. Register third-party engines under the ``enginespec.engines``
    entry-point group (the entry point names an EngineSpec subclass or instance)."""

    id: ClassVar[str]
    signature: ClassVar[Signature]
    #: console script or binary name.
    cli_binary: ClassVar[str]
    health_path: ClassVar[str] = "/health"
    #: arguments after the console script (``vllm serve``).
    console_args: ClassVar[tuple[str, ...]] = ()
    #: ``python`` arguments that run the server when no console script is at hand; None: binary only.
    module_args: ClassVar[tuple[str, ...] | None] = None
    #: use ``python -m`` even when a console script exists.
    prefer_module: ClassVar[bool] = False
    #: flag that carries the model; None: the first positional argument.
    model_flag: ClassVar[str | None] = "--model"
    #: recipe field -> the engine's flag(s) for it; a field missing here is dropped with a warning.
    field_flags: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    #: how a list value in extra_args is passed: ``--f a b`` (argparse nargs) or ``--f a --f b``.
    list_style: ClassVar[Literal["nargs", "repeat"]] = "nargs"
    family_defaults: ClassVar[tuple[FamilyDefault, ...]] = ()
    #: flags that must accompany another flag (vLLM's tool parser needs --enable-auto-tool-choice).
    companion_flags: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    #: PyPI distribution installed into the managed venv; None when there is none.
    package: ClassVar[str | None] = None
    #: parent executable basename -> supervisor label (``ollama`` starting llama-server).
    supervisors: ClassVar[Mapping[str, str]] = {}
    #: label for a server started by another server of the same engine (llama-server router).
    nested_supervisor: ClassVar[str | None] = None
    #: flag carrying the server's API key (used by health checks, never shown).
    api_key_flag: ClassVar[str | None] = "--api-key"
    #: environment variables the engine reads its API key from.
    api_key_env: ClassVar[tuple[str, ...]] = ()
    #: flag that makes the server listen on a unix socket instead of host:port (vLLM --uds).
    socket_flag: ClassVar[str | None] = None
    #: ``/health`` says nothing about the model (mlx_lm.server answers 200 while loading and after a
    #: failed load): readiness also needs ``/v1/models``.
    readiness_needs_models: ClassVar[bool] = False
    #: whether ``runtime: docker`` is supported: the image's entrypoint takes the server arguments.
    docker_supported: ClassVar[bool] = False

    def __repr__(self) -> str:
        return f"<EngineSpec {self.id}>"

    def health_url(self, host: str, port: int) -> str:
        """URL of the health endpoint of a server listening on host:port (see ``urls.base_url``)."""
        from enginespec.urls import base_url

        return base_url(host, port) + self.health_path

    def classify_health(self, status: int, body: bytes) -> tuple[HealthState, str]:
        """What an answer of the health endpoint means for this engine: (state, reason)."""
        if status == 200:
            return "ready", ""
        if status == 503:
            return "unhealthy", "HTTP 503"
        return "unknown", f"unexpected HTTP {status}"

    @property
    def default_port(self) -> int:
        return self.signature.default_port

    # -- resolution -----------------------------------------------------------------------------

    def _check_python(self, path: str, field: str) -> Path:
        result = _check_path(path, field)
        if not PYTHON_NAME.fullmatch(result.name):
            raise CommandError(
                f"{field}: {path!r} is not a Python interpreter (expected python, python3, ...)"
            )
        return result

    def _check_binary(self, path: str, field: str) -> Path:
        result = _check_path(path, field)
        name = result.name[:-4] if result.name.lower().endswith(".exe") else result.name
        if name != self.cli_binary:
            raise CommandError(f"{field}: {path!r} is not {self.cli_binary!r} (unexpected executable name)")
        return result

    def _python_launch(self, python: Path) -> tuple[list[str], str]:
        script = python.parent / self.cli_binary
        if self.module_args is None:
            raise CommandError(f"python_path: {self.id} is a binary, not a Python package; set binary_path")
        if not self.prefer_module and script.is_file():
            return [str(script), *self.console_args], "console_script"
        return [str(python), *self.module_args], "module"

    def resolve_launcher(self, recipe: Recipe, config: Config) -> tuple[list[str], str, Path | None]:
        """(argv prefix, launcher kind, interpreter or None), in the documented order: recipe
        ``python_path`` / ``binary_path``, ``ENGINESPEC_<ENGINE>_PYTHON`` / ``_BIN``, the managed
        venv, PATH; the bare command name when nothing is found."""
        return self.launcher(config, python_path=recipe.python_path, binary_path=recipe.binary_path)

    def launcher(
        self, config: Config, *, python_path: str | None = None, binary_path: str | None = None
    ) -> tuple[list[str], str, Path | None]:
        """As :meth:`resolve_launcher`, with the explicit paths given directly."""
        if binary_path:
            binary = self._check_binary(binary_path, "binary_path")
            return [str(binary), *self.console_args], self._binary_kind(), None
        if python_path:
            python = self._check_python(python_path, "python_path")
            return (*self._python_launch(python), python)
        if self.id in config.binaries:
            env = f"ENGINESPEC_{self.id.upper()}_BIN"
            binary = self._check_binary(str(config.binaries[self.id]), env)
            return [str(binary), *self.console_args], self._binary_kind(), None
        if self.id in config.pythons:
            env = f"ENGINESPEC_{self.id.upper()}_PYTHON"
            python = self._check_python(str(config.pythons[self.id]), env)
            return (*self._python_launch(python), python)
        managed = self.managed_bin_dir(config)
        if self.module_args is not None and (managed / "python").is_file():
            return (*self._python_launch(managed / "python"), managed / "python")
        if self.module_args is None and (managed / self.cli_binary).is_file():
            return [str(managed / self.cli_binary), *self.console_args], "binary", None
        found = shutil.which(self.cli_binary)
        if found:
            sibling = Path(found).parent / "python"
            if self.prefer_module and sibling.is_file():
                return (*self._python_launch(sibling), sibling)
            return [found, *self.console_args], self._binary_kind(), None
        if self.prefer_module and self.module_args is not None:
            return ["python3", *self.module_args], "module", None
        return [self.cli_binary, *self.console_args], self._binary_kind(), None

    def _binary_kind(self) -> Literal["console_script", "binary"]:
        return "binary" if self.module_args is None else "console_script"

    def managed_bin_dir(self, config: Config) -> Path:
        """``bin`` directory of the managed runtime (a venv for Python engines)."""
        root = config.runtime_dir(self.id)
        return root / ("venv/bin" if self.module_args is not None else "bin")

    # -- building -------------------------------------------------------------------------------

    def _flag_for_extra(self, key: str) -> str:
        if key.startswith("-"):
            return key.replace("_", "-") if key.startswith("--") else key
        return ("-" if len(key) == 1 else "--") + key.replace("_", "-")

    def _entries(self, recipe: Recipe, strict: bool) -> tuple[list[_Entry], list[str]]:
        entries: list[_Entry] = []
        warnings: list[str] = []

        def add(field: str, values: list[str] | None) -> None:
            flags = self.field_flags.get(field)
            if not flags:
                message = f"{self.id} has no flag for {field}={getattr(recipe, field)!r}; not emitted"
                if strict:
                    raise CommandError(message)
                warnings.append(message)
                return
            for flag in flags:
                entries.append(_Entry(self.signature.canonical(flag), flag, values))

        if self.model_flag is not None:
            add("model_path", [recipe.model_path])
        add("host", [recipe.host])
        if recipe.port is not None:
            add("port", [str(recipe.port)])
        for field in _FLAG_FIELDS:
            value = getattr(recipe, field)
            if value is None or value is False:
                continue
            add(field, None if value is True else [_render_scalar(value)])
        return entries, warnings

    def _extra_entries(self, extra: Mapping[str, ExtraValue]) -> tuple[list[_Entry], set[str]]:
        entries: list[_Entry] = []
        overridden: set[str] = set()
        for key, value in extra.items():
            flag = self._flag_for_extra(key)
            canonical = self.signature.canonical(flag)
            overridden.add(canonical)
            if value is None or value is False:
                continue
            if value is True:
                entries.append(_Entry(canonical, flag, None))
            elif isinstance(value, dict):
                entries.append(_Entry(canonical, flag, [json.dumps(value, separators=(",", ":"))]))
            elif isinstance(value, list):
                items = [_render_scalar(item) for item in value if item is not None]
                if self.list_style == "repeat":
                    entries.extend(_Entry(canonical, flag, [item]) for item in items)
                elif items:
                    entries.append(_Entry(canonical, flag, items))
            else:
                entries.append(_Entry(canonical, flag, [_render_scalar(value)]))
        return entries, overridden

    def plan(
        self, recipe: Recipe, config: Config | None = None, *, strict: bool = False, validate: bool = False
    ) -> Command:
        """Builds the full command. ``strict=True`` raises instead of dropping unsupported fields;
        ``validate=True`` checks every flag against the installed engine's ``--help``."""
        if recipe.engine != self.id:
            raise CommandError(f"engine: recipe is for {recipe.engine!r}, this spec builds {self.id!r}")
        config = config or Config()
        entries, warnings = self._entries(recipe, strict)
        extra, overridden = self._extra_entries(recipe.extra_args)
        present = {entry.canonical for entry in entries} | overridden
        injected: list[_Entry] = []
        for default in self.family_defaults:
            if not default.matches(recipe.model_path):
                continue
            for flag, value in default.flags.items():
                canonical = self.signature.canonical(flag)
                if canonical in present:
                    continue
                present.add(canonical)
                injected.append(_Entry(canonical, flag, None if value is True else [str(value)], True))
        kept = [entry for entry in entries if entry.canonical not in overridden]
        final = kept + injected + extra
        emitted = {entry.canonical for entry in final}
        for trigger, companions in self.companion_flags.items():
            if self.signature.canonical(trigger) not in emitted:
                continue
            for flag in companions:
                canonical = self.signature.canonical(flag)
                if canonical not in emitted and canonical not in overridden:
                    final.append(_Entry(canonical, flag, None, True))
                    emitted.add(canonical)
        if validate:
            warnings.extend(self._unaccepted(final, config, strict))
        flags: list[str] = []
        for entry in final:
            flags.append(entry.flag)
            flags.extend(entry.values or ())
        positional = [recipe.model_path] if self.model_flag is None else []
        env = self.build_environment(recipe, config)
        injected_flags = tuple(entry.flag for entry in final if entry.injected)
        if isinstance(recipe.runtime, DockerRuntime):
            argv = self._docker_argv(recipe, recipe.runtime, positional + flags)
            return Command(
                engine=self.id,
                argv=tuple(argv),
                env={},
                injected_flags=injected_flags,
                warnings=tuple(warnings),
                launcher="docker",
            )
        prefix, launcher, _python = self.resolve_launcher(recipe, config)
        return Command(
            engine=self.id,
            argv=(*prefix, *positional, *flags),
            env=env,
            injected_flags=injected_flags,
            warnings=tuple(warnings),
            launcher=launcher,
        )

    def _unaccepted(self, entries: Sequence[_Entry], config: Config, strict: bool) -> list[str]:
        accepted = self.get_config_help(config).flags
        problems = []
        for entry in entries:
            flag = entry.flag
            negated = "--" + flag[len("--no-") :] if flag.startswith("--no-") else None
            if flag in accepted or negated in accepted:
                continue
            message = f"{self.cli_binary} does not accept {flag} (per its --help); passed anyway"
            if strict:
                raise CommandError(message)
            problems.append(message)
        return problems

    def build_command(
        self, recipe: Recipe, config: Config | None = None, *, strict: bool = False, validate: bool = False
    ) -> list[str]:
        """The serve argv for a recipe (see :meth:`plan` for defaults, warnings and validation)."""
        return list(self.plan(recipe, config, strict=strict, validate=validate).argv)

    def build_environment(self, recipe: Recipe, config: Config | None = None) -> dict[str, str]:
        """Environment variables to set for the engine (a delta over the caller's environment):
        visible devices, the interpreter's venv ``bin`` first on PATH, then the recipe's own vars."""
        config = config or Config()
        env: dict[str, str] = {}
        if recipe.visible_devices is not None:
            name = "HIP_VISIBLE_DEVICES" if recipe.accelerator == "rocm" else "CUDA_VISIBLE_DEVICES"
            env[name] = ",".join(str(device) for device in recipe.visible_devices)
        if not isinstance(recipe.runtime, DockerRuntime):
            prefix, _launcher, python = self.resolve_launcher(recipe, config)
            bin_dir = (python or Path(prefix[0])).parent
            if (bin_dir.parent / "pyvenv.cfg").is_file():
                env["VIRTUAL_ENV"] = str(bin_dir.parent)
                env["PATH"] = os.pathsep.join([str(bin_dir), os.environ.get("PATH", os.defpath)])
        env.update(recipe.env_vars)
        return env

    def _docker_argv(self, recipe: Recipe, runtime: DockerRuntime, server_args: Sequence[str]) -> list[str]:
        if not self.docker_supported:
            raise CommandError(f"runtime: {self.id} has no supported docker image; use runtime 'native'")
        port = recipe.port or self.default_port
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
        for flag in self.signature.host_flags:
            if flag in args:
                args[args.index(flag) + 1] = container_host
        return argv + args

    # -- runtimes (see enginespec.runtimes) ---------------------------------------------------

    #: arguments after the launcher that print the full help (vLLM hides most flags without =all).
    help_args: ClassVar[tuple[str, ...]] = ("--help",)
    #: an entry that marks the engine's own tree inside a source archive (see runtimes).
    source_marker: ClassVar[str | None] = None
    #: the engine's own options when building it from source with cmake.
    cmake_options: ClassVar[tuple[str, ...]] = ()
    #: seconds to wait for the help (importing vLLM takes a while).
    help_timeout: ClassVar[float] = 60.0

    def distributions(self) -> tuple[str, ...]:
        """Distributions whose metadata carries the installed engine's version."""
        return (self.package,) if self.package else ()

    def install(self, options: InstallOptions | None = None, config: Config | None = None) -> InstallResult:
        """Installs the engine idempotently into the managed venv or ``options.python_path``."""
        from enginespec.runtimes import InstallOptions, install_python_engine

        return install_python_engine(self, options or InstallOptions(), config or Config())

    async def install_async(
        self, options: InstallOptions | None = None, config: Config | None = None
    ) -> InstallResult:
        import asyncio

        return await asyncio.to_thread(self.install, options, config)

    async def probe_binary_async(
        self, path: str | os.PathLike[str], timeout: float = 10.0
    ) -> BinaryProbeResult:
        import asyncio

        return await asyncio.to_thread(self.probe_binary, path, timeout)

    async def get_runtime_info_async(
        self, config: Config | None = None, running: EngineProcess | None = None
    ) -> RuntimeInfo:
        import asyncio

        return await asyncio.to_thread(self.get_runtime_info, config, running)

    async def get_config_help_async(
        self, config: Config | None = None, timeout: float | None = None
    ) -> ConfigHelp:
        import asyncio

        return await asyncio.to_thread(self.get_config_help, config, timeout)

    def probe_binary(self, path: str | os.PathLike[str], timeout: float = 10.0) -> BinaryProbeResult:
        """Whether ``path`` is this engine's installed binary or console script, and its version
        (console scripts: the version in their interpreter's metadata, the engine never imported)."""
        from enginespec.runtimes import BinaryProbeResult, installed_versions, script_python

        binary = Path(path)
        if not binary.is_file() or not os.access(binary, os.X_OK):
            return BinaryProbeResult(installed=False, binary_path=str(binary), error="not an executable file")
        python = script_python(binary)
        if self.module_args is not None:
            if python is None:
                return BinaryProbeResult(
                    installed=False, binary_path=str(binary), error="not a Python console script"
                )
            versions = installed_versions(python, self.distributions(), timeout=timeout)
            version = next(iter(versions.values()), None)
            return BinaryProbeResult(
                installed=version is not None,
                binary_path=str(binary),
                version=version,
                python_path=str(python),
                error=None if version else f"{', '.join(self.distributions())} not installed in {python}",
            )
        from enginespec.runtimes import probe_version_output

        try:
            out = subprocess.run(
                [str(binary), "--version"], capture_output=True, text=True, timeout=timeout, errors="replace"
            )
        except subprocess.TimeoutExpired:
            return BinaryProbeResult(
                installed=False, binary_path=str(binary), error=f"no answer within {timeout:g}s"
            )
        except OSError as err:
            return BinaryProbeResult(installed=False, binary_path=str(binary), error=str(err))
        version = probe_version_output(out.stderr + "\n" + out.stdout)
        return BinaryProbeResult(
            installed=version is not None,
            binary_path=str(binary),
            version=version,
            error=None if version else f"no version in the output of {binary.name} --version",
        )

    def resolve_python_path(self, config: Config | None = None) -> Path | None:
        """The engine's interpreter: ``ENGINESPEC_<ENGINE>_PYTHON``, the managed venv, then the
        interpreter of the console script found on PATH."""
        from enginespec.runtimes import script_python

        config = config or Config()
        if self.module_args is None:
            return None
        if self.id in config.pythons:
            return self._check_python(str(config.pythons[self.id]), f"ENGINESPEC_{self.id.upper()}_PYTHON")
        managed = self.managed_bin_dir(config) / "python"
        if managed.is_file():
            return managed
        found = shutil.which(self.cli_binary)
        return script_python(Path(found)) if found else None

    def get_runtime_info(
        self, config: Config | None = None, running: EngineProcess | None = None
    ) -> RuntimeInfo:
        """What is installed (or, given a running process, what that process runs)."""
        from enginespec.runtimes import RuntimeInfo, installed_versions, python_of_process

        config = config or Config()
        if running is not None:
            python = python_of_process(running.pid)
            versions = installed_versions(python, self.distributions()) if python else {}
            return RuntimeInfo(
                engine=self.id,
                installed=True,
                version=next(iter(versions.values()), None),
                python_path=str(python) if python else None,
                binary_path=running.exe,
                location="running",
            )
        prefix, _kind, python = self.launcher(config)
        managed_root = config.runtime_dir(self.id)
        if self.module_args is not None:
            if python is None and Path(prefix[0]).is_file():
                python = self.resolve_python_path(config)
            versions = installed_versions(python, self.distributions()) if python and python.exists() else {}
            version = next(iter(versions.values()), None)
            location_path = python
        else:
            probe = self.probe_binary(prefix[0]) if Path(prefix[0]).is_file() else None
            version = probe.version if probe else None
            location_path = Path(prefix[0]) if probe else None
        managed = location_path is not None and managed_root in location_path.parents
        return RuntimeInfo(
            engine=self.id,
            installed=version is not None,
            version=version,
            python_path=str(python) if python else None,
            binary_path=prefix[0] if Path(prefix[0]).is_file() else None,
            location=("managed" if managed else "system") if version else "none",
            can_upgrade=managed or version is None,
        )

    def help_command(self, config: Config | None = None) -> list[str]:
        prefix, _kind, _python = self.launcher(config or Config())
        return [*prefix, *self.help_args]

    def get_config_help(self, config: Config | None = None, timeout: float | None = None) -> ConfigHelp:
        """The engine's full ``--help`` and the flags it accepts, cached per (binary, version)."""
        from enginespec.runtimes import ConfigHelp, cached_help, help_flags, store_help

        config = config or Config()
        command = self.help_command(config)
        version = self.get_runtime_info(config).version
        key = json.dumps([self.id, command, version])
        cached = cached_help(config, key)
        if cached is not None:
            return ConfigHelp.model_validate(cached)
        try:
            out = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=timeout or self.help_timeout,
                errors="replace",
            )
        except subprocess.TimeoutExpired:
            raise CommandError(
                f"{shlex.join(command)}: no help within {timeout or self.help_timeout:g}s"
            ) from None
        except OSError as err:
            raise CommandError(f"{shlex.join(command)}: {err}") from None
        text = out.stdout if out.stdout.strip() else out.stderr
        flags = help_flags(text)
        if out.returncode != 0 or not flags:
            tail = "\n".join((out.stderr or out.stdout).splitlines()[-5:])
            raise CommandError(f"{shlex.join(command)} failed (exit {out.returncode}): {tail}")
        result = ConfigHelp(engine=self.id, command=tuple(command), version=version, text=text, flags=flags)
        store_help(config, key, result.model_dump(mode="json"))
        return result

    def managed_package_spec(self, version: str | None = None) -> str:
        """The requirement installed into the managed venv (``vllm``, ``vllm==0.10.2``, ...)."""
        if self.package is None:
            raise CommandError(f"engine: {self.id} has no Python package to install")
        if version is None or not version.strip():
            return self.package
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
        from packaging.version import InvalidVersion, Version

        text = version.strip()
        try:
            return f"{self.package}=={Version(text)}"
        except InvalidVersion:
            pass
        try:
            return f"{self.package}{SpecifierSet(text)}"
        except InvalidSpecifier:
            raise CommandError(f"version: {version!r} is not a PEP 440 version or specifier") from None
