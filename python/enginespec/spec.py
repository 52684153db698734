"""EngineSpec: one engine's knowledge (see :mod:`enginespec.definition.records`) with the seed interface a
caller expects on it, as thin delegations to the machinery modules that take a spec."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from enginespec.definition.records import EngineDefinition
from enginespec.errors import CommandError
from enginespec.process.argv import parse_argv
from enginespec.process.urls import base_url

# The machinery is imported by the methods that use it: importing the engines (which every
# scan does) then costs only their data, not the command builder, installer and probes.
if TYPE_CHECKING:
    from enginespec.config import Config
    from enginespec.lifecycle.commands import Command
    from enginespec.lifecycle.installing import InstallOptions, InstallResult
    from enginespec.lifecycle.probing import BinaryProbeResult, EngineHelp, RuntimeInfo
    from enginespec.lifecycle.recipe import Recipe
    from enginespec.lifecycle.running import RunningEngine, Supervision
    from enginespec.process.record import EngineProcess


class EngineSpec(EngineDefinition):
    """Everything enginespec knows about one engine, and what it can do with it.

    Declared as data (``id``, ``signature``, ``launch``, ``flags``, ``package``, ``serving``); an
    engine whose behaviour is more than data subclasses it and overrides a hook
    (``classify_health``, ``parse_version``, ``requirement``; its rules about models:
    ``registry_name``, ``estimate_memory``, ``logged_memory``, ``fit``). Third-party engines
    register an instance or subclass under the ``enginespec.engines`` entry-point group.
    """

    # -- argv ------------------------------------------------------------------------------------

    def detect_invocation(self, argv: Sequence[str]) -> bool:
        """Whether argv is a serving process of this engine (as :func:`enginespec.parse_argv`)."""
        invocation = parse_argv(argv)
        return invocation is not None and invocation.engine == self.id

    def extract_model_path(self, argv: Sequence[str]) -> str | None:
        """The model argv names, when argv is this engine's server (never guessed)."""
        invocation = parse_argv(argv)
        return invocation.model if invocation is not None and invocation.engine == self.id else None

    def extract_served_model_name(self, argv: Sequence[str]) -> str | None:
        """The first name clients use for the model, when argv is this engine's server."""
        invocation = parse_argv(argv)
        return (
            invocation.served_model_name if invocation is not None and invocation.engine == self.id else None
        )

    def health_url(self, host: str, port: int) -> str | None:
        """URL of the health endpoint of a server listening on host:port (see ``urls.base_url``),
        ``None`` when that is no usable address."""
        url = base_url(host, port, sockets=self.serving.socket_host)
        return None if url is None else url + self.health_path

    # -- commands (enginespec.lifecycle.commands) ----------------------------------------------------------

    def plan(
        self, recipe: Recipe, config: Config | None = None, *, strict: bool = False, validate: bool = False
    ) -> Command:
        """The full command: argv, environment delta, injected flags, warnings, launcher."""
        import enginespec.lifecycle.commands as commands
        from enginespec.config import Config

        return commands.plan(self, recipe, config or Config(), strict=strict, validate=validate)

    def build_command(
        self, recipe: Recipe, config: Config | None = None, *, strict: bool = False, validate: bool = False
    ) -> list[str]:
        """The serve argv for a recipe (see :meth:`plan` for defaults, warnings and validation)."""
        return list(self.plan(recipe, config, strict=strict, validate=validate).argv)

    def build_environment(self, recipe: Recipe, config: Config | None = None) -> dict[str, str]:
        """The environment delta for a recipe (visible devices, the venv first on PATH, env_vars)."""
        import enginespec.lifecycle.commands as commands
        from enginespec.config import Config

        return commands.build_environment(self, recipe, config or Config())

    # -- running (enginespec.lifecycle.running) ---------------------------------------------------------

    def start(
        self,
        recipe: Recipe,
        config: Config | None = None,
        *,
        log_dir: str | os.PathLike[str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        supervise: Supervision | None = None,
    ) -> RunningEngine:
        """Launches the recipe on this engine (see :func:`enginespec.launch`)."""
        from enginespec.lifecycle import running as lifecycle

        if recipe.engine != self.id:
            raise CommandError(f"engine: the recipe is for {recipe.engine!r}, not {self.id!r}")
        return lifecycle.launch(recipe, config, log_dir=log_dir, cwd=cwd, supervise=supervise)

    # -- installing (enginespec.lifecycle.installing) ------------------------------------------------------

    def managed_package_spec(self, version: str | None = None) -> str:
        """The requirement installed into the managed venv (``vllm``, ``vllm==0.10.2``, ...)."""
        return self.requirement(version)

    def install(self, options: InstallOptions | None = None, config: Config | None = None) -> InstallResult:
        """Installs the engine idempotently into the managed runtime or ``options.python_path``."""
        from enginespec.config import Config
        from enginespec.lifecycle import installing
        from enginespec.lifecycle.installing import InstallOptions

        return installing.install(self, options or InstallOptions(), config or Config())

    async def install_async(
        self, options: InstallOptions | None = None, config: Config | None = None
    ) -> InstallResult:
        import asyncio

        return await asyncio.to_thread(self.install, options, config)

    # -- probing (enginespec.lifecycle.probing) ------------------------------------------------------------

    def probe_binary(self, path: str | os.PathLike[str], timeout: float = 10.0) -> BinaryProbeResult:
        """Whether ``path`` is this engine's installed binary or console script, and its version."""
        from enginespec.lifecycle import probing

        return probing.probe_binary(self, path, timeout)

    async def probe_binary_async(
        self, path: str | os.PathLike[str], timeout: float = 10.0
    ) -> BinaryProbeResult:
        import asyncio

        return await asyncio.to_thread(self.probe_binary, path, timeout)

    def resolve_python_path(self, config: Config | None = None) -> Path | None:
        """The engine's interpreter (``None`` for binaries), in the launcher's order."""
        from enginespec.config import Config
        from enginespec.lifecycle import probing

        return probing.resolve_python_path(self, config or Config())

    def get_runtime_info(
        self, config: Config | None = None, running: EngineProcess | None = None
    ) -> RuntimeInfo:
        """What is installed (or, given a running process, what that process runs)."""
        from enginespec.config import Config
        from enginespec.lifecycle import probing

        if running is not None:
            return probing.running_info(self, running)
        return probing.runtime_info(self, config or Config())

    async def get_runtime_info_async(
        self, config: Config | None = None, running: EngineProcess | None = None
    ) -> RuntimeInfo:
        import asyncio

        return await asyncio.to_thread(self.get_runtime_info, config, running)

    def get_config_help(self, config: Config | None = None, timeout: float | None = None) -> EngineHelp:
        """The engine's own full ``--help`` and the flags it accepts, cached per (command, version)."""
        from enginespec.config import Config
        from enginespec.lifecycle import probing

        return probing.read_help(self, config or Config(), timeout)
