"""Probing what is installed or running: versions read from an interpreter's metadata (the engine
is never imported), binaries' ``--version``, console scripts' interpreters, runtime info, and the
engine's own ``--help``, cached per (command, version)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from enginespec._host.root import HOST_ROOT, HostRoot
from enginespec.config import Config
from enginespec.definition.launching import PYTHON_NAME, Launcher, resolve_launcher
from enginespec.definition.records import EngineDefinition
from enginespec.errors import HelpError
from enginespec.process.packages import installed_version
from enginespec.process.record import EngineProcess
from enginespec.untrusted.documents import DocumentError, parse_json
from enginespec.untrusted.safewrite import replace_file

# pip writes this /bin/sh trampoline instead of a shebang when the interpreter path is too long.
_TRAMPOLINE = re.compile(r"""^'''exec' "?([^"\s]+)"? "\$0" "\$@"$""", re.MULTILINE)
_OPTION_COLUMN_END = re.compile(r"(?<![,\s])\s{2,}")
_HELP_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][A-Za-z0-9_.-]*)")

#: The most of the version script's answer read as JSON (a few names and versions).
_VERSIONS_BYTES = 1 << 20

_VERSION_SCRIPT = """
import importlib.metadata as m, json, sys
found = {}
for name in sys.argv[1:]:
    try:
        found[name] = m.version(name)
    except m.PackageNotFoundError:
        pass
print(json.dumps(found))
"""


class BinaryProbeResult(BaseModel):
    """Whether a path is the engine's installed binary or console script, and its version."""

    model_config = ConfigDict(frozen=True)

    installed: bool
    binary_path: str
    version: str | None = None
    #: the interpreter a console script runs with (from its shebang or pip's /bin/sh trampoline).
    python_path: str | None = None
    error: str | None = None


class RuntimeInfo(BaseModel):
    """What is installed for an engine (or what a running engine process runs), and where."""

    model_config = ConfigDict(frozen=True)

    engine: str
    installed: bool
    version: str | None = None
    python_path: str | None = None
    binary_path: str | None = None
    location: Literal["managed", "system", "running", "none"] = "none"
    can_upgrade: bool = False


class EngineHelp(BaseModel):
    """The engine's own ``--help`` text, and the flags it accepts."""

    model_config = ConfigDict(frozen=True)

    engine: str
    command: tuple[str, ...]
    version: str | None
    text: str
    flags: frozenset[str]


def installed_versions(
    python: Path | str, distributions: Sequence[str], timeout: float = 30.0
) -> dict[str, str]:
    """Versions of distributions in another interpreter, read with importlib.metadata there."""
    try:
        out = subprocess.run(
            [str(python), "-c", _VERSION_SCRIPT, *distributions],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
        data = parse_json(out.stdout.encode("utf-8", "surrogateescape"), max_bytes=_VERSIONS_BYTES)
    except (OSError, subprocess.SubprocessError, DocumentError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _first_version(python: Path | None, definition: EngineDefinition, timeout: float = 30.0) -> str | None:
    if python is None or not python.exists():
        return None
    return next(iter(installed_versions(python, definition.package.distributions, timeout).values()), None)


def script_python(script: Path) -> Path | None:
    """The interpreter of a console script: its shebang, or pip's /bin/sh trampoline for long paths.
    ``None`` when the file is no Python script or its first line cannot be read as one."""
    try:
        with open(script, "rb") as file:
            head = file.read(4096).decode("utf-8", "replace")
    except OSError:
        return None
    if not head.startswith("#!"):
        return None
    first = head.splitlines()[0][2:].strip()
    if first in ("/bin/sh", "/usr/bin/env sh"):
        match = _TRAMPOLINE.search(head)
        return Path(match.group(1)) if match else None
    try:
        parts = shlex.split(first)
    except ValueError:  # unbalanced quotes: no interpreter the kernel would run either
        return None
    if not parts:
        return None
    if Path(parts[0]).name == "env":
        found = shutil.which(parts[1]) if len(parts) > 1 else None
        return Path(found) if found else None
    return Path(parts[0]) if PYTHON_NAME.fullmatch(Path(parts[0]).name) else None


def python_of_process(pid: int, root: HostRoot = HOST_ROOT) -> Path | None:
    """The interpreter a running process of the host under ``root`` executes: its
    ``/proc/PID/exe`` when that is a Python, never argv[0] (any user can make argv[0] name any
    file)."""
    try:
        exe = Path(root.link(pid, "exe"))
    except OSError:
        return None
    return exe if PYTHON_NAME.fullmatch(exe.name) else None


def probe_binary(
    definition: EngineDefinition, path: str | os.PathLike[str], timeout: float = 10.0
) -> BinaryProbeResult:
    """Whether ``path`` is the engine's installed binary or console script, and its version
    (console scripts: the version in their interpreter's metadata, the engine never imported)."""
    binary = Path(path)
    if not binary.is_file() or not os.access(binary, os.X_OK):
        return BinaryProbeResult(installed=False, binary_path=str(binary), error="not an executable file")
    if not definition.is_binary:
        python = script_python(binary)
        if python is None:
            return BinaryProbeResult(
                installed=False, binary_path=str(binary), error="not a Python console script"
            )
        version = _first_version(python, definition, timeout)
        missing = f"{', '.join(definition.package.distributions)} not installed in {python}"
        return BinaryProbeResult(
            installed=version is not None,
            binary_path=str(binary),
            version=version,
            python_path=str(python),
            error=None if version else missing,
        )
    try:
        out = subprocess.run(
            [str(binary), *definition.launch.version_args],
            capture_output=True,
            text=True,
            timeout=timeout,
            errors="replace",
        )
    except subprocess.TimeoutExpired:
        return BinaryProbeResult(
            installed=False, binary_path=str(binary), error=f"no answer within {timeout:g}s"
        )
    except OSError as err:
        return BinaryProbeResult(installed=False, binary_path=str(binary), error=str(err))
    # llama-server prints its version on stderr.
    version = definition.parse_version(out.stderr + "\n" + out.stdout)
    return BinaryProbeResult(
        installed=version is not None,
        binary_path=str(binary),
        version=version,
        error=None
        if version
        else f"no version in the output of {binary.name} {' '.join(definition.launch.version_args)}",
    )


def _launcher_python(launcher: Launcher) -> Path | None:
    if launcher.python is not None:
        return launcher.python
    return script_python(launcher.program) if launcher.program.is_file() else None


def resolve_python_path(definition: EngineDefinition, config: Config) -> Path | None:
    """The engine's interpreter, in the launcher's order (``ENGINESPEC_<ENGINE>_PYTHON``, the
    managed venv, the interpreter of the console script found on PATH); ``None`` for binaries."""
    return None if definition.is_binary else _launcher_python(resolve_launcher(definition, config))


def running_info(definition: EngineDefinition, running: EngineProcess) -> RuntimeInfo:
    """What a running engine process runs: its interpreter (``/proc/PID/exe``) and the engine's
    version read from the dist-info files in the site-packages it loaded modules from, through the
    root its record was scanned under. Nothing is executed: the process may belong to any user,
    and argv[0] may name anything."""
    root = running._root
    python = python_of_process(running.pid, root)
    version = None
    if not definition.is_binary:
        version = installed_version(running.pid, definition.package.distributions, root)
    return RuntimeInfo(
        engine=definition.id,
        installed=True,
        version=version,
        python_path=str(python) if python else None,
        binary_path=running.exe,
        location="running",
    )


def runtime_info(definition: EngineDefinition, config: Config) -> RuntimeInfo:
    """What is installed for the engine, where the launcher finds it."""
    launcher = resolve_launcher(definition, config)
    program = launcher.program
    exists = program.is_file()
    python = None if definition.is_binary else _launcher_python(launcher)
    if definition.is_binary:
        version = probe_binary(definition, program).version if exists else None
        location_path = program if exists else None
    else:
        version = _first_version(python, definition)
        location_path = python
    managed = location_path is not None and config.runtime_dir(definition.id) in location_path.parents
    return RuntimeInfo(
        engine=definition.id,
        installed=version is not None,
        version=version,
        python_path=str(python) if python else None,
        binary_path=str(program) if exists else None,
        location=("managed" if managed else "system") if version else "none",
        can_upgrade=managed or version is None,
    )


def help_command(definition: EngineDefinition, config: Config) -> list[str]:
    """The command that prints the engine's full help."""
    return [*resolve_launcher(definition, config).prefix, *definition.launch.help_args]


def help_flags(text: str) -> frozenset[str]:
    """Every flag name a ``--help`` text mentions (argparse and llama.cpp layouts)."""
    flags: set[str] = set()
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith("-"):
            # The option column ends at the first wide gap not right after a comma: llama.cpp pads
            # between spellings (`-m,    --model FNAME    model path`), argparse does not.
            options = _OPTION_COLUMN_END.split(stripped, maxsplit=1)[0]
            flags.update(_HELP_FLAG.findall(options))
    return frozenset(flags)


def _help_cache_path(config: Config, key: str) -> Path:
    return config.help_cache_dir() / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


def _cached_help(path: Path) -> EngineHelp | None:
    try:
        return EngineHelp.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None


def _store_help(path: Path, result: EngineHelp) -> None:
    # replaced whole: readers never see half a file
    replace_file(str(path), result.model_dump_json().encode(), field="help cache", parents=True)


def read_help(definition: EngineDefinition, config: Config, timeout: float | None = None) -> EngineHelp:
    """The engine's full ``--help`` and the flags it accepts, cached per (command, version).
    Raises :class:`HelpError` when the help cannot be read."""
    command = help_command(definition, config)
    version = runtime_info(definition, config).version
    cache = _help_cache_path(config, json.dumps([definition.id, command, version]))
    cached = _cached_help(cache)
    if cached is not None:
        return cached
    limit = timeout or definition.launch.help_timeout
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=limit, errors="replace")
    except subprocess.TimeoutExpired:
        raise HelpError(f"{shlex.join(command)}: no help within {limit:g}s") from None
    except OSError as err:
        raise HelpError(f"{shlex.join(command)}: {err}") from None
    text = out.stdout if out.stdout.strip() else out.stderr
    flags = help_flags(text)
    if out.returncode != 0 or not flags:
        tail = "\n".join((out.stderr or out.stdout).splitlines()[-5:])
        raise HelpError(f"{shlex.join(command)} failed (exit {out.returncode}): {tail}")
    result = EngineHelp(engine=definition.id, command=tuple(command), version=version, text=text, flags=flags)
    _store_help(cache, result)
    return result
